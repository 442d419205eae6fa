"""`gpuinfra converge` as a user sees it: progress lines, recap, node check table, exit code."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ROOT, Result, run_at_terminal, run_cli
from tests.unit.lab.test_runner import CHECK_MODULE, PLAYBOOK


# A site's inventory may be hosts.yaml, as config check allows.
@pytest.mark.parametrize("inventory", ["hosts.yml", "hosts.yaml"])
def test_converge_reports_progress_tables_and_the_failed_host(
    tmp_path: Path, cli: Any, inventory: str
) -> None:
    (tmp_path / "library").mkdir()
    (tmp_path / "library" / "gpu_node_check.py").write_text(CHECK_MODULE)
    (tmp_path / "play.yml").write_text(PLAYBOOK)
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / inventory).write_text(
        "all:\n  hosts:\n    alpha: {ansible_connection: local}\n"
        "    beta: {ansible_connection: local}\n"
        "  vars: {ansible_python_interpreter: '{{ ansible_playbook_python }}'}\n"
    )
    report = tmp_path / "report.json"
    result = cli(
        "converge", "--site", str(tmp_path / "site"), "--playbook", str(tmp_path / "play.yml"),
        "--report-json", str(report),
    )  # fmt: skip
    assert result.code == 1
    assert result.stderr.strip() == "error: beta: failed at 'Break on beta': beta broke: beta"
    # Without a terminal, progress is one line per task, in order.
    tasks = [line.split("| ")[-1] for line in result.stdout.splitlines() if " | " in line]
    assert tasks == ["Change something", "Break on beta", "Check the node"]
    assert "PLAY RECAP" in result.stdout
    assert "node check alpha: no GPU present" in result.stdout
    assert "driver_version" in result.stdout
    document = json.loads(report.read_text())
    assert document["recap"]["beta"]["failures"] == 1
    assert document["reports"]["alpha"]["summary"] == "no GPU present"


SLOW_PLAYBOOK = """
- name: A long task
  hosts: all
  gather_facts: false
  tasks:
    - name: Wait a long time
      ansible.builtin.command: sleep {marker}
      changed_when: false
"""


def _running(marker: str) -> list[int]:
    """PIDs of processes whose command line holds ``marker``, read from /proc."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        with contextlib.suppress(OSError):
            if marker in cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace"):
                found.append(int(cmdline.parent.name))
    return found


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_ctrl_c_ends_the_playbook_not_only_the_command(tmp_path: Path, signum: int) -> None:
    """ansible-playbook runs in a session of its own: the interrupt (Ctrl-C, or SIGTERM, which
    the command takes as Ctrl-C) must be passed on to it."""
    marker = "987.654"  # a sleep nobody else runs, to find the task's process by
    (tmp_path / "play.yml").write_text(SLOW_PLAYBOOK.format(marker=marker))
    site = _local_site(tmp_path)
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpuinfra", "converge", "--site", str(site),
         "--playbook", str(tmp_path / "play.yml")],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while not _running(f"sleep {marker}"):
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the task never started"
            time.sleep(0.2)
        proc.send_signal(signum)
        _, stderr = proc.communicate(timeout=30)
        assert proc.returncode == 130, stderr
        assert stderr.strip() == (
            "error: interrupted: play.yml stopped with every process it started; a host may be "
            "half-way through a task, and the next converge finishes it"
        )
        # Ansible's workers run in sessions of their own: none may go on with the play.
        time.sleep(1)
        assert _running(str(tmp_path / "play.yml")) == [], "ansible-playbook outlived Ctrl-C"
        assert _running(f"sleep {marker}") == [], "the task kept running after Ctrl-C"
    finally:
        if proc.poll() is None:
            proc.kill()
        for pid in _running(f"sleep {marker}"):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def _local_site(tmp_path: Path, hosts: tuple[str, ...] = ("alpha",)) -> Path:
    """tmp_path/site: ``hosts``, each this machine, reached with the controller's Python."""
    site = tmp_path / "site"
    site.mkdir()
    listed = "".join(f"    {host}: {{ansible_connection: local}}\n" for host in hosts)
    (site / "hosts.yml").write_text(
        f"all:\n  hosts:\n{listed}"
        "  vars: {ansible_python_interpreter: '{{ ansible_playbook_python }}'}\n"
    )
    return site


def _converge(tmp_path: Path, playbook: str, *options: str) -> Result:
    """``gpuinfra converge`` run in ``tmp_path`` on its site/ directory."""
    return run_cli(
        "converge", "--site", "site", "--playbook", playbook, *options, root=ROOT, cwd=tmp_path
    )


ALLOWED_REPORT = "(allowed: a file path in an existing, writable directory)"


@pytest.mark.parametrize(
    ("given", "why"),
    [
        ("out", "'out' is a directory"),
        ("absent/report.json", "'absent/report.json': absent does not exist"),
        ("", "'' is empty"),
    ],
    ids=["directory", "missing-directory", "empty"],
)
def test_a_report_path_that_cannot_be_written_is_refused_before_the_run(
    tmp_path: Path, given: str, why: str
) -> None:
    _local_site(tmp_path)
    (tmp_path / "out").mkdir()
    result = _converge(tmp_path, "nodes.yml", "--report-json", given)
    assert result.code == 2
    assert result.stderr.strip() == (
        f"error: gpuinfra converge: invalid value for '--report-json': {why} {ALLOWED_REPORT} "
        "(see gpuinfra converge --help)"
    )
    # Nothing ran: no playbook line, no recap.
    assert result.stdout == ""


ALLOWED_VAULT = "(allowed: a file holding the vault password, or an executable that prints it)"


@pytest.mark.parametrize(
    ("given", "why"),
    [
        ("absent", "'absent': no such file"),
        ("folder", "'folder' is a directory"),
        ("empty", "'empty' is empty"),
    ],
)
def test_a_vault_password_file_that_holds_no_password_is_refused_before_the_run(
    tmp_path: Path, given: str, why: str
) -> None:
    _local_site(tmp_path)
    (tmp_path / "folder").mkdir()
    (tmp_path / "empty").write_text("\n")
    result = _converge(tmp_path, "nodes.yml", "--vault-password-file", given)
    assert result.code == 2
    assert result.stderr.strip() == (
        f"error: gpuinfra converge: invalid value for '--vault-password-file': {why} "
        f"{ALLOWED_VAULT} (see gpuinfra converge --help)"
    )
    assert result.stdout == ""


@pytest.mark.parametrize(
    ("limit", "line"),
    [
        (
            "alpah",
            "--limit 'alpah' matches no host of site/hosts.yml; did you mean 'alpha'? (allowed: a "
            "host, a group or an Ansible host pattern; hosts: 'alpha' or 'beta'; groups: "
            "'workers')",
        ),
        (
            "workers:!alpha:!beta",
            "--limit 'workers:!alpha:!beta' matches no host of site/hosts.yml (allowed: a host, a "
            "group or an Ansible host pattern; hosts: 'alpha' or 'beta'; groups: 'workers')",
        ),
        # ansible-playbook would run nothing and report success.
        ("", "--limit '': empty (allowed: a host, a group or an Ansible host pattern)"),
    ],
    ids=["misspelt", "pattern", "empty"],
)
def test_a_limit_that_matches_no_host_is_refused_before_the_run(
    tmp_path: Path, limit: str, line: str
) -> None:
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "hosts.yml").write_text(
        "all:\n  children:\n    workers:\n      hosts:\n"
        "        alpha: {ansible_connection: local}\n        beta: {ansible_connection: local}\n"
    )
    result = _converge(tmp_path, "nodes.yml", "--limit", limit)
    assert result.code == 2
    assert result.stderr.strip() == f"error: {line}"
    assert result.stdout == ""


def test_a_playbook_ansible_refuses_ends_with_its_reason(tmp_path: Path) -> None:
    _local_site(tmp_path)
    (tmp_path / "play.yml").write_text(
        "- name: A play\n  hosts: all\n  gather_facts: false\n  tasks:\n"
        "    - name: Misspelt\n      ansible.builtin.pnig: {}\n"
    )
    result = _converge(tmp_path, str(tmp_path / "play.yml"))
    assert result.code == 1
    last = result.stderr.strip().splitlines()[-1]
    why = f"{tmp_path / 'play.yml'}:5:7: couldn't resolve module/action 'ansible.builtin.pnig'."
    assert last.startswith(f"error: ansible-playbook stopped: {why}"), last
    assert "; output in .lab/runner/" in last


def test_converge_of_a_lab_that_has_no_hosts_says_to_start_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("GPUINFRA_LAB_PREFIX", "unitnolab")
    result = run_cli("converge", root=ROOT)
    assert result.code == 2
    assert result.stderr.splitlines() == [
        "error: lab unitnolab has no hosts (.lab/unitnolab/inventory/hosts.yml is not written); "
        "start them with `gpuinfra lab up`, or give --site DIR"
    ]
    assert result.stdout == ""


@pytest.mark.parametrize(
    ("given", "hint"), [("", ""), ("node.yml", "; did you mean 'nodes.yml'?"), ("playbooks", "")]
)
def test_a_playbook_that_is_not_there_is_refused_naming_the_option(
    tmp_path: Path, given: str, hint: str
) -> None:
    _local_site(tmp_path)
    result = _converge(tmp_path, given)
    assert result.code == 2
    known = ", ".join(sorted(p.name for p in (ROOT / "playbooks").glob("*.yml")))
    assert result.stderr.splitlines() == [
        f"error: --playbook {given!r}: no such playbook{hint} (allowed: a playbook file, or a "
        f"name under playbooks/: {known})"
    ]
    assert result.stdout == ""


def test_a_vault_password_file_from_the_environment_is_checked_as_the_option_is(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _local_site(tmp_path)
    monkeypatch.setenv("ANSIBLE_VAULT_PASSWORD_FILE", "absent")
    result = _converge(tmp_path, "nodes.yml")
    assert result.code == 2
    assert result.stderr.splitlines() == [
        f"error: ANSIBLE_VAULT_PASSWORD_FILE 'absent': no such file {ALLOWED_VAULT}"
    ]
    assert result.stdout == ""


PING = """
- name: Ping
  hosts: all
  gather_facts: false
  tasks:
    - name: Ping
      ansible.builtin.ping:
"""


@pytest.mark.parametrize(
    ("limit", "line"),
    [
        (None, "converge: play.yml on site (2 hosts)"),
        ("beta", "converge: play.yml on site (1 of 2 hosts)"),
    ],
)
def test_converge_says_how_many_hosts_it_runs_on(
    tmp_path: Path, limit: str | None, line: str
) -> None:
    _local_site(tmp_path, ("alpha", "beta"))
    (tmp_path / "play.yml").write_text(PING)
    limited = ["--limit", limit] if limit else []
    result = _converge(tmp_path, str(tmp_path / "play.yml"), *limited)
    assert result.code == 0, result.stderr
    assert result.stdout.splitlines()[0] == line


def test_at_a_terminal_converge_shows_its_live_view_and_ends(tmp_path: Path) -> None:
    """At a terminal converge draws a live view of the hosts, and ends with the recap."""
    _local_site(tmp_path)
    (tmp_path / "play.yml").write_text(PING)
    result = run_at_terminal(
        "converge", "--site", "site", "--playbook", str(tmp_path / "play.yml"),
        root=ROOT, cwd=tmp_path, timeout=90,
    )  # fmt: skip
    assert result.code == 0, result.stdout
    assert "converge: play.yml on site (1 host)" in result.stdout
    assert "converge: successful in " in result.stdout


WRITE_PLAYBOOK = """
- name: Write a file
  hosts: all
  gather_facts: false
  tasks:
    - name: The greeting
      ansible.builtin.copy:
        dest: "{dest}"
        content: "hello\\n"
        mode: "0644"
"""


def test_check_shows_what_a_run_would_change_and_changes_nothing(tmp_path: Path) -> None:
    _local_site(tmp_path)
    greeting = tmp_path / "greeting.txt"
    (tmp_path / "play.yml").write_text(WRITE_PLAYBOOK.format(dest=greeting))

    pending = _converge(tmp_path, "play.yml", "--check")

    assert pending.code == 1, pending.stderr
    assert "in check mode: nothing on the hosts is changed" in pending.stdout
    assert "would change: alpha" in pending.stdout
    assert "would change: alpha: The greeting" in pending.stdout
    assert f"+++ {greeting} (after a run)" in pending.stdout
    assert "  +hello" in pending.stdout.splitlines()
    assert "converge --check: a run would make 1 change(s) on 1 host(s); nothing was changed" in (
        pending.stdout
    )
    assert pending.stderr.strip() == (
        "error: alpha: a run would make 1 change(s); see 'would change' above"
    )
    assert not greeting.exists()

    applied = _converge(tmp_path, "play.yml")
    assert applied.code == 0, applied.stderr
    assert greeting.read_text() == "hello\n"

    settled = _converge(tmp_path, "play.yml", "--check")
    assert settled.code == 0, settled.stderr
    assert "converge --check: a run would change nothing; nothing was changed" in settled.stdout
    assert "would change: alpha" not in settled.stdout


def _bare_repository(tmp_path: Path) -> Path:
    for marker in ("versions.yaml", "Pulumi.yaml"):
        (tmp_path / marker).write_text((ROOT / marker).read_text())
    (tmp_path / "inventory" / "lab" / "group_vars").mkdir(parents=True)
    return tmp_path


@pytest.mark.parametrize("command", [("converge",), ("plan",), ("config", "check")])
def test_naming_the_labs_inventory_before_lab_up_says_to_start_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, command: tuple[str, ...]
) -> None:
    monkeypatch.delenv("GPUINFRA_LAB_PREFIX", raising=False)
    root = _bare_repository(tmp_path)
    result = run_cli(*command, "--site", "inventory/lab", root=root, cwd=root)
    assert result.code == 2
    assert result.stderr.splitlines() == [
        "error: --site inventory/lab: lab gpuinfra-lab has no hosts (inventory/lab/hosts.yml is "
        "not written); start them with `gpuinfra lab up`"
    ]
    assert result.stdout == ""


def test_another_labs_inventory_names_its_prefix_in_the_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = _bare_repository(tmp_path)
    (root / ".lab" / "alice" / "inventory").mkdir(parents=True)
    # A bare `lab up` here would start the default lab, not alice's.
    monkeypatch.delenv("GPUINFRA_LAB_PREFIX", raising=False)
    result = run_cli("plan", "--site", ".lab/alice/inventory", root=root, cwd=root)
    assert result.code == 2
    assert result.stderr.splitlines()[-1].endswith(
        "start them with `gpuinfra lab up --prefix alice`"
    )
    # The default lab named while the shell selects another: the command names the default.
    monkeypatch.setenv("GPUINFRA_LAB_PREFIX", "alice")
    result = run_cli("plan", "--site", "inventory/lab", root=root, cwd=root)
    assert result.stderr.splitlines()[-1].endswith("`gpuinfra lab up --prefix gpuinfra-lab`")


def test_a_labs_inventory_with_its_hosts_written_is_read_as_a_site(tmp_path: Path) -> None:
    root = _bare_repository(tmp_path)
    (root / "inventory" / "lab" / "hosts.yml").write_text("all: {}\n")
    result = run_cli("config", "check", "--site", "inventory/lab", root=root, cwd=root)
    assert result.code == 2
    assert "lab up" not in result.stderr
    assert result.stderr.startswith("error: inventory/lab/hosts.yml")

"""Lab settings and the inventory it writes; the podman side is exercised by tests/lab/."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gpuinfra import lab
from gpuinfra.errors import ToolError, UsageError
from tests.conftest import ROOT, left_running, run_cli, run_main
from tests.servers import free_port, tool


def test_settings_come_from_options_then_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUINFRA_LAB_PREFIX", "rolesdev")
    monkeypatch.setenv("GPUINFRA_LAB_PORT_BASE", "2300")
    from_env = lab.Settings.from_env()
    assert (from_env.prefix, from_env.port_base) == ("rolesdev", 2300)
    assert from_env.host_name(2) == "rolesdev-2"
    assert from_env.host_port(2) == 2302
    assert from_env.inventory_dir == from_env.root / ".lab" / "rolesdev" / "inventory"
    explicit = lab.Settings.from_env(prefix="gpuinfra-lab", port_base=2200)
    assert explicit.inventory_dir == explicit.root / "inventory" / "lab"


def test_the_suite_comes_from_the_option_then_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert lab.Settings.from_env(prefix="lab").suite == "bookworm"
    monkeypatch.setenv("GPUINFRA_LAB_SUITE", "trixie")
    assert lab.Settings.from_env(prefix="lab").suite == "trixie"
    assert lab.Settings.from_env(prefix="lab", suite="bookworm").suite == "bookworm"
    monkeypatch.setenv("GPUINFRA_LAB_SUITE", "sid")
    with pytest.raises(UsageError) as info:
        lab.Settings.from_env(prefix="lab")
    assert str(info.value) == (
        "GPUINFRA_LAB_SUITE 'sid': allowed bookworm (Debian 12), trixie (Debian 13)"
    )


@pytest.mark.parametrize("command", ["status", "down"])
def test_lab_status_and_down_do_not_read_the_suite(command: str, tmp_path: Path) -> None:
    # The suite says what lab up builds; a value left in the shell must not block a teardown.
    env = {**os.environ, "GPUINFRA_LAB_SUITE": "sid", "GPUINFRA_LAB_PREFIX": "unit-suite"}
    result = subprocess.run(
        [sys.executable, "-m", "gpuinfra", "lab", command],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert (result.returncode, result.stderr) == (0, "")
    assert "unit-suite" in result.stdout or "nothing (no hosts)" in result.stdout


def test_a_trixie_host_gets_deb822_sources_and_an_image_of_its_own() -> None:
    where, text = lab.apt_sources("trixie")
    assert where == "etc/apt/sources.list.d/debian.sources"
    assert "Suites: trixie trixie-updates" in text and "Suites: trixie-security" in text
    assert lab.apt_sources("bookworm")[0] == "etc/apt/sources.list"
    assert lab.image_name("trixie").startswith("localhost/gpuinfra-lab:trixie-")
    assert lab.image_name("bookworm") != lab.image_name("trixie").replace("trixie", "bookworm")


@pytest.mark.parametrize(
    ("prefix", "port_base", "message"),
    [
        ("Lab_1", None, "lowercase letters"),
        ("9lab", None, "starting with a letter"),
        ("lab", 80, "allowed 1024-65000"),
    ],
)
def test_bad_settings_are_usage_errors(prefix: str, port_base: int | None, message: str) -> None:
    with pytest.raises(UsageError, match=message):
        lab.Settings.from_env(prefix=prefix, port_base=port_base)


@pytest.mark.parametrize("port", ["80", "32768", "65000"])
def test_a_proxy_port_apt_cacher_ng_cannot_listen_on_is_a_usage_error(
    port: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GPUINFRA_APT_PROXY_PORT", port)
    with pytest.raises(UsageError) as error:
        lab.Settings.from_env()
    assert str(error.value) == (
        f"GPUINFRA_APT_PROXY_PORT {port}: allowed 1024-32767 "
        "(apt-cacher-ng 3.7 listens on no port above)"
    )
    monkeypatch.setenv("GPUINFRA_APT_PROXY_PORT", "32767")
    assert lab.Settings.from_env().proxy_port == 32767


@pytest.mark.parametrize("variable", ["GPUINFRA_LAB_PORT_BASE", "GPUINFRA_APT_PROXY_PORT"])
@pytest.mark.parametrize("value", ["2_400", " 2400", "2400.0", "\uff12\uff14\uff10\uff10"])
def test_a_port_in_the_environment_is_digits_only(
    variable: str, value: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(variable, value)
    with pytest.raises(UsageError) as error:
        lab.Settings.from_env()
    assert str(error.value) == f"{variable}={value!r}: expected a port number"


def test_inventory_reaches_each_host_on_loopback(tmp_path: Path) -> None:
    shared_vars = tmp_path / "inventory" / "lab" / "group_vars"
    shared_vars.mkdir(parents=True)
    (shared_vars / "all.yml").write_text("nvidia_driver_reboot: false\n")
    settings = lab.Settings(prefix="unit", port_base=2600, root=tmp_path)
    hosts = [lab.Host("unit-1", 2601, "running"), lab.Host("unit-2", 2602, "running")]
    path = lab.write_inventory(settings, hosts, "http://127.0.0.1:8000/", "AB" * 20)
    listed = subprocess.run(
        [str(Path(sys.executable).parent / "ansible-inventory"), "-i", str(path), "--list"],
        capture_output=True,
        text=True,
        check=True,
    )
    inventory = json.loads(listed.stdout)
    assert inventory["gpu_nodes"]["hosts"] == ["unit-1", "unit-2"]
    hostvars = inventory["_meta"]["hostvars"]
    assert {h: (v["ansible_host"], v["ansible_port"]) for h, v in hostvars.items()} == {
        "unit-1": ("127.0.0.1", 2601),
        "unit-2": ("127.0.0.1", 2602),
    }
    one = hostvars["unit-1"]
    assert one["ansible_ssh_private_key_file"] == str(settings.key_file)
    assert one["nvidia_container_toolkit_repo_key_url"] == "http://127.0.0.1:8000/gpgkey"
    # The lab's site pins the stand-in key it was given, as a site pins its mirror's.
    assert one["nvidia_container_toolkit_repo_key_fingerprint"] == "AB" * 20
    # The committed lab group_vars apply to every lab, whatever its prefix.
    assert one["nvidia_driver_reboot"] is False


def test_lab_up_refuses_a_host_count_out_of_range(cli) -> None:  # type: ignore[no-untyped-def]
    result = cli("lab", "up", "--hosts", "0", "--prefix", "unitnever")
    assert result.code == 2
    assert result.stderr.strip() == "error: --hosts 0: allowed 1-32"


def test_the_lab_site_plans_without_an_integrity_error(tmp_path: Path) -> None:
    """The main job ends with the lab site's plan: its inventory, with the committed group_vars,
    must hold together (the lab's hosts are no cluster's GPU nodes)."""
    shared_vars = tmp_path / "inventory" / "lab" / "group_vars"
    shared_vars.parent.mkdir(parents=True)
    shared_vars.symlink_to(ROOT / "inventory" / "lab" / "group_vars")
    settings = lab.Settings(prefix="unit", port_base=2600, root=tmp_path)
    hosts = [lab.Host("unit-1", 2601, "running"), lab.Host("unit-2", 2602, "running")]
    path = lab.write_inventory(settings, hosts, "http://127.0.0.1:8000/", "AB" * 20)
    result = run_cli("config", "check", "--site", str(path.parent), root=ROOT)
    assert result.code == 0, result.stderr
    assert "valid (2 hosts)" in result.stdout


def test_a_proxy_that_sits_out_sigterm_is_killed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A stand-in named like the lab's apt-cacher-ng: it listens and ignores SIGTERM.
    port_file = tmp_path / "port"
    script = (
        "import os, signal, socket, sys\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen()\n"
        "open(sys.argv[1] + '.new', 'w').write(str(s.getsockname()[1]))\n"
        "os.rename(sys.argv[1] + '.new', sys.argv[1])\n"
        "while True: s.accept()[0].close()\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", script, str(port_file), "apt-cacher-ng"])
    try:
        lab._wait_for(port_file.exists, 10, "the stand-in proxy")
        port = int(port_file.read_text())
        monkeypatch.setattr(lab, "CACHE_DIR", tmp_path)
        monkeypatch.setattr(lab, "PROXY_STOP_GRACE", 1)
        (tmp_path / "apt-cacher-ng" / "run").mkdir(parents=True)
        (tmp_path / "apt-cacher-ng" / "run" / "pid").write_text(f"{proc.pid}\n")

        assert lab.stop_proxy(port) is True
        assert proc.wait(timeout=10) == -9
        assert not lab.proxy_listening(port)
    finally:
        proc.kill()
        proc.wait()


def test_the_status_of_a_lab_without_hosts_says_so_in_one_line() -> None:
    result = run_cli("lab", "status", "--prefix", "gpuinfranohosts")
    assert result.code == 0, result.stderr
    assert result.stdout.splitlines()[0] == (
        "lab gpuinfranohosts: no hosts (`gpuinfra lab up` starts them)"
    )


def test_a_running_proxy_started_with_an_older_configuration_is_told_apart(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # apt-cacher-ng reads its configuration when it starts: one an older checkout started keeps
    # the older settings (DlMaxRetries 1, decision 0080) until the last lab goes down.
    monkeypatch.setattr(lab, "CACHE_DIR", tmp_path)
    port = free_port()
    current = lab.proxy_config(lab.proxy_dir(), port)
    assert "DlMaxRetries: 10\n" in current
    tool("apt-cacher-ng")
    lab.start_proxy(lab.proxy_dir(), port, current.replace("DlMaxRetries: 10", "DlMaxRetries: 1"))
    try:
        assert lab.proxy_outdated(port) is True
        (lab.proxy_dir() / "conf" / "acng.conf").write_text(current)
        assert lab.proxy_outdated(port) is False
    finally:
        os.kill(int((lab.proxy_dir() / "run" / "pid").read_text()), signal.SIGTERM)


def _fake_tool(folder: Path, name: str, body: str) -> None:
    folder.mkdir(exist_ok=True)
    script = folder / name
    script.write_text(f"#!/bin/sh\n{body}\n")
    script.chmod(0o755)


@pytest.fixture
def fake_tools(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A folder ahead of PATH where a test puts stand-ins for the tools the lab runs."""
    folder = tmp_path / "bin"
    folder.mkdir()
    monkeypatch.setenv("PATH", f"{folder}:{os.environ['PATH']}")
    return folder


def test_a_podman_that_never_returns_is_one_line_within_its_bound(fake_tools: Path) -> None:
    # podman waits without end for a storage lock another podman holds.
    _fake_tool(fake_tools, "podman", "exec sleep 60")
    started = time.monotonic()
    with pytest.raises(ToolError, match=r"^podman ps did not finish within 1 s$"):
        lab.podman("ps", timeout=1)
    assert time.monotonic() - started < 10


def test_an_ssh_login_that_never_ends_is_asked_again_until_the_wait_ends(
    fake_tools: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _fake_tool(fake_tools, "ssh", "exec sleep 60")
    monkeypatch.setattr(lab, "SSH_PROBE_S", 0.5)
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(4)
    try:
        host = lab.Host("unit-gpu-1", listener.getsockname()[1], "running")
        settings = lab.Settings(prefix="unit", port_base=2600, root=tmp_path)
        started = time.monotonic()
        with pytest.raises(ToolError, match=r"^timed out after 2s waiting for sshd of unit-gpu-1"):
            lab.wait_ssh(settings, host, seconds=2)
    finally:
        listener.close()
    assert time.monotonic() - started < 10


def test_a_failed_key_generation_is_one_line(fake_tools: Path, tmp_path: Path) -> None:
    _fake_tool(
        fake_tools, "ssh-keygen", "echo 'Saving key failed: Read-only file system' >&2; exit 1"
    )
    settings = lab.Settings(prefix="unit", port_base=2600, root=tmp_path)
    with pytest.raises(ToolError, match=r"^ssh-keygen failed: Saving key failed: Read-only"):
        lab._ensure_key(settings)


@pytest.mark.parametrize(
    ("present", "missing"),
    [((), "podman"), (("podman",), "ssh"), (("podman", "ssh"), "ssh-keygen")],
)
def test_lab_up_without_a_tool_it_needs_says_so_in_one_line_and_starts_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, present: tuple[str, ...], missing: str
) -> None:
    # Only ``present`` on PATH; the apt proxy port is one nothing listens on, so it would be
    # started.
    for name in present:
        (tmp_path / name).write_text("#!/bin/sh\nexit 0\n")
        (tmp_path / name).chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv("GPUINFRA_LAB_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("GPUINFRA_APT_PROXY_PORT", str(free_port()))
    result = run_cli("lab", "up", "--prefix", "unitnopodman", "--hosts", "1")
    assert result.code == 3
    assert result.stderr.strip() == f"error: {missing} is not installed; run scripts/setup.sh"
    assert not (tmp_path / "cache").exists()
    assert not (ROOT / ".lab" / "unitnopodman").exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="lab up runs as root only")
def test_an_apt_proxy_that_does_not_start_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, closed_port: int
) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    # podman is there (never reached); apt-cacher-ng refuses to start.
    for name, body in (
        ("podman", "exit 0"),
        ("apt-cacher-ng", "echo 'Error: cannot bind 127.0.0.1' >&2; exit 1"),
    ):
        (bin_dir / name).write_text(f"#!/bin/sh\n{body}\n")
        (bin_dir / name).chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("GPUINFRA_LAB_CACHE", str(tmp_path / "cache"))
    # Nothing answers there, so the lab starts its proxy.
    port = closed_port
    monkeypatch.setenv("GPUINFRA_APT_PROXY_PORT", str(port))
    result = run_cli("lab", "up", "--prefix", "unitnoproxy", "--hosts", "1")
    assert result.code == 3
    assert result.stderr.strip() == (
        f"error: apt-cacher-ng did not start on 127.0.0.1:{port} (exit 1: Error: cannot bind "
        f"127.0.0.1); its logs are in {tmp_path}/cache/apt-cacher-ng/log"
    )
    assert not (ROOT / ".lab" / "unitnoproxy").exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="lab up runs as root only")
def test_an_apt_proxy_that_does_not_answer_is_ended_within_its_bound_in_one_line(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    closed_port: int,
    fake_tools: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # An apt-cacher-ng that starts, never listens, and has a helper of its own; the tools lab up
    # needs after it are there (never reached).
    pids = tmp_path / "pids"
    for name in ("podman", "ssh", "ssh-keygen"):
        _fake_tool(fake_tools, name, "exit 0")
    _fake_tool(fake_tools, "apt-cacher-ng", f"sleep 300 & echo $$ $! > {pids}; wait")
    monkeypatch.setattr(lab, "CACHE_DIR", tmp_path / "cache")
    monkeypatch.setattr(lab, "PROXY_START_S", 1)
    monkeypatch.setenv("GPUINFRA_APT_PROXY_PORT", str(closed_port))
    started = time.monotonic()
    code, out, err = run_main(capsys, "lab", "up", "--prefix", "unitslowproxy", "--hosts", "1")
    assert time.monotonic() - started < 10
    assert (code, out) == (3, "")
    assert err.splitlines() == [
        f"error: apt-cacher-ng did not answer on 127.0.0.1:{closed_port} within 1 s and was "
        f"ended; its logs are in {tmp_path}/cache/apt-cacher-ng/log"
    ]
    assert left_running(pids) == []
    assert not (ROOT / ".lab" / "unitslowproxy").exists()


def test_a_bounded_run_past_its_time_is_not_held_by_a_pipe_left_open(tmp_path: Path) -> None:
    # What the command started in a session of its own outlives the kill and holds its output.
    pid_file = tmp_path / "pid"
    script = (
        "import subprocess, sys, time\n"
        "helper = subprocess.Popen(['sleep', '60'], start_new_session=True)\n"
        "open(sys.argv[1], 'w').write(str(helper.pid))\n"
        "time.sleep(60)\n"
    )
    started = time.monotonic()
    try:
        assert lab._run_bounded([sys.executable, "-c", script, str(pid_file)], 3, {}) == (None, "")
        assert time.monotonic() - started < 10
    finally:
        if pid_file.exists():
            os.kill(int(pid_file.read_text()), signal.SIGKILL)

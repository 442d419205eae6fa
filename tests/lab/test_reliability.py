"""What goes wrong in the field: a host lost mid-run, an install killed half-way, a mirror that
stops answering, a bad value."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuinfra import lab, versions
from gpuinfra.lab import runner

from .conftest import CONVERGED, FRESH, host_connection

pytestmark = pytest.mark.lab
DRIVER_PIN = versions.pinned().driver("distro").version
TOOLKIT = versions.pinned().nvidia_container_toolkit


def _answered_past_facts(event: runner.Event, progress: runner.Progress, host: str) -> str:
    """The task ``event`` reports ``host`` answered, once the run is past fact gathering; ''
    for any other event."""
    data = event.get("event_data") or {}
    if (
        event.get("event") == "runner_on_ok"
        and data.get("host") == host
        and progress.tasks_started > 2
    ):
        return str(data.get("task"))
    return ""


def test_unreachable_host_fails_alone(
    second_converge: runner.RunResult,
    lab_settings: lab.Settings,
    inventory: Path,
    nodes_playbook: Path,
) -> None:
    assert second_converge.ok
    survivor, victim = CONVERGED
    host = next(h for h in lab.hosts(lab_settings) if h.name == victim)
    stopped: list[str] = []

    def stop_victim(event: runner.Event, progress: runner.Progress) -> None:
        # Once the victim has answered a task past fact gathering, its container goes away at
        # once, as in a power cut. After a graceful stop the host can still answer for a moment
        # while its services go down, and a task that runs then may fail on what it reads there
        # instead of finding the host gone: the host would count as failed, not unreachable.
        if not stopped and (task := _answered_past_facts(event, progress, victim)):
            lab.podman("kill", "--signal", "KILL", victim)
            stopped.append(task)

    try:
        result = runner.converge(
            nodes_playbook, inventory, limit=",".join(CONVERGED), on_event=stop_victim
        )
    finally:
        lab.restart_host(lab_settings, host)
    assert stopped, "the victim never reported a task"
    assert not result.ok
    assert result.failed_hosts() == {victim}
    assert result.recap[victim]["dark"] == 1
    assert any(f.host == victim and f.unreachable for f in result.failures)
    # The other host ran the whole play, node check included.
    assert result.recap[survivor]["failures"] == 0
    assert result.recap[survivor]["dark"] == 0
    assert survivor in result.reports


def test_a_host_that_stops_answering_mid_run_fails_alone(
    second_converge: runner.RunResult,
    lab_settings: lab.Settings,
    inventory: Path,
    nodes_playbook: Path,
) -> None:
    """A frozen host, or one cut off by the network, sends no reset: without SSH keepalives the
    run would wait on it for as long as TCP does, hours. The victim's container is frozen (its
    sshd answers nothing, its socket stays open) and thawed only after WATCHDOG_S: by then the
    keepalives in ansible.cfg must have declared it unreachable, or the thawed host would finish
    its tasks and the run would pass."""
    assert second_converge.ok
    survivor, victim = CONVERGED
    frozen: list[str] = []

    def freeze_victim(event: runner.Event, progress: runner.Progress) -> None:
        if not frozen and (task := _answered_past_facts(event, progress, victim)):
            lab.podman("pause", victim)
            frozen.append(task)
            watchdog.start()

    watchdog = threading.Timer(WATCHDOG_S, _thaw, args=(victim,))
    try:
        result = runner.converge(
            nodes_playbook, inventory, limit=",".join(CONVERGED), on_event=freeze_victim
        )
    finally:
        watchdog.cancel()
        _thaw(victim)
    assert frozen, "the victim never reported a task"
    assert result.failed_hosts() == {victim}
    assert result.recap[victim]["dark"] == 1
    assert result.recap[survivor]["failures"] == 0
    assert survivor in result.reports


# Keepalives every 15 s, four missed (ansible.cfg): the frozen host is dropped about 60 s after
# its last answer. The watchdog leaves twice that.
WATCHDOG_S = 150.0


def _thaw(container: str) -> None:
    state = lab.podman("inspect", "--format", "{{.State.Status}}", container, check=False)
    if state.strip() == "paused":
        lab.podman("unpause", container)


def _dpkg_unpacks_driver(container_id: str) -> bool:
    """Whether apt's dpkg is unpacking NVIDIA packages in the container: the long transaction
    that a lost connection or a killed run interrupts in the field. Read from this machine's
    /proc, which is fast enough to catch it."""
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if container_id not in (proc / "cgroup").read_text():
                continue
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argv[0].endswith(b"dpkg") and b"--unpack" in argv:
            return any(b"nvidia" in arg for arg in argv)
    return False


def test_install_killed_midway_converges_on_next_run(
    lab_settings: lab.Settings, inventory: Path, repo_root: Path
) -> None:
    cmd = [sys.executable, "-m", "gpuinfra", "converge", "--site", str(inventory.parent)]
    proc = subprocess.Popen(
        [*cmd, "--limit", FRESH],
        cwd=repo_root,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    container = lab.podman("inspect", "--format", "{{.Id}}", FRESH).strip()
    deadline = time.monotonic() + 900
    try:
        while not _dpkg_unpacks_driver(container):
            assert proc.poll() is None, "the converge ended before dpkg unpacked the driver"
            assert time.monotonic() < deadline, "dpkg never unpacked the driver"
            time.sleep(0.05)
    finally:
        # The run we started and everything under it: ansible-runner starts ansible-playbook in
        # a session of its own (a pty), which a kill of our process group would not reach.
        if proc.poll() is None:
            for pid in [proc.pid, *runner.descendants(proc.pid)]:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        proc.wait()

    result = runner.converge(repo_root / "playbooks" / "nodes.yml", inventory, limit=FRESH)
    assert result.ok, result.failures
    host = host_connection(lab_settings, FRESH)
    assert host.check_output("dpkg --audit") == ""
    driver = host.package("nvidia-driver")
    assert driver.version == versions.pinned().driver("distro").source.package_version
    assert "nvidia-driver" in host.check_output("apt-mark showhold").split()


def _site_with(lab_inventory: Path, dest: Path, values: dict[str, Any]) -> Path:
    """dest/site: the lab's site with ``values`` over its group_vars/all.yml. A folder of its
    own: anything else a test writes in ``dest`` would be one more inventory beside hosts.yml."""
    site = dest / "site"
    site.mkdir()
    shutil.copy(lab_inventory, site / "hosts.yml")
    shutil.copytree(lab_inventory.parent / "group_vars", site / "group_vars")
    group_vars = site / "group_vars" / "all.yml"
    data = yaml.safe_load(group_vars.read_text()) or {}
    group_vars.write_text(yaml.safe_dump({**data, **values}))
    return site


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        ({"nvidia_driver_source": "runfiles"}, "nvidia_driver_source: 'runfiles' is not allowed"),
        ({"nvidia_driver_version": "535.999.99"}, "Bump versions.yaml, not the inventory"),
    ],
)
def test_bad_inventory_value_stops_before_any_host_is_touched(
    inventory: Path,
    tmp_path: Path,
    cli: Any,
    values: dict[str, Any],
    expected: str,
) -> None:
    site = _site_with(inventory, tmp_path, values)
    result = cli("converge", "--site", str(site))
    assert result.code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    assert "group_vars/all.yml" in lines[0]
    assert expected in lines[0]
    assert "PLAY RECAP" not in result.stdout


def test_role_preflight_refuses_an_unpinned_driver(
    lab_settings: lab.Settings, inventory: Path, nodes_playbook: Path
) -> None:
    # Extra vars bypass the site validation: the role's own preflight must stop the run.
    bad = "535.999.99"
    result = runner.converge(
        nodes_playbook, inventory, limit=CONVERGED[0], extravars={"nvidia_driver_version": bad}
    )
    assert not result.ok
    assert result.changed() == {CONVERGED[0]: 0}
    (failure,) = result.failures
    assert failure.task.startswith("Preflight")
    assert bad in failure.message
    assert DRIVER_PIN in failure.message


@contextmanager
def silent_mirror() -> Iterator[str]:
    """A mirror on loopback that accepts every connection and never answers."""
    held: list[socket.socket] = []
    listener = socket.create_server(("127.0.0.1", 0))

    def accept() -> None:
        while True:
            try:
                held.append(listener.accept()[0])
            except OSError:
                return

    threading.Thread(target=accept, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}/"
    finally:
        listener.close()
        for conn in held:
            conn.close()


STALL_DEADLINE = 20
SILENT_SOURCE = "/etc/apt/sources.list.d/zz-gpuinfra-test-silent.list"


def test_a_silent_mirror_fails_its_host_by_the_deadline_and_the_next_converge_repairs_it(
    second_converge: runner.RunResult,
    lab_settings: lab.Settings,
    inventory: Path,
    nodes_playbook: Path,
    tmp_path: Path,
    cli: Any,
) -> None:
    assert second_converge.ok
    victim, survivor = CONVERGED
    hosts = {name: host_connection(lab_settings, name) for name in CONVERGED}
    package = "nvidia-container-toolkit"
    site = _site_with(inventory, tmp_path, {"node_packages_deadline": STALL_DEADLINE})
    try:
        with silent_mirror() as url:
            # An unheld package opens the toolkit's request on both hosts, so both run apt; only
            # the victim also reads a source that never answers.
            for host in hosts.values():
                host.check_output(f"apt-mark unhold {package}")
            hosts[victim].check_output(f"echo 'deb [trusted=yes] {url} ./' > {SILENT_SOURCE}")
            started = time.monotonic()
            result = cli("converge", "--site", str(site), "--limit", ",".join(CONVERGED))
            took = time.monotonic() - started
            # The deadline killed apt and its fetch methods with it.
            leftover = hosts[victim].run("pgrep -a -f 'apt-get|/usr/lib/apt/methods/'")
    finally:
        hosts[victim].run(f"rm -f {SILENT_SOURCE}")
        repaired = runner.converge(nodes_playbook, inventory, limit=",".join(CONVERGED))

    assert result.code == 1
    assert result.stderr.strip().splitlines() == [
        f"error: {victim}: failed at 'Packages | apt finished the transaction': apt did not "
        f"finish within {STALL_DEADLINE} s; {url} did not answer; check the mirror or proxy, "
        "then converge again"
    ]
    assert took < STALL_DEADLINE + 60, took
    assert leftover.stdout.strip() == ""
    # The other host ran its own transaction and the whole play, node check included.
    assert f"node check {survivor}" in result.stdout
    assert f"node check {victim}" not in result.stdout

    assert repaired.ok, repaired.failures
    again = runner.converge(nodes_playbook, inventory, limit=",".join(CONVERGED))
    assert again.changed() == dict.fromkeys(CONVERGED, 0)
    for host in hosts.values():
        assert host.check_output("dpkg --audit") == ""
        assert package in host.check_output("apt-mark showhold").split()
        assert host.package(package).version == TOOLKIT.source.package_version


HUNG_PACKAGE = "gpuinfra-test-hung-postinst"


def _package_whose_configuration_hangs(dest: Path) -> Path:
    """A .deb whose postinst never ends, as a maintainer script stuck on a device or a lock."""
    tree = dest / HUNG_PACKAGE
    (tree / "DEBIAN").mkdir(parents=True)
    (tree / "DEBIAN" / "control").write_text(
        f"Package: {HUNG_PACKAGE}\nVersion: 1.0\nArchitecture: all\n"
        "Maintainer: gpuinfra tests <tests@example.invalid>\n"
        "Description: a postinst that does not end\n"
    )
    postinst = tree / "DEBIAN" / "postinst"
    postinst.write_text("#!/bin/sh\nexec sleep 3600\n")
    postinst.chmod(0o755)
    deb = dest / f"{HUNG_PACKAGE}_1.0_all.deb"
    subprocess.run(
        ["dpkg-deb", "--root-owner-group", "--build", str(tree), str(deb)],
        check=True,
        capture_output=True,
    )
    return deb


def test_a_hung_repair_of_an_interrupted_run_fails_its_host_by_the_deadline(
    second_converge: runner.RunResult,
    lab_settings: lab.Settings,
    inventory: Path,
    nodes_playbook: Path,
    tmp_path: Path,
    cli: Any,
) -> None:
    assert second_converge.ok
    victim = CONVERGED[0]
    host = host_connection(lab_settings, victim)
    package = "nvidia-container-toolkit"
    deb = _package_whose_configuration_hangs(tmp_path)
    site = _site_with(inventory, tmp_path, {"node_packages_deadline": STALL_DEADLINE})
    try:
        # What a run killed mid-transaction leaves: a package unpacked, not configured. An
        # unheld package opens the toolkit's request, so that the package run, repairs first,
        # takes place.
        lab.podman("cp", str(deb), f"{victim}:/tmp/{deb.name}")
        host.check_output(f"dpkg --unpack /tmp/{deb.name}")
        host.check_output(f"apt-mark unhold {package}")
        started = time.monotonic()
        result = cli("converge", "--site", str(site), "--limit", victim)
        took = time.monotonic() - started
        # Brackets keep the patterns from matching the shell that runs pgrep.
        leftover = host.run("pgrep -a -f '[s]leep 3600|[d]pkg --configure'")
    finally:
        host.run(f"dpkg --purge --force-all {HUNG_PACKAGE}; rm -f /tmp/{deb.name}")
        repaired = runner.converge(nodes_playbook, inventory, limit=victim)

    assert result.code == 1
    assert result.stderr.strip().splitlines() == [
        f"error: {victim}: failed at 'Packages | finish configuring unpacked packages': "
        f"non-zero return code: dpkg --configure -a did not finish within {STALL_DEADLINE} s configuring "
        f"{HUNG_PACKAGE}:all: a maintainer script hangs; see /var/log/dpkg.log and the processes "
        "under dpkg, end them, then converge again"
    ]
    assert took < STALL_DEADLINE + 60, took
    assert leftover.stdout.strip() == ""

    assert repaired.ok, repaired.failures
    assert host.check_output("dpkg --audit") == ""
    assert package in host.check_output("apt-mark showhold").split()

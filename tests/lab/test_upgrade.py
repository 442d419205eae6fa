"""playbooks/upgrade_driver.yml on a converged lab host: the driver role run on its own.

The roll releases the driver's holds, runs nvidia_driver alone (its own package run through
node_packages), checks the node and holds the driver again. No Kubernetes node here, and a
container cannot reboot into a new module, so those steps are reported, not run.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

import pytest

from gpuinfra import lab, versions
from gpuinfra.lab import runner

from .conftest import CONVERGED, NODE_VARS, host_connection

pytestmark = pytest.mark.lab
DRIVER = versions.pinned().driver("distro")


def test_upgrade_roll_reinstates_the_pin_and_the_holds(
    second_converge: runner.RunResult, lab_settings: lab.Settings, inventory: Path, repo_root: Path
) -> None:
    assert second_converge.ok
    target = CONVERGED[0]
    host = host_connection(lab_settings, target)
    result = runner.converge(
        repo_root / "playbooks" / "upgrade_driver.yml", inventory, limit=target
    )
    assert result.ok, result.failures
    assert result.reports[target]["summary"] == "no GPU present"
    # The holds were released and set again: that is the roll's only change on a pinned host.
    assert result.changed()[target] >= 1
    held = set(host.check_output("apt-mark showhold").split())
    assert {"nvidia-driver", "nvidia-kernel-dkms"} <= held
    assert host.package("nvidia-driver").version == DRIVER.source.package_version
    # The toolkit's holds are not the roll's to touch.
    assert "nvidia-container-toolkit" in held


HELD = "/run/gpuinfra-test-lock.held"


def another_package_run(host: Any, lock: str, until: str = "false", most: int = 20) -> None:
    """A process on the host that holds apt's or dpkg's lock, as apt-daily's index refresh or
    unattended-upgrade does: from now until the shell test `until` holds (then 3 s more), at most
    `most` seconds. Returns once the lock is held."""
    script = (
        "import fcntl, subprocess, time\n"
        f"lock = open({lock!r}, 'a')\n"
        "fcntl.lockf(lock, fcntl.LOCK_EX)\n"
        f"open({HELD!r}, 'w').close()\n"
        f"end = time.time() + {most}\n"
        f"while time.time() < end and subprocess.run(['bash', '-c', {until!r}]).returncode:\n"
        "    time.sleep(0.5)\n"
        "time.sleep(3)\n"
    )
    host.run(f"rm -f {HELD}")
    host.check_output(
        f"setsid -f python3 -c {shlex.quote(script)} >/dev/null 2>&1 </dev/null; "
        f"for _ in $(seq 50); do [ -e {HELD} ] && exit 0; sleep 0.2; done; exit 1"
    )


def test_the_roll_waits_for_a_package_run_that_holds_dpkgs_lock(
    second_converge: runner.RunResult, lab_settings: lab.Settings, inventory: Path, repo_root: Path
) -> None:
    """apt-mark does not wait for dpkg's lock: released while unattended-upgrade holds it, the
    holds failed the roll at once."""
    assert second_converge.ok
    target = CONVERGED[0]
    host = host_connection(lab_settings, target)
    another_package_run(host, "/var/lib/dpkg/lock-frontend")
    result = runner.converge(
        repo_root / "playbooks" / "upgrade_driver.yml", inventory, limit=target
    )
    assert result.ok, result.failures
    stdout = (result.artifact_dir / "stdout").read_text()
    assert "RETRYING: [" + target + "]: Release the holds on the driver packages" in stdout
    held = set(host.check_output("apt-mark showhold").split())
    assert {"nvidia-driver", "nvidia-kernel-dkms", "nvidia-container-toolkit"} <= held


# The builds Debian's archive carries for bookworm (checked against the archive's Packages
# indexes): the release and the security update.
OLD = ("535.261.03", "535.261.03-1")
NEW = ("535.309.01", "535.309.01-0+deb12u1")
DRIVER_SET = ("nvidia-driver", "nvidia-kernel-dkms", "nvidia-smi", "firmware-nvidia-gsp")


def bumped_checkout(tmp_path: Path, repo_root: Path, version: str, package_version: str) -> Path:
    """The repository as a pull request that bumps the distro driver in versions.yaml."""
    root = tmp_path / f"bump-{version}"
    root.mkdir()
    for name in ("roles", "plugins", "playbooks", "inventory"):
        (root / name).symlink_to(repo_root / name)
    (root / "ansible.cfg").write_text((repo_root / "ansible.cfg").read_text())
    text = (repo_root / "versions.yaml").read_text()
    assert text.count(f'version: "{OLD[0]}"') == 1 and text.count(f'"{OLD[1]}"') == 1
    text = text.replace(f'version: "{OLD[0]}"', f'version: "{version}"').replace(
        f'"{OLD[1]}"', f'"{package_version}"'
    )
    (root / "versions.yaml").write_text(text)
    return root


def roll(root: Path, inventory: Path, target: str) -> runner.RunResult:
    return runner.converge(
        root / "playbooks" / "upgrade_driver.yml",
        inventory,
        limit=target,
        root=root,
        extravars={"gpuinfra_upgrade_serial": ["50%"], "gpuinfra_upgrade_max_fail_percentage": 0},
    )


def assert_on_build(host: Any, package_version: str) -> None:
    held = set(host.check_output("apt-mark showhold").split())
    for package in DRIVER_SET:
        assert host.package(package).version == package_version, package
        assert package in held, package
    policy = host.check_output("apt-cache policy nvidia-driver")
    candidate = next(line for line in policy.splitlines() if "Candidate:" in line)
    assert candidate.split()[-1] == package_version


def test_a_real_upgrade_by_bumping_versions_yaml_and_back_down(
    second_converge: runner.RunResult,
    lab_settings: lab.Settings,
    inventory: Path,
    repo_root: Path,
    nodes_playbook: Path,
    tmp_path: Path,
) -> None:
    assert second_converge.ok
    if DRIVER.source.package_version != OLD[1]:
        pytest.skip(f"versions.yaml no longer pins {OLD[1]}: move OLD and NEW with it")
    target = CONVERGED[1]
    host = host_connection(lab_settings, target)
    assert_on_build(host, OLD[1])

    # apt-daily refreshes the indexes while the roll's transaction starts: apt-get update does not
    # wait for the index lock on its own.
    phase = "/var/log/gpuinfra/node_packages/phase"
    another_package_run(host, "/var/lib/apt/lists/lock", f"[ {phase} -nt {HELD} ]", most=180)
    up = roll(bumped_checkout(tmp_path, repo_root, *NEW), inventory, target)
    assert up.ok, up.failures
    assert up.reports[target]["summary"] == "no GPU present"
    assert_on_build(host, NEW[1])
    record = json.loads(host.file("/var/lib/gpuinfra/driver-previous.json").content_string)
    assert (record["previous"], record["target"]) == (OLD[1], NEW[1])
    # The driver role's own check read the new build from the packages: a wrong one fails it.
    assert not host.file("/var/lib/gpuinfra/driver-upgrade-failed.json").exists

    down = roll(repo_root, inventory, target)
    assert down.ok, down.failures
    assert_on_build(host, OLD[1])
    record = json.loads(host.file("/var/lib/gpuinfra/driver-previous.json").content_string)
    assert (record["previous"], record["target"]) == (NEW[1], OLD[1])

    # Back on the pin, nodes.yml finds nothing to do.
    again = runner.converge(nodes_playbook, inventory, limit=target, extravars=NODE_VARS)
    assert again.ok, again.failures
    assert again.changed() == {target: 0}


def test_a_failed_upgrade_stops_the_node_with_a_report_and_the_previous_build(
    second_converge: runner.RunResult,
    lab_settings: lab.Settings,
    inventory: Path,
    repo_root: Path,
    tmp_path: Path,
) -> None:
    """A build the archive does not carry: apt fails, the node keeps its report."""
    assert second_converge.ok
    target = CONVERGED[1]
    host = host_connection(lab_settings, target)
    failed = roll(
        bumped_checkout(tmp_path, repo_root, "535.999.01", "535.999.01-1"), inventory, target
    )
    assert not failed.ok
    message = " ".join(" ".join(f.message for f in failed.failures).split())
    assert f"The driver upgrade to 535.999.01-1 failed on {target}" in message
    assert "bump versions.yaml back to the previous build" in message
    report = json.loads(host.file("/var/lib/gpuinfra/driver-upgrade-failed.json").content_string)
    assert report["target"] == "535.999.01-1"
    assert report["failed_task"]
    record = json.loads(host.file("/var/lib/gpuinfra/driver-previous.json").content_string)
    assert record["previous"] == DRIVER.source.package_version

    back = roll(repo_root, inventory, target)
    assert back.ok, back.failures
    assert_on_build(host, DRIVER.source.package_version)
    assert not host.file("/var/lib/gpuinfra/driver-upgrade-failed.json").exists

"""playbooks/nodes.yml on real lab hosts: what a converged GPU node looks like, and idempotency.

The driver comes from Debian's real non-free archive (through the lab's apt proxy), the toolkit
from the stand-in repository served on loopback. The tests in this module share one converge.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import testinfra
import yaml

from gpuinfra import lab, versions
from gpuinfra.addons.base import GPU_TAINT, GPU_TYPE_LABEL
from gpuinfra.lab import aptrepo, runner

from .conftest import CONVERGED, NODE_VARS, host_connection

pytestmark = pytest.mark.lab

PINS = versions.pinned()
DRIVER = PINS.driver("distro")
TOOLKIT = PINS.nvidia_container_toolkit
TOOLKIT_KEYRING = "/etc/apt/keyrings/nvidia-container-toolkit.asc"


def test_first_converge_succeeds_on_every_host(first_converge: runner.RunResult) -> None:
    assert first_converge.failures == []
    assert first_converge.ok
    assert set(first_converge.recap) == set(CONVERGED)


def test_driver_is_the_pinned_build_and_held(node: testinfra.host.Host) -> None:
    for package in ("nvidia-driver", "nvidia-kernel-dkms"):
        pkg = node.package(package)
        assert pkg.is_installed, package
        assert pkg.version == DRIVER.source.package_version, package
    held = node.check_output("apt-mark showhold").split()
    assert {"nvidia-driver", "nvidia-kernel-dkms"} <= set(held)
    # bookworm-security carries a newer build: the preferences keep apt on the pin.
    policy = node.check_output("apt-cache policy nvidia-driver")
    candidate = next(line for line in policy.splitlines() if "Candidate:" in line)
    assert candidate.split()[-1] == DRIVER.source.package_version
    simulated = node.run("apt-get -s -o Debug::NoLocking=1 upgrade")
    assert simulated.rc == 0
    assert "Inst nvidia-driver " not in simulated.stdout


def test_nouveau_is_blacklisted(node: testinfra.host.Host) -> None:
    found = node.run("grep -rhE '^\\s*blacklist\\s+nouveau\\b' /etc/modprobe.d/")
    assert found.rc == 0, "no 'blacklist nouveau' in /etc/modprobe.d"


def test_unattended_upgrades_skip_nvidia_packages(node: testinfra.host.Host) -> None:
    dump = node.check_output("apt-config dump Unattended-Upgrade::Package-Blacklist")
    # The list's own empty head entry would match any name: only real patterns count.
    patterns = [line.split('"')[1] for line in dump.splitlines() if line.count('"') == 2]
    patterns = [p for p in patterns if p]
    assert patterns
    for package in ("nvidia-driver", "nvidia-kernel-dkms", "libnvidia-container1"):
        assert any(re.match(p, package) for p in patterns), (package, patterns)


def test_toolkit_packages_are_the_pinned_ones(node: testinfra.host.Host) -> None:
    for package in TOOLKIT.source.packages:
        pkg = node.package(package)
        assert pkg.is_installed, package
        assert pkg.version == TOOLKIT.source.package_version, package


def test_containerd_accepts_the_nvidia_runtime_dropin(node: testinfra.host.Host) -> None:
    assert node.file("/etc/containerd/conf.d/99-nvidia.toml").is_file
    assert node.service("containerd").is_running
    dump = node.check_output("containerd config dump")
    assert "runtimes.nvidia]" in dump
    assert 'BinaryName = "/usr/bin/nvidia-container-runtime"' in dump


def test_containerd_runs_without_a_locked_memory_limit(node: testinfra.host.Host) -> None:
    # RDMA's buffers are locked memory, and containers inherit containerd's limit. The unit was
    # reloaded with the drop-in and containerd restarted under it: its process has the highest
    # limit the host allows (a lab container may not raise its hard limit: real hosts do).
    assert node.check_output("systemctl show --property LimitMEMLOCK containerd") == (
        "LimitMEMLOCK=infinity"
    )
    assert "changed on disk" not in node.check_output("systemctl status containerd 2>&1 || true")
    pid = node.check_output("systemctl show --property MainPID --value containerd")
    limits = node.check_output(f"cat /proc/{pid}/limits /proc/1/limits")
    containerd, pid1 = [line.split()[3:5] for line in limits.splitlines() if "locked" in line]
    assert containerd[0] == containerd[1] == pid1[1]


def test_node_check_reports_no_gpu(
    first_converge: runner.RunResult, node: testinfra.host.Host, repo_root: Path
) -> None:
    name = node.check_output("hostname")
    report = first_converge.reports[name]
    assert report["summary"] == "no GPU present"
    assert report["gpu_present"] is False
    statuses = {check["name"]: check["status"] for check in report["checks"]}
    assert "skip" in statuses.values()
    assert "fail" not in statuses.values()
    # The same report is on the host, where other tools read it.
    defaults = yaml.safe_load((repo_root / "roles/gpu_node_check/defaults/main.yml").read_text())
    on_host = json.loads(node.file(defaults["gpu_node_check_report_path"]).content_string)
    assert on_host["summary"] == "no GPU present"


KUBELET_DEFAULTS = "/etc/default/kubelet"
KUBELET_LINE = (
    f'KUBELET_EXTRA_ARGS="--node-labels={GPU_TYPE_LABEL}=l4 --register-with-taints='
    f'{GPU_TAINT["key"]}={GPU_TAINT["value"]}:{GPU_TAINT["effect"]}"'
)


def test_kubelet_registers_the_gpu_type_label_and_the_gpu_taint(
    first_converge: runner.RunResult, node: testinfra.host.Host
) -> None:
    lines = node.file(KUBELET_DEFAULTS).content_string.splitlines()
    assert [line for line in lines if line.startswith("KUBELET_EXTRA_ARGS")] == [KUBELET_LINE]
    managed = lines.index(KUBELET_LINE) - 1
    assert lines[managed].startswith("# KUBELET_EXTRA_ARGS is managed by gpuinfra"), lines
    # The lab has no kubelet: the handler says so instead of restarting one.
    assert "kubelet.service" not in node.check_output("systemctl list-unit-files --no-legend")


def test_second_converge_changes_nothing(second_converge: runner.RunResult) -> None:
    assert second_converge.ok, second_converge.failures
    assert second_converge.changed() == dict.fromkeys(CONVERGED, 0)


def test_driver_toolkit_and_containerd_come_in_one_apt_transaction(
    node: testinfra.host.Host,
) -> None:
    history = node.file("/var/log/apt/history.log").content_string
    runs = [run for run in history.split("\n\n") if "Commandline:" in run]

    def installs(run: str, package: str) -> bool:
        return re.search(rf"^Install:.*[ ,]{re.escape(package)}:amd64 \(", run, re.M) is not None

    ours = [run for run in runs if installs(run, "nvidia-driver")]
    assert len(ours) == 1, [r.splitlines()[1] for r in ours]
    for package in ("nvidia-kernel-dkms", *TOOLKIT.source.packages, "containerd"):
        assert installs(ours[0], package), package
    # apt-get itself, not the apt module: no python3-apt was installed to drive it.
    assert not any(installs(run, "python3-apt") for run in runs)


def test_dist_upgrade_and_unattended_upgrades_touch_no_kernel_or_nvidia_package(
    node: testinfra.host.Host,
) -> None:
    """bookworm-security carries a newer driver build than the pin. A lab host runs the machine's
    kernel and has no kernel package, so the kernel half is the patterns, not a held package."""
    dump = node.check_output("apt-config dump Unattended-Upgrade::Package-Blacklist")
    patterns = [
        p for p in (line.split('"')[1] for line in dump.splitlines() if line.count('"') == 2) if p
    ]
    for package in ("linux-image-amd64", "linux-headers-amd64", "linux-image-6.1.0-28-amd64"):
        assert any(re.match(p, package) for p in patterns), (package, patterns)

    simulated = node.run("apt-get -s -o Debug::NoLocking=1 dist-upgrade")
    assert simulated.rc == 0, simulated.stderr
    touched = re.findall(r"(?m)^(?:Inst|Remv) (\S+)", simulated.stdout)
    assert not [p for p in touched if re.match(r"(linux-|nvidia|libnvidia|firmware-nvidia)", p)]

    node.run_expect([0], "apt-get install -y -q --no-install-recommends unattended-upgrades")
    dry = node.run("unattended-upgrade --dry-run --debug")
    assert dry.rc == 0, dry.stdout + dry.stderr
    output = dry.stdout + dry.stderr
    upgraded = " ".join(re.findall(r"(?m)^Packages that will be upgraded: (.*)$", output))
    assert not re.search(r"\b(linux-|nvidia|libnvidia|firmware-nvidia)", upgraded), upgraded
    assert "nvidia-driver" not in re.findall(r"(?m)^Inst (\S+)", output)


PREF = "/etc/apt/preferences.d/gpuinfra-nvidia-driver.pref"
UNATTENDED = "/etc/apt/apt.conf.d/51gpuinfra-nvidia-unattended-upgrades"
NOUVEAU = "/etc/modprobe.d/gpuinfra-blacklist-nouveau.conf"
DROPIN = "/etc/containerd/conf.d/99-nvidia.toml"


def test_a_keyring_holding_another_key_is_written_again_with_the_pinned_one(
    second_converge: runner.RunResult,
    lab_settings: lab.Settings,
    inventory: Path,
    nodes_playbook: Path,
    toolkit_repo: aptrepo.Server,
    tmp_path: Path,
) -> None:
    assert second_converge.ok, second_converge.failures
    name = CONVERGED[0]
    host = host_connection(lab_settings, name)
    # Another key, as a tampered keyring would hold: made here, written on the host.
    other = aptrepo.build(tmp_path / "other")
    assert other.fingerprint != toolkit_repo.fingerprint
    armoured = other.key_file.read_text()
    host.run_expect([0], f"cat > {TOOLKIT_KEYRING} <<'EOF'\n{armoured}EOF")
    repaired = runner.converge(nodes_playbook, inventory, limit=name, extravars=NODE_VARS)
    assert repaired.ok, repaired.failures
    served = (toolkit_repo.directory / aptrepo.KEY_FILE).read_text()
    assert host.file(TOOLKIT_KEYRING).content_string == served
    # apt trusts the repository again with the pinned key.
    host.run_expect(
        [0],
        "apt-get update -o Dir::Etc::sourceparts=- -o APT::Get::List-Cleanup=0 "
        "-o Dir::Etc::sourcelist=/etc/apt/sources.list.d/nvidia-container-toolkit.list",
    )


def test_drift_on_a_converged_host_is_put_back_and_a_changed_input_is_written(
    second_converge: runner.RunResult,
    lab_settings: lab.Settings,
    inventory: Path,
    nodes_playbook: Path,
) -> None:
    """Runs last in this module: it changes the host, then converges it back."""
    assert second_converge.ok, second_converge.failures
    name = CONVERGED[0]
    host = host_connection(lab_settings, name)
    pref, dropin = host.file(PREF).content_string, host.file(DROPIN).content_string
    host.run_expect(
        [0],
        f"echo '# local edit' >> {PREF} && chmod 600 {NOUVEAU} && rm {DROPIN}"
        " && systemctl stop containerd && apt-mark unhold nvidia-smi"
        f" && sed -i 's/^KUBELET_EXTRA_ARGS=.*/KUBELET_EXTRA_ARGS=--local-edit/' {KUBELET_DEFAULTS}",
    )

    repaired = runner.converge(nodes_playbook, inventory, limit=name, extravars=NODE_VARS)
    assert repaired.ok, repaired.failures
    assert repaired.changed()[name] > 0
    assert host.file(PREF).content_string == pref
    assert host.file(NOUVEAU).mode == 0o644
    assert host.file(DROPIN).content_string == dropin
    assert host.service("containerd").is_running
    assert "nvidia-smi" in host.check_output("apt-mark showhold").split()
    assert KUBELET_LINE in host.file(KUBELET_DEFAULTS).content_string.splitlines()

    # An input that only a template reads: the stamp's fingerprint changes, the file is written.
    extra = {"nvidia_driver_unattended_blacklist": ["nvidia-", "gpuinfra-test-"]}
    changed = runner.converge(
        nodes_playbook, inventory, limit=name, extravars={**NODE_VARS, **extra}
    )
    assert changed.ok, changed.failures
    assert '"gpuinfra-test-";' in host.file(UNATTENDED).content_string

    back = runner.converge(nodes_playbook, inventory, limit=name, extravars=NODE_VARS)
    assert back.ok, back.failures
    assert '"gpuinfra-test-";' not in host.file(UNATTENDED).content_string
    again = runner.converge(nodes_playbook, inventory, limit=name, extravars=NODE_VARS)
    assert again.changed() == {name: 0}

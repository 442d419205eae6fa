"""playbooks/nodes.yml on a Debian 13 (trixie) lab host: the host takes the builds versions.yaml
pins for trixie, its only apt sources are deb822, and a second converge changes nothing.

One host of its own lab (its own prefix, ports above the main lab's), built by the lab's recipe
with bookworm's debootstrap.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import testinfra
import yaml

from gpuinfra import lab, versions
from gpuinfra.lab import aptrepo, runner

from .conftest import CONVERGED, PREFIX, host_connection, side_lab, side_lab_running

pytestmark = pytest.mark.lab

PINS = versions.pinned()
DRIVER = PINS.driver("distro").releases["trixie"]
CONTAINERD = PINS.containerd.releases["trixie"]
HOST = f"{PREFIX}t-1"


@pytest.fixture(scope="module")
def trixie_settings() -> lab.Settings:
    return side_lab("t", suite="trixie")


@pytest.fixture(scope="module")
def trixie_inventory(trixie_settings: lab.Settings, toolkit_repo: aptrepo.Server) -> Iterator[Path]:
    yield from side_lab_running(trixie_settings, 1, toolkit_repo)


@pytest.fixture(scope="module")
def converges(trixie_inventory: Path, repo_root: Path) -> tuple[runner.RunResult, runner.RunResult]:
    playbook = repo_root / "playbooks" / "nodes.yml"
    first = runner.converge(playbook, trixie_inventory)
    assert first.ok, first.failures
    second = runner.converge(playbook, trixie_inventory)
    return first, second


@pytest.fixture(scope="module")
def trixie(
    trixie_settings: lab.Settings, converges: tuple[runner.RunResult, runner.RunResult]
) -> testinfra.host.Host:
    del converges
    return host_connection(trixie_settings, HOST)


def test_the_host_is_debian_13_with_deb822_sources_only(trixie: testinfra.host.Host) -> None:
    assert trixie.system_info.codename == "trixie"
    assert trixie.check_output("cut -d. -f1 /etc/debian_version") == "13"
    assert not trixie.file("/etc/apt/sources.list").exists
    assert trixie.file("/etc/apt/sources.list.d/debian.sources").is_file


def test_the_driver_and_containerd_are_trixies_pinned_builds_and_held(
    trixie: testinfra.host.Host,
) -> None:
    for package in ("nvidia-driver", "nvidia-kernel-dkms"):
        assert trixie.package(package).version == DRIVER.package_version, package
    assert trixie.package("containerd").version == CONTAINERD.package_version
    held = set(trixie.check_output("apt-mark showhold").split())
    assert {"nvidia-driver", "nvidia-kernel-dkms"} <= held
    policy = trixie.check_output("apt-cache policy nvidia-driver")
    candidate = next(line for line in policy.splitlines() if "Candidate:" in line)
    assert candidate.split()[-1] == DRIVER.package_version


def test_containerd_1_7_accepts_the_nvidia_runtime_dropin(trixie: testinfra.host.Host) -> None:
    assert trixie.service("containerd").is_running
    dump = trixie.check_output("containerd config dump")
    assert 'BinaryName = "/usr/bin/nvidia-container-runtime"' in dump


def test_the_node_check_expects_trixies_driver(trixie: testinfra.host.Host) -> None:
    report = trixie.file("/var/lib/gpuinfra/node-check.json").content_string
    assert DRIVER.version in report


def test_a_second_converge_changes_nothing(
    converges: tuple[runner.RunResult, runner.RunResult],
) -> None:
    second = converges[1]
    assert second.ok, second.failures
    assert second.changed() == {HOST: 0}


def _site_of_one(folder: Path, settings: lab.Settings, lab_host: str, name: str) -> Path:
    """A site whose one GPU node, called ``name``, is ``lab_host``."""
    port = next(h.port for h in lab.hosts(settings) if h.name == lab_host)
    hosts = folder / "hosts.yml"
    folder.mkdir(parents=True)
    node = {
        "ansible_host": "127.0.0.1",
        "ansible_port": port,
        "ansible_user": "root",
        "ansible_ssh_private_key_file": str(settings.key_file),
        "ansible_ssh_common_args": lab.LAB_SSH_ARGS,
    }
    hosts.write_text(yaml.safe_dump({"all": {"children": {"gpu_nodes": {"hosts": {name: node}}}}}))
    return hosts


def _expected_driver(result: runner.RunResult, name: str) -> str:
    checks = {c["name"]: c for c in result.reports[name]["checks"]}
    return str(checks["driver_version"]["expected"])


def test_a_host_named_like_another_sites_is_judged_on_its_own_release(
    tmp_path: Path,
    repo_root: Path,
    trixie_settings: lab.Settings,
    trixie_inventory: Path,
    lab_settings: lab.Settings,
    lab_hosts: list[lab.Host],
) -> None:
    """Two sites that both call a host gpu-01 must not lend each other its facts, nor may a host
    reinstalled or upgraded to another release keep those of its old one: a fact cache kept
    between runs, under the inventory name alone, did both (decision 0092)."""
    del trixie_inventory, lab_hosts
    name = f"{PREFIX}-samename"
    bookworm_site = _site_of_one(tmp_path / "bookworm", lab_settings, CONVERGED[0], name)
    trixie_site = _site_of_one(tmp_path / "trixie", trixie_settings, HOST, name)
    check = repo_root / "playbooks" / "check.yml"
    on_bookworm = runner.converge(check, bookworm_site)
    on_trixie = runner.converge(check, trixie_site)

    assert _expected_driver(on_bookworm, name) == PINS.driver("distro").version
    # The second site's host is another machine on another release: its facts are its own (its
    # Python too: bookworm's python3.11 is not on trixie), and the node check expects the build
    # pinned for trixie.
    assert _expected_driver(on_trixie, name) == DRIVER.version

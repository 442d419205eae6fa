"""playbooks/nodes.yml with containerd from Docker's repository, on a Debian 12 lab host.

Docker's repository is out of reach here, so a stand-in of it is served on loopback: suite
bookworm, component stable, and a containerd.io named, versioned and related (conflicts with,
replaces and provides containerd and runc) as versions.yaml pins Docker's, carrying Debian's own
containerd and runc binaries and a config.toml that disables CRI, as Docker's package does.

Two hosts of their own lab (its own prefix, ports above the main lab's and the trixie lab's): a
fresh one, and one first converged on Debian's containerd (the distro source). Both then converge
with the docker source pointed at the stand-in, then again, then with the distro source, which
the role refuses.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import testinfra

from gpuinfra import lab, versions
from gpuinfra.lab import aptrepo, runner

from .conftest import PREFIX, host_connection, side_lab, side_lab_running

pytestmark = pytest.mark.lab

PINS = versions.pinned()
CONTAINERD_IO = PINS.containerd_docker.source.package_version
# Debian 12's containerd at its pin, and runc: the stand-in package's binaries.
DEBIAN_BINARIES = [f"containerd={PINS.containerd.source.package_version}", "runc"]
FRESH = f"{PREFIX}d-1"
SWITCHED = f"{PREFIX}d-2"
HOSTS = (FRESH, SWITCHED)


@pytest.fixture(scope="module")
def docker_repo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[aptrepo.Repository]:
    work = tmp_path_factory.mktemp("docker-repo")
    debs = aptrepo.debian_debs(work / "debian", DEBIAN_BINARIES)
    repo = aptrepo.build_docker(work / "repo", debs)
    yield repo


@pytest.fixture(scope="module")
def docker_settings() -> lab.Settings:
    return side_lab("d")


@pytest.fixture(scope="module")
def docker_inventory(docker_settings: lab.Settings, toolkit_repo: aptrepo.Server) -> Iterator[Path]:
    yield from side_lab_running(docker_settings, len(HOSTS), toolkit_repo)


def docker_vars(server: aptrepo.Server, repo: aptrepo.Repository) -> dict[str, Any]:
    return {
        "nvidia_container_toolkit_containerd_source": "docker",
        "nvidia_container_toolkit_containerd_repo_url": server.url.rstrip("/"),
        "nvidia_container_toolkit_containerd_repo_key_url": server.url + aptrepo.DOCKER_KEY_FILE,
        "nvidia_container_toolkit_containerd_repo_key_fingerprint": repo.fingerprint,
    }


@pytest.fixture(scope="module")
def converges(
    docker_inventory: Path, docker_repo: aptrepo.Repository, repo_root: Path
) -> Iterator[tuple[runner.RunResult, runner.RunResult, runner.RunResult]]:
    playbook = repo_root / "playbooks" / "nodes.yml"
    # Debian's containerd first, on the host that then moves to Docker's.
    distro = runner.converge(playbook, docker_inventory, limit=SWITCHED)
    assert distro.ok, distro.failures
    with aptrepo.serving(docker_repo.path) as server:
        extravars = docker_vars(server, docker_repo)
        first = runner.converge(playbook, docker_inventory, extravars=extravars)
        assert first.ok, first.failures
        second = runner.converge(playbook, docker_inventory, extravars=extravars)
        back = runner.converge(
            playbook,
            docker_inventory,
            extravars={**extravars, "nvidia_container_toolkit_containerd_source": "distro"},
        )
        yield first, second, back


@pytest.fixture(scope="module", params=HOSTS)
def node(
    request: pytest.FixtureRequest,
    docker_settings: lab.Settings,
    converges: tuple[runner.RunResult, runner.RunResult, runner.RunResult],
) -> testinfra.host.Host:
    del converges
    return host_connection(docker_settings, request.param)


def test_containerd_io_is_installed_at_the_pin_and_held(node: testinfra.host.Host) -> None:
    assert node.package("containerd.io").version == CONTAINERD_IO
    assert "containerd.io" in node.check_output("apt-mark showhold").split()
    # It replaced Debian's packages, whose names it provides.
    assert not node.package("containerd").is_installed
    assert not node.package("runc").is_installed
    policy = node.check_output("apt-cache policy containerd.io")
    candidate = next(line for line in policy.splitlines() if "Candidate:" in line)
    assert candidate.split()[-1] == CONTAINERD_IO
    source = node.file("/etc/apt/sources.list.d/docker-containerd.list").content_string
    assert " bookworm stable" in source
    assert "signed-by=/etc/apt/keyrings/docker-containerd.asc" in source


def test_containerd_runs_with_cri_enabled_and_the_nvidia_runtime(
    node: testinfra.host.Host,
) -> None:
    assert node.service("containerd").is_running
    config = node.file("/etc/containerd/config.toml").content_string
    assert "disabled_plugins" not in config
    plugins = node.check_output("ctr plugins ls")
    cri = [line.split() for line in plugins.splitlines() if "io.containerd.grpc.v1" in line]
    assert ["io.containerd.grpc.v1", "cri", "linux/amd64", "ok"] in cri, plugins
    dump = node.check_output("containerd config dump")
    assert 'BinaryName = "/usr/bin/nvidia-container-runtime"' in dump
    assert node.service("containerd").is_enabled


def test_the_package_file_that_disabled_cri_is_kept_beside_the_role_s(
    docker_settings: lab.Settings,
    converges: tuple[runner.RunResult, runner.RunResult, runner.RunResult],
) -> None:
    del converges
    fresh = host_connection(docker_settings, FRESH)
    backups = [
        name
        for name in fresh.check_output("ls /etc/containerd").split()
        if name.startswith("config.toml.") and name.endswith("~")
    ]
    assert len(backups) == 1, backups
    assert (
        'disabled_plugins = ["cri"]' in fresh.file(f"/etc/containerd/{backups[0]}").content_string
    )


def test_a_second_converge_changes_nothing(
    converges: tuple[runner.RunResult, runner.RunResult, runner.RunResult],
) -> None:
    second = converges[1]
    assert second.ok, second.failures
    assert second.changed() == dict.fromkeys(HOSTS, 0)


def test_going_back_to_the_distro_source_is_refused_and_changes_nothing(
    converges: tuple[runner.RunResult, runner.RunResult, runner.RunResult],
    node: testinfra.host.Host,
) -> None:
    back = converges[2]
    assert not back.ok
    message = " ".join(str(failure) for failure in back.failures)
    assert "runs Docker's containerd.io" in message, back.failures
    assert "apt-mark unhold containerd.io" in message
    assert back.changed() == dict.fromkeys(HOSTS, 0)
    assert back.failed_hosts() == set(HOSTS)
    assert node.package("containerd.io").version == CONTAINERD_IO

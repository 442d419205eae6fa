"""playbooks/nodes.yml with containerd from Docker's repository, on a Debian 12 lab host.

Docker's repository is out of reach here, so a stand-in of it is served on loopback: suite
bookworm, component stable, and a containerd.io named, versioned and related (conflicts with,
replaces and provides containerd and runc) as versions.yaml pins Docker's, carrying Debian's own
containerd and runc binaries and a config.toml that disables CRI, as Docker's package does.

Two hosts of their own lab (its own prefix, ports above the main lab's and the trixie lab's): a
fresh one, and one first converged on Debian's containerd (the distro source). Both then converge
with the docker source pointed at the stand-in, then again, then with the distro source, which
the role refuses.

The stand-in's binaries are Debian 12's containerd 1.6. Docker's containerd.io is containerd 2,
which reads version 2 files by migrating them. So the files the role wrote are also read and
served by a containerd 2 binary from Debian's development suite (sid), which apt fetches and
checks, on one of the hosts: extracted beside the host's own containerd, never installed.
"""

from __future__ import annotations

import re
import tomllib
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


# apt's options for a list of sid's packages of its own, apart from the host's sources. A frozen
# mirror serves a sid Release past its Valid-Until date; the signature is still checked. The
# host's fetch bounds (roles/node_packages) apply, and each apt run has a deadline of its own.
SID_APT = (
    "-o Dir::Etc::SourceList=/tmp/sid/sid.list -o Dir::Etc::SourceParts=/tmp/sid/parts "
    "-o Dir::State::Lists=/tmp/sid/lists -o Acquire::Check-Valid-Until=false"
)
CONTAINERD_2 = "/opt/gpuinfra-test/containerd-2/usr/bin"


@pytest.fixture(scope="module")
def containerd_2(
    docker_settings: lab.Settings,
    converges: tuple[runner.RunResult, runner.RunResult, runner.RunResult],
) -> testinfra.host.Host:
    """The fresh host, with sid's containerd extracted under CONTAINERD_2."""
    del converges
    fresh = host_connection(docker_settings, FRESH)
    fresh.check_output(
        "mkdir -p /tmp/sid/lists/partial /tmp/sid/parts /opt/gpuinfra-test/containerd-2 && "
        "echo 'deb http://deb.debian.org/debian sid main' > /tmp/sid/sid.list && "
        f"timeout 300 apt-get {SID_APT} -qq update && cd /tmp/sid && "
        f"timeout 300 apt-get {SID_APT} -qq download containerd/sid && "
        "dpkg-deb -x /tmp/sid/containerd_*.deb /opt/gpuinfra-test/containerd-2"
    )
    version = fresh.check_output(f"{CONTAINERD_2}/containerd --version")
    assert re.search(r" v?2\.\d+\.\d+", version), version
    return fresh


def test_containerd_2_reads_the_nvidia_runtime_from_the_roles_files(
    containerd_2: testinfra.host.Host,
) -> None:
    dump = tomllib.loads(
        containerd_2.check_output(
            f"{CONTAINERD_2}/containerd --config /etc/containerd/config.toml config dump"
        )
    )
    assert dump["version"] == 3
    cri = dump["plugins"]["io.containerd.cri.v1.runtime"]
    runtimes = cri["containerd"]["runtimes"]
    assert runtimes["nvidia"]["runtime_type"] == "io.containerd.runc.v2"
    assert runtimes["nvidia"]["options"]["BinaryName"] == "/usr/bin/nvidia-container-runtime"
    assert runtimes["nvidia"]["options"]["SystemdCgroup"] is True
    assert runtimes["runc"]["options"]["SystemdCgroup"] is True
    # The same default runtime as the host's own containerd reads from the same files.
    own = tomllib.loads(containerd_2.check_output("containerd config dump"))
    default = own["plugins"]["io.containerd.grpc.v1.cri"]["containerd"]["default_runtime_name"]
    assert cri["containerd"]["default_runtime_name"] == default
    # containerd 2 hands CDI devices to the pods itself (the integrity check counts on it).
    assert cri["enable_cdi"] is True


def test_containerd_2_serves_cri_from_the_roles_files(containerd_2: testinfra.host.Host) -> None:
    # Its own root, state and socket, so that the host's containerd runs on untouched.
    started = containerd_2.check_output(
        "mkdir -p /run/gpuinfra-c2 /var/lib/gpuinfra-c2 && "
        f"{{ {CONTAINERD_2}/containerd --config /etc/containerd/config.toml "
        "--root /var/lib/gpuinfra-c2 --state /run/gpuinfra-c2 "
        "--address /run/gpuinfra-c2/containerd.sock >/run/gpuinfra-c2/log 2>&1 & echo $!; }"
    )
    pid = int(started.split()[-1])
    try:
        plugins = containerd_2.check_output(
            "for i in $(seq 50); do [ -S /run/gpuinfra-c2/containerd.sock ] && break; sleep 0.2; "
            f"done; {CONTAINERD_2}/ctr --address /run/gpuinfra-c2/containerd.sock plugins ls"
        )
    finally:
        containerd_2.run(f"kill {pid}")
    rows = [line.split() for line in plugins.splitlines()]
    assert ["io.containerd.grpc.v1", "cri", "-", "ok"] in rows, plugins
    assert ["io.containerd.cri.v1", "runtime", "linux/amd64", "ok"] in rows, plugins
    assert containerd_2.service("containerd").is_running

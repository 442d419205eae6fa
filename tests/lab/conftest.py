"""The test suite's own lab: three Debian 12 hosts and the stand-in toolkit repository.

The prefix and port base keep it apart from a developer's lab (gpuinfra-lab, 2200) and from
other labs on this machine. Hosts 1 and 2 converge playbooks/nodes.yml once for the whole
session; host 3 stays fresh for the interrupted-install test.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import testinfra

from gpuinfra import lab
from gpuinfra.lab import aptrepo, runner

PREFIX = os.environ.get("GPUINFRA_TEST_LAB_PREFIX", "gpuinfratest")
PORT_BASE = int(os.environ.get("GPUINFRA_TEST_LAB_PORT_BASE", "2400"))
CONVERGED = (f"{PREFIX}-1", f"{PREFIX}-2")
FRESH = f"{PREFIX}-3"
# The suite's converges of nodes.yml treat its hosts as Kubernetes nodes with an L4, so the
# kubelet registration role runs. Extra vars, not the lab's group_vars: upgrade_driver.yml would
# then try to drain the lab hosts from a cluster that does not exist.
NODE_VARS = {"gpuinfra_k8s_node": True, "gpu_node_registration_gpu_type": "l4"}


@pytest.fixture(scope="session")
def toolkit_repo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[aptrepo.Server]:
    repo = aptrepo.build(tmp_path_factory.mktemp("toolkit-repo") / "repo")
    with aptrepo.serving(repo.path) as server:
        yield server


@pytest.fixture(scope="session")
def lab_settings() -> lab.Settings:
    if os.geteuid() != 0:
        pytest.fail("the lab tests run podman as root: run them as root")
    return lab.Settings.from_env(prefix=PREFIX, port_base=PORT_BASE)


@pytest.fixture(scope="session")
def lab_hosts(lab_settings: lab.Settings, toolkit_repo: aptrepo.Server) -> Iterator[list[lab.Host]]:
    # A lab left over from an interrupted session would carry its state into this one.
    lab.down(lab_settings)
    hosts = lab.up(
        lab_settings, 3, repo_url=toolkit_repo.url, repo_fingerprint=toolkit_repo.fingerprint
    )
    try:
        yield hosts
    finally:
        lab.down(lab_settings)


@pytest.fixture(scope="session")
def inventory(lab_settings: lab.Settings, lab_hosts: list[lab.Host]) -> Path:
    del lab_hosts
    return lab_settings.hosts_file


@pytest.fixture(scope="session")
def nodes_playbook(repo_root: Path) -> Path:
    return repo_root / "playbooks" / "nodes.yml"


@pytest.fixture(scope="session")
def first_converge(inventory: Path, nodes_playbook: Path) -> runner.RunResult:
    return runner.converge(
        nodes_playbook, inventory, limit=",".join(CONVERGED), extravars=NODE_VARS
    )


@pytest.fixture(scope="session")
def second_converge(
    first_converge: runner.RunResult, inventory: Path, nodes_playbook: Path
) -> runner.RunResult:
    assert first_converge.ok, first_converge.failures
    return runner.converge(
        nodes_playbook, inventory, limit=",".join(CONVERGED), extravars=NODE_VARS
    )


# Labs of their own beside the suite's main lab, for hosts no other test may touch: the letter
# ends their prefix, the offset starts their ports above the main lab's (host N on PORT_BASE + N,
# N <= 32). One table, so that no two share a name or a port.
SIDE_LABS = {"t": 40, "d": 45, "c": 50}


def side_lab(letter: str, suite: str | None = None) -> lab.Settings:
    """The settings of the side lab named by ``letter`` (SIDE_LABS), of Debian ``suite``."""
    return lab.Settings.from_env(
        prefix=f"{PREFIX}{letter}", port_base=PORT_BASE + SIDE_LABS[letter], suite=suite
    )


def side_lab_running(
    settings: lab.Settings, hosts: int, toolkit_repo: aptrepo.Server
) -> Iterator[Path]:
    """Fresh hosts of a side lab for one module's tests; its inventory while they run, removed
    after (also what an earlier, interrupted run left)."""
    lab.down(settings)
    lab.up(settings, hosts, repo_url=toolkit_repo.url, repo_fingerprint=toolkit_repo.fingerprint)
    try:
        yield settings.hosts_file
    finally:
        lab.down(settings)


def host_connection(settings: lab.Settings, name: str) -> testinfra.host.Host:
    port = next(h.port for h in lab.hosts(settings) if h.name == name)
    return testinfra.get_host(
        f"ssh://root@127.0.0.1:{port}",
        ssh_identity_file=str(settings.key_file),
        ssh_extra_args="-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null "
        "-o LogLevel=ERROR",
    )


@pytest.fixture(scope="session", params=CONVERGED)
def node(
    request: pytest.FixtureRequest, lab_settings: lab.Settings, first_converge: runner.RunResult
) -> testinfra.host.Host:
    """A converged host, for assertions with testinfra."""
    assert first_converge.ok, first_converge.failures
    return host_connection(lab_settings, request.param)

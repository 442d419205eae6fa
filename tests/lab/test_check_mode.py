"""`gpuinfra converge --check`: what a run of nodes.yml would change, with nothing changed.

A fresh host of a side lab of its own shows the whole install; a converged host of the suite's
lab shows the one file someone edited, and keeps the edit.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuinfra import lab, versions
from gpuinfra.lab import aptrepo, runner

from .conftest import CONVERGED, NODE_VARS, PREFIX, host_connection, side_lab, side_lab_running

pytestmark = pytest.mark.lab

DRIVER = versions.pinned().driver("distro")
PIN_FILE = "/etc/apt/preferences.d/gpuinfra-nvidia-driver.pref"
PIN_TASK = "Pin | prefer the pinned driver build"
HOST = f"{PREFIX}c-1"


@pytest.fixture(scope="module")
def check_settings() -> lab.Settings:
    return side_lab("c")


@pytest.fixture(scope="module")
def check_inventory(check_settings: lab.Settings, toolkit_repo: aptrepo.Server) -> Iterator[Path]:
    yield from side_lab_running(check_settings, 1, toolkit_repo)


def test_a_fresh_host_shows_the_whole_install_and_gets_none_of_it(
    check_settings: lab.Settings, check_inventory: Path, nodes_playbook: Path
) -> None:
    result = runner.converge(nodes_playbook, check_inventory, extravars=NODE_VARS, check=True)

    assert result.ok, result.failures
    changes = {c.task: c.diff for c in result.changes if c.host == HOST}
    assert f"+Pin: version {DRIVER.source.package_version}" in changes[PIN_TASK].splitlines()
    packages = changes["Packages | the transaction a run would make"]
    assert f"nvidia-driver={DRIVER.source.package_version}" in packages.split()
    host = host_connection(check_settings, HOST)
    assert not host.file(PIN_FILE).exists
    assert not host.file("/etc/apt/keyrings/nvidia-container-toolkit.asc").exists
    assert not host.package("nvidia-driver").is_installed
    assert not host.package("containerd").is_installed


def test_an_edit_on_a_converged_host_is_shown_and_left_in_place(
    second_converge: runner.RunResult,
    lab_settings: lab.Settings,
    inventory: Path,
    nodes_playbook: Path,
) -> None:
    assert second_converge.ok, second_converge.failures
    name = CONVERGED[0]
    host = host_connection(lab_settings, name)
    host.run_test(f"cp -p {PIN_FILE} {PIN_FILE}.kept")
    host.run_test(f"sed -i 's/^Pin-Priority: .*/Pin-Priority: 100/' {PIN_FILE}")
    try:
        result = runner.converge(
            nodes_playbook, inventory, limit=name, extravars=NODE_VARS, check=True
        )
        edited = host.file(PIN_FILE).content_string
    finally:
        host.run_test(f"mv {PIN_FILE}.kept {PIN_FILE}")

    assert result.ok, result.failures
    (change,) = result.changes
    assert (change.host, change.task) == (name, PIN_TASK)
    assert {"-Pin-Priority: 100", "+Pin-Priority: 1001"} <= set(change.diff.splitlines())
    assert "Pin-Priority: 100\n" in edited

"""check.yml's fleet check: what the hosts of a group must share, and the outliers by host."""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tests.unit.roles.test_node_check_faults import HEALTHY_HOST
from tests.unit.roles.test_node_check_verdicts import EXPECT, observe

from .conftest import run_playbook_here

NIC = {"driver": "mlx5_core", "version": "24.10-1.1.4", "firmware": "28.39.1002 (MT_0000000838)"}


def reports(nnc: ModuleType, h200: Path, count: int) -> dict[str, dict[str, Any]]:
    observed = observe(nnc, h200, **HEALTHY_HOST, nics={"ens1f0": NIC})
    report = nnc.evaluate(observed, EXPECT)
    return {f"gpu-node-{n:02d}": copy.deepcopy(report) for n in range(1, count + 1)}


def test_a_uniform_group_has_no_finding(nnc: ModuleType, h200: Path) -> None:
    fleet = reports(nnc, h200, 4)
    assert nnc.compare_fleet(fleet, {"training": sorted(fleet)}) == []


def test_a_host_with_other_nic_firmware_is_named(nnc: ModuleType, h200: Path) -> None:
    fleet = reports(nnc, h200, 4)
    fleet["gpu-node-03"]["inventory"]["nics"]["ens1f0"]["firmware"] = "28.41.1000 (MT_0000000838)"
    [finding] = nnc.compare_fleet(fleet, {"training": sorted(fleet)})
    assert finding["outliers"] == {"gpu-node-03": "28.41.1000 (MT_0000000838)"}
    assert finding["message"] == (
        "training: NIC ens1f0 firmware: gpu-node-03 has 28.41.1000 (MT_0000000838) "
        "(the other 3 host(s) have 28.39.1002 (MT_0000000838))"
    )


def test_driver_vbios_and_kernel_outliers(nnc: ModuleType, h200: Path) -> None:
    fleet = reports(nnc, h200, 3)
    fleet["gpu-node-01"]["inventory"]["driver"] = "580.126.09"
    fleet["gpu-node-02"]["inventory"]["vbios"]["NVIDIA H200"] = ["96.00.99.00.01"]
    fleet["gpu-node-02"]["inventory"]["kernel"] = "6.1.0-29-amd64"
    findings = nnc.compare_fleet(fleet, {"training": sorted(fleet), "one": ["gpu-node-01"]})
    assert {(f["attribute"], tuple(f["outliers"])) for f in findings} == {
        ("driver build", ("gpu-node-01",)),
        ("VBIOS of NVIDIA H200", ("gpu-node-02",)),
        ("kernel", ("gpu-node-02",)),
    }


def test_a_group_mixing_gpu_models_compares_vbios_per_model(nnc: ModuleType, h200: Path) -> None:
    fleet = reports(nnc, h200, 2)
    fleet["gpu-node-02"]["inventory"]["vbios"] = {"NVIDIA L4": ["95.04.29.00.06"]}
    findings = nnc.compare_fleet(fleet, {"gpu_nodes": sorted(fleet)})
    assert [f["attribute"] for f in findings] == []


def test_two_hosts_that_differ_are_both_listed(nnc: ModuleType, h200: Path) -> None:
    fleet = reports(nnc, h200, 2)
    fleet["gpu-node-02"]["inventory"]["nics"] = {}
    [driver, _firmware] = nnc.compare_fleet(fleet, {"pair": sorted(fleet)})
    assert driver["majority"] is None
    assert driver["message"] == (
        "pair: NIC ens1f0 driver differs between its hosts: "
        "gpu-node-01 has mlx5_core 24.10-1.1.4, gpu-node-02 has absent"
    )


def local_fleet(tmp_path: Path, nics: dict[str, list[str]]) -> Path:
    """Hosts that all reach this machine; each records the NICs it is given."""
    hosts = {
        name: {
            "ansible_connection": "local",
            "gpu_node_check_nic_interfaces": interfaces,
            "gpu_node_check_report_path": str(tmp_path / name / "node-check.json"),
            "gpu_node_check_container_runtimes": [],
        }
        for name, interfaces in nics.items()
    }
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(json.dumps({"gpu_nodes": {"children": {"training": {"hosts": hosts}}}}))
    return inventory


@pytest.mark.skipif(os.geteuid() != 0, reason="the play becomes root")
def test_check_playbook_fails_the_host_that_differs_from_its_group(tmp_path: Path) -> None:
    inventory = local_fleet(tmp_path, {"node-a": ["lo"], "node-b": ["lo"], "node-c": []})
    result = run_playbook_here(tmp_path, "-i", str(inventory), "playbooks/check.yml")
    output = result.stdout + result.stderr
    assert result.returncode == 2, output
    failed = [line for line in output.splitlines() if "failed=1" in line]
    assert [line.split()[0] for line in failed] == ["node-c"], output
    words = " ".join(output.split())
    assert (
        "msg: 'node-c: gpu_nodes: NIC lo driver: node-c has absent (the other 2 host(s) have"
        in (words)
    )
    assert "training: NIC lo firmware: node-c has absent" in words
    assert "4 difference(s) between hosts of one group" in words


@pytest.mark.skipif(os.geteuid() != 0, reason="the play becomes root")
def test_check_playbook_passes_a_uniform_group(tmp_path: Path) -> None:
    inventory = local_fleet(tmp_path, {"node-a": ["lo"], "node-b": ["lo"]})
    result = run_playbook_here(
        tmp_path,
        "-i",
        str(inventory),
        "-e",
        '{"gpuinfra_check_fleet_groups": ["training"]}',
        "playbooks/check.yml",
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert "1 group(s) compared, no host differs: training" in output

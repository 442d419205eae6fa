"""The node check's report from a real H200 (written by tests/device/run_node_check.sh)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

REPORT = Path(__file__).resolve().parents[2] / "fixtures" / "h200-node-check.json"


@pytest.fixture(scope="module")
def report() -> dict[str, Any]:
    if not REPORT.exists():
        pytest.skip(f"{REPORT.name} absent: run tests/device/run_node_check.sh on a GPU host")
    data: dict[str, Any] = json.loads(REPORT.read_text())
    return data


def statuses(report: dict[str, Any]) -> dict[str, str]:
    return {check["name"]: check["status"] for check in report["checks"]}


def test_a_gpu_was_found_and_every_asserted_check_passed(report: dict[str, Any]) -> None:
    assert report["gpu_present"] is True
    assert report["summary"] == "ok"
    assert report["failed"] == []
    assert "fail" not in statuses(report).values()


def test_driver_is_the_pinned_preinstalled_build(report: dict[str, Any]) -> None:
    assert report["driver"]["nvml_version"] == "580.159.04"
    assert report["driver"]["kernel_module_version"] == "580.159.04"
    assert statuses(report)["driver_version"] == "pass"
    assert statuses(report)["nvml_kernel_match"] == "pass"


def test_pcie_links_run_at_their_maximum(report: dict[str, Any]) -> None:
    assert statuses(report)["pcie_link"] == "pass"
    for gpu in report["gpus"]:
        assert gpu["pcie_width_current"] == gpu["pcie_width_max"] == 16
        assert gpu["pcie_gen_current"] == gpu["pcie_gen_max"]


def test_the_gpu_is_an_h200(report: dict[str, Any]) -> None:
    assert [gpu["name"] for gpu in report["gpus"]] == ["NVIDIA H200"]

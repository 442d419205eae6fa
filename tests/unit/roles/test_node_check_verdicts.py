"""The node check's verdicts: the real H200 passes; each known field failure is caught."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

PIN = "580.159.04"
EXPECT: dict[str, Any] = {
    "driver_version": PIN,
    "gpu_count": 1,
    "mig_mode": "disabled",
    "persistence_mode": True,
    "nvlink": None,
    "min_temperature_headroom_c": 10,
    "min_power_headroom_pct": 5,
    "container_runtimes": ["containerd"],
}
NVIDIA_RUNTIME = {"containerd": {"installed": True, "runtimes": ["nvidia", "runc"], "error": None}}

Edit = Callable[[ET.Element], None]


def observe(nnc: ModuleType, h200: Path, edit: Edit | None = None, **extra: Any) -> dict[str, Any]:
    """What the module observes on the H200, with the XML edited to simulate a fault."""
    root = ET.fromstring((h200 / "nvidia-smi-q.xml").read_text())
    if edit is not None:
        edit(root)
    observed: dict[str, Any] = {
        "host": "gpu-node-01",
        "pci_gpu_count": 1,
        "smi_found": True,
        "smi_header": nnc.parse_smi_header((h200 / "nvidia-smi.txt").read_text()),
        "smi": nnc.parse_query_xml(ET.tostring(root, encoding="unicode")),
        "kernel_module": nnc.parse_proc_version((h200 / "proc-version.txt").read_text()),
        "topology": nnc.parse_topology((h200 / "topo.txt").read_text()),
        "runtimes": NVIDIA_RUNTIME,
    }
    observed.update(extra)
    return observed


def setter(path: str, value: str) -> Edit:
    def edit(root: ET.Element) -> None:
        node = root.find(path)
        assert node is not None, path
        node.text = value

    return edit


def check(report: dict[str, Any], name: str) -> dict[str, Any]:
    found: list[dict[str, Any]] = [c for c in report["checks"] if c["name"] == name]
    assert len(found) == 1, f"{name} reported {len(found)} times"
    return found[0]


def test_the_real_h200_passes(nnc: ModuleType, h200: Path) -> None:
    report = nnc.evaluate(observe(nnc, h200), EXPECT)
    assert report["summary"] == "ok", report["failed"]
    assert report["gpu_present"] is True
    statuses = {c["name"]: c["status"] for c in report["checks"]}
    assert statuses["driver_version"] == "pass"
    assert statuses["pcie_link"] == "pass"
    assert statuses["nvml_kernel_match"] == "pass"
    # One GPU has no peers: the topology check cannot pass or fail, it is skipped.
    assert statuses["topology"] == "skip"
    assert report["driver"]["kernel_module_flavor"] == "open"


@pytest.mark.parametrize(
    ("edit", "name", "words"),
    [
        (
            setter("gpu/pci/pci_gpu_link_info/link_widths/current_link_width", "8x"),
            "pcie_link",
            "x8 of max x16",
        ),
        (
            setter("gpu/pci/pci_gpu_link_info/pcie_gen/current_link_gen", "3"),
            "pcie_link",
            "gen 3 of max gen 5",
        ),
        (
            setter("gpu/ecc_errors/volatile/dram_uncorrectable", "2"),
            "ecc_errors",
            "2 volatile uncorrectable",
        ),
        (
            setter("gpu/remapped_rows/remapped_row_failure", "Yes"),
            "remapped_rows",
            "row remapping failed",
        ),
        (setter("gpu/ecc_mode/current_ecc", "Disabled"), "ecc_mode", "ECC disabled"),
        (setter("gpu/persistence_mode", "Disabled"), "persistence_mode", "disabled"),
        (setter("gpu/mig_mode/current_mig", "Enabled"), "mig_mode", "MIG enabled"),
        (
            setter("gpu/temperature/gpu_temp_tlimit", "4 C"),
            "temperature_headroom",
            "4 C below its slowdown limit",
        ),
        (setter("driver_version", "535.261.03"), "driver_version", "535.261.03 runs"),
    ],
)
def test_a_fault_fails_its_check(
    nnc: ModuleType, h200: Path, edit: Edit, name: str, words: str
) -> None:
    report = nnc.evaluate(observe(nnc, h200, edit), EXPECT)
    found = check(report, name)
    assert found["status"] == "fail"
    assert words in found["detail"]
    assert report["summary"] == "failed"
    assert name in report["failed"]


def test_a_link_trained_down_at_idle_is_a_warning(nnc: ModuleType, h200: Path) -> None:
    def idle(root: ET.Element) -> None:
        setter("gpu/pci/pci_gpu_link_info/pcie_gen/current_link_gen", "1")(root)
        setter("gpu/performance_state", "P8")(root)

    report = nnc.evaluate(observe(nnc, h200, idle), EXPECT)
    assert check(report, "pcie_link")["status"] == "warn"
    assert report["summary"] == "ok"


def test_narrow_link_fails_even_at_idle(nnc: ModuleType, h200: Path) -> None:
    def idle_x8(root: ET.Element) -> None:
        setter("gpu/pci/pci_gpu_link_info/link_widths/current_link_width", "8x")(root)
        setter("gpu/performance_state", "P8")(root)

    assert check(nnc.evaluate(observe(nnc, h200, idle_x8), EXPECT), "pcie_link")["status"] == "fail"


def test_pending_row_remap_is_a_warning(nnc: ModuleType, h200: Path) -> None:
    edit = setter("gpu/remapped_rows/remapped_row_pending", "Yes")
    found = check(nnc.evaluate(observe(nnc, h200, edit), EXPECT), "remapped_rows")
    assert found["status"] == "warn"
    assert "reset the GPU" in found["detail"]


def test_wrong_gpu_count(nnc: ModuleType, h200: Path) -> None:
    report = nnc.evaluate(observe(nnc, h200), {**EXPECT, "gpu_count": 8})
    found = check(report, "gpu_count")
    assert (found["status"], found["expected"], found["actual"]) == ("fail", 8, 1)


def test_unset_gpu_count_is_reported_not_asserted(nnc: ModuleType, h200: Path) -> None:
    found = check(nnc.evaluate(observe(nnc, h200), {**EXPECT, "gpu_count": None}), "gpu_count")
    assert found["status"] == "skip"
    assert found["actual"] == 1


def test_kernel_module_and_nvml_disagree(nnc: ModuleType, h200: Path) -> None:
    stale = nnc.parse_proc_version(
        "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  575.57.08  Release Build\n"
    )
    report = nnc.evaluate(observe(nnc, h200, kernel_module=stale), EXPECT)
    found = check(report, "nvml_kernel_match")
    assert found["status"] == "fail"
    assert "kernel module 575.57.08, user-space NVML 580.159.04" in found["detail"]


def test_nvml_mismatch_error_from_nvidia_smi(nnc: ModuleType, h200: Path) -> None:
    broken = nnc.parse_smi_header("Failed to initialize NVML: Driver/library version mismatch\n")
    report = nnc.evaluate(observe(nnc, h200, smi_header=broken, smi=None), EXPECT)
    assert report["gpu_present"] is True
    assert "Driver/library version mismatch" in check(report, "driver_version")["detail"]
    assert check(report, "nvml_kernel_match")["status"] == "fail"
    # Without nvidia-smi's data nothing per GPU can be judged, and it never passes.
    assert check(report, "pcie_link")["status"] == "skip"
    assert report["summary"] == "failed"


def test_gpu_on_the_bus_without_a_driver_is_a_broken_host(nnc: ModuleType) -> None:
    observed = {"host": "h", "pci_gpu_count": 2, "smi_found": False, "runtimes": NVIDIA_RUNTIME}
    report = nnc.evaluate(observed, EXPECT)
    assert report["gpu_present"] is True
    assert report["summary"] == "failed"
    assert "nvidia-smi not found" in check(report, "driver_version")["detail"]
    assert "no NVIDIA kernel module" in check(report, "nvml_kernel_match")["detail"]


def test_no_gpu_skips_every_gpu_check(nnc: ModuleType) -> None:
    observed = {"host": "lab-1", "pci_gpu_count": 0, "smi_found": True, "runtimes": NVIDIA_RUNTIME}
    report = nnc.evaluate(observed, EXPECT)
    assert report["summary"] == "no GPU present"
    assert report["gpu_present"] is False
    gpu_checks = [c for c in report["checks"] if c["name"] != "container_runtime"]
    assert {c["name"] for c in gpu_checks} == set(nnc.GPU_CHECKS)
    assert all(c["status"] == "skip" and c["detail"] == "no GPU present" for c in gpu_checks)
    assert check(report, "container_runtime")["status"] == "pass"
    # What would be asserted on a GPU host is still shown.
    assert check(report, "driver_version")["expected"] == PIN
    assert check(report, "container_runtime")["detail"] == "containerd knows the nvidia runtime"


def test_no_gpu_and_runtime_without_nvidia_fails(nnc: ModuleType) -> None:
    runtimes = {"containerd": {"installed": True, "runtimes": ["runc"], "error": None}}
    report = nnc.evaluate({"host": "lab-1", "pci_gpu_count": 0, "runtimes": runtimes}, EXPECT)
    found = check(report, "container_runtime")
    assert found["status"] == "fail"
    assert "does not know the nvidia runtime (has: runc)" in found["detail"]
    assert report["summary"] == "failed"


def test_missing_container_runtime_fails(nnc: ModuleType) -> None:
    report = nnc.evaluate({"host": "h", "pci_gpu_count": 0, "runtimes": {}}, EXPECT)
    assert "containerd is not installed" in check(report, "container_runtime")["detail"]


def test_nvlink_expected_but_missing(nnc: ModuleType, h200: Path) -> None:
    topology = {"gpus": ["GPU0", "GPU1"], "pairs": 1, "nvlink_pairs": []}
    report = nnc.evaluate(observe(nnc, h200, topology=topology), {**EXPECT, "nvlink": True})
    found = check(report, "topology")
    assert found["status"] == "fail"
    assert "0 of 1 GPU pairs connected by NVLink" in found["detail"]


def test_power_near_its_limit_warns(nnc: ModuleType, h200: Path) -> None:
    edit = setter("gpu/gpu_power_readings/instant_power_draw", "690.00 W")
    report = nnc.evaluate(observe(nnc, h200, edit), EXPECT)
    assert check(report, "power_headroom")["status"] == "warn"
    assert report["summary"] == "ok"

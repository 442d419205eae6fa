"""The node check on the faults seen on real GPU nodes: each fails naming the host and what is
wrong, and the real H200 still passes."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tests.unit.roles.test_node_check_verdicts import EXPECT, check, observe, setter

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
X8_SLOT = FIXTURES / "pcie-x8-slot"
A100X4 = FIXTURES / "a100x4-two-bridges"
KERNEL = "6.1.0-28-amd64"
PIN = EXPECT["driver_version"]
HEALTHY_HOST: dict[str, Any] = {
    "kernel_release": KERNEL,
    "dkms": None,
    "uvm_devices": {"/dev/nvidia-uvm": True, "/dev/nvidia-uvm-tools": True},
    "nvswitch_count": 0,
}


def failed_on(report: dict[str, Any], name: str) -> str:
    """The detail of a failed check, after asserting the report failed on it for its host."""
    found = check(report, name)
    assert found["status"] == "fail", found
    assert report["summary"] == "failed"
    assert report["host"] == "gpu-node-01"
    detail: str = found["detail"]
    return detail


def test_the_healthy_h200_passes_every_new_check(nnc: ModuleType, h200: Path) -> None:
    report = nnc.evaluate(observe(nnc, h200, **HEALTHY_HOST), EXPECT)
    assert report["summary"] == "ok", report["failed"]
    assert check(report, "uvm_devices")["status"] == "pass"
    assert check(report, "pcie_link")["detail"] == (
        "every link at its GPU's maximum generation and width"
    )
    # A preinstalled driver (the H200's) is not built by DKMS; one GPU has no NVSwitch.
    assert check(report, "dkms")["status"] == "skip"
    assert check(report, "fabric_manager")["status"] == "skip"
    assert check(report, "dcgm_diag")["status"] == "skip"
    assert report["inventory"] == {
        "driver": PIN,
        "vbios": {"NVIDIA H200": ["96.00.A5.00.1A"]},
        "kernel": KERNEL,
        "nics": {},
    }


# PCIe ---------------------------------------------------------------------------------------


def x8_slot(nnc: ModuleType, h200: Path, *, sysfs: bool = True) -> dict[str, Any]:
    observed = observe(nnc, h200, **HEALTHY_HOST)
    observed["smi"] = nnc.parse_query_xml((X8_SLOT / "nvidia-smi-q.xml").read_text())
    nnc.merge_csv(observed["smi"]["gpus"], [])
    for gpu in observed["smi"]["gpus"]:
        gpu["pcie_sysfs"] = (
            nnc.read_pci_link(str(X8_SLOT / "sys"), gpu["bus_id"]) if sysfs else None
        )
    return observed


def test_sysfs_gives_the_gpus_own_link_limits(nnc: ModuleType) -> None:
    assert nnc.sysfs_pci_name("00000000:00:06.0") == "0000:00:06.0"
    assert nnc.read_pci_link(str(X8_SLOT / "sys"), "00000000:00:06.0") == {
        "width_max": 16,
        "gen_max": 5,
        "width": 8,
        "gen": 3,
    }
    assert nnc.read_pci_link(str(X8_SLOT / "sys"), "00000000:81:00.0") is None


def test_an_x16_gpu_in_a_gen3_x8_slot_fails(nnc: ModuleType, h200: Path) -> None:
    report = nnc.evaluate(x8_slot(nnc, h200), EXPECT)
    detail = failed_on(report, "pcie_link")
    assert "GPU 0 (00000000:00:06.0): PCIe link x8 of max x16 (the GPU's maximum" in detail
    assert "the slot allows only x8: an x8-wired slot or riser" in detail
    assert "PCIe gen 3 of max gen 5 (the GPU's maximum; the slot allows only gen 3)" in detail


def test_nvml_maximum_alone_would_pass_the_x8_slot(nnc: ModuleType, h200: Path) -> None:
    """Why sysfs is read: NVML's maximum is the slot's. The XML's max_device_link_gen still
    catches the generation, the width needs sysfs or an expected width."""
    report = nnc.evaluate(x8_slot(nnc, h200, sysfs=False), EXPECT)
    detail = failed_on(report, "pcie_link")
    assert "gen 3 of max gen 5" in detail
    assert "x8 of max" not in detail
    report = nnc.evaluate(x8_slot(nnc, h200, sysfs=False), {**EXPECT, "pcie_width": 16})
    assert "x8 of max x16 (expected for this host group" in failed_on(report, "pcie_link")


def test_the_slots_limit_fails_even_when_the_gpu_idles(nnc: ModuleType, h200: Path) -> None:
    observed = x8_slot(nnc, h200)
    observed["smi"]["gpus"][0]["performance_state"] = "P8"
    assert check(nnc.evaluate(observed, EXPECT), "pcie_link")["status"] == "fail"


def test_a_host_group_expectation_lower_than_the_gpu_passes(nnc: ModuleType, h200: Path) -> None:
    report = nnc.evaluate(x8_slot(nnc, h200), {**EXPECT, "pcie_gen": 3, "pcie_width": 8})
    found = check(report, "pcie_link")
    assert found["status"] == "pass", found
    assert found["detail"] == "every link at gen 3 x8 or better"


def test_an_expected_generation_above_the_link_fails(nnc: ModuleType, h200: Path) -> None:
    edit = setter("gpu/pci/pci_gpu_link_info/pcie_gen/current_link_gen", "4")
    report = nnc.evaluate(observe(nnc, h200, edit, **HEALTHY_HOST), {**EXPECT, "pcie_gen": 5})
    assert "gen 4 of max gen 5 (expected for this host group)" in failed_on(report, "pcie_link")


# NVLink -------------------------------------------------------------------------------------


def a100x4(nnc: ModuleType, h200: Path, nvlink_status: str = "nvlink-status.txt") -> dict[str, Any]:
    def four_gpus(root: ET.Element) -> None:
        gpu = root.find("gpu")
        assert gpu is not None
        for number in range(1, 4):
            copy = ET.fromstring(ET.tostring(gpu))
            copy.set("id", f"00000000:{number:02x}:00.0")
            root.append(copy)

    return observe(
        nnc,
        h200,
        four_gpus,
        topology=nnc.parse_topology((A100X4 / "topo.txt").read_text()),
        nvlink_status=nnc.parse_nvlink_status((A100X4 / nvlink_status).read_text()),
        **HEALTHY_HOST,
    )


def test_topology_and_nvlink_status_of_four_a100s(nnc: ModuleType) -> None:
    topology = nnc.parse_topology((A100X4 / "topo.txt").read_text())
    assert topology["pairs"] == 6
    assert topology["nvlink_pairs"] == [["GPU0", "GPU1"], ["GPU2", "GPU3"]]
    status = nnc.parse_nvlink_status((A100X4 / "nvlink-status-loose-bridge.txt").read_text())
    assert status["GPU0"] == {"active": 12, "inactive": 0}
    assert status["GPU3"] == {"active": 8, "inactive": 4}


def test_two_bridged_pairs_pass_what_their_site_expects(nnc: ModuleType, h200: Path) -> None:
    for expect in ({"nvlink_pairs": ["0-1", "GPU2-GPU3"]}, {"nvlink_min_pairs": 2}):
        found = check(nnc.evaluate(a100x4(nnc, h200), {**EXPECT, **expect}), "topology")
        assert found["status"] == "pass", found
        assert found["detail"] == "2 of 6 GPU pairs connected by NVLink"


def test_all_pairs_expected_fails_the_bridged_machine(nnc: ModuleType, h200: Path) -> None:
    report = nnc.evaluate(a100x4(nnc, h200), {**EXPECT, "nvlink": True})
    assert failed_on(report, "topology") == "2 of 6 GPU pairs connected by NVLink, all expected"


def test_a_missing_bridge_fails_naming_the_pair(nnc: ModuleType, h200: Path) -> None:
    report = nnc.evaluate(a100x4(nnc, h200), {**EXPECT, "nvlink_pairs": ["0-1", "1-2"]})
    detail = failed_on(report, "topology")
    assert (
        detail
        == "GPU1-GPU2 not linked by NVLink (linked: GPU0-GPU1, GPU2-GPU3): seat or fit the bridge"
    )
    report = nnc.evaluate(a100x4(nnc, h200), {**EXPECT, "nvlink_min_pairs": 3})
    assert "at least 3 expected" in failed_on(report, "topology")


def test_a_loose_bridge_fails_on_its_inactive_links(nnc: ModuleType, h200: Path) -> None:
    observed = a100x4(nnc, h200, "nvlink-status-loose-bridge.txt")
    report = nnc.evaluate(observed, {**EXPECT, "nvlink_pairs": ["0-1", "2-3"]})
    detail = failed_on(report, "topology")
    assert detail == "GPU2: 4 of 12 NVLinks inactive; GPU3: 4 of 12 NVLinks inactive"


def test_pairs_are_read_in_several_spellings(nnc: ModuleType) -> None:
    assert nnc.nvlink_pair("1-0") == ("GPU0", "GPU1")
    assert nnc.nvlink_pair("GPU2,GPU3") == ("GPU2", "GPU3")
    assert nnc.nvlink_pair("0-0") is None
    assert nnc.nvlink_pair("0_1") is None


# DKMS, device nodes, Fabric Manager, DCGM ---------------------------------------------------

DKMS_OK = f"nvidia-current/{PIN}, {KERNEL}, x86_64: installed\n"
DKMS_OLD_KERNEL = f"nvidia-current/{PIN}, 6.1.0-27-amd64, x86_64: installed\n"


@pytest.mark.parametrize(
    ("text", "words"),
    [
        (
            DKMS_OLD_KERNEL,
            f"nvidia-current/{PIN} is not installed for the running kernel {KERNEL} (built for "
            f"6.1.0-27-amd64): install linux-headers-{KERNEL} and run 'dkms autoinstall'",
        ),
        (f"nvidia-current/{PIN}: added\n", f"is not installed for the running kernel {KERNEL}:"),
        (
            f"nvidia-current/535.183.01, {KERNEL}, x86_64: installed\n",
            f"DKMS has nvidia-current/535.183.01, not the pinned {PIN}",
        ),
    ],
)
def test_dkms_without_the_pinned_module_for_the_running_kernel_fails(
    nnc: ModuleType, h200: Path, text: str, words: str
) -> None:
    observed = observe(nnc, h200, **{**HEALTHY_HOST, "dkms": nnc.parse_dkms_status(text)})
    assert words in failed_on(nnc.evaluate(observed, EXPECT), "dkms")


def test_dkms_with_the_pinned_module_for_the_running_kernel_passes(
    nnc: ModuleType, h200: Path
) -> None:
    # dkms 2 writes "name, version, kernel, arch"; both forms are read.
    for text in (DKMS_OLD_KERNEL + DKMS_OK, f"nvidia, {PIN}, {KERNEL}, x86_64: installed\n"):
        observed = observe(nnc, h200, **{**HEALTHY_HOST, "dkms": nnc.parse_dkms_status(text)})
        found = check(nnc.evaluate(observed, EXPECT), "dkms")
        assert found["status"] == "pass", found
        assert found["detail"].endswith(f"installed for the running kernel {KERNEL}")


def test_dkms_is_read_even_when_nvidia_smi_fails(nnc: ModuleType, h200: Path) -> None:
    broken = nnc.parse_smi_header("NVIDIA-SMI has failed because it couldn't communicate\n")
    dkms = nnc.parse_dkms_status(DKMS_OLD_KERNEL)
    observed = observe(nnc, h200, smi_header=broken, smi=None, **{**HEALTHY_HOST, "dkms": dkms})
    assert "not installed for the running kernel" in failed_on(
        nnc.evaluate(observed, EXPECT), "dkms"
    )


def test_missing_uvm_device_nodes_fail(nnc: ModuleType, h200: Path) -> None:
    devices = {"/dev/nvidia-uvm": True, "/dev/nvidia-uvm-tools": False}
    observed = observe(nnc, h200, **{**HEALTHY_HOST, "uvm_devices": devices})
    detail = failed_on(nnc.evaluate(observed, EXPECT), "uvm_devices")
    assert detail.startswith("/dev/nvidia-uvm-tools missing: ")
    assert "nvidia-modprobe -u -c=0" in detail


def test_nvswitches_without_fabric_manager_fail(nnc: ModuleType, h200: Path) -> None:
    for state, words in ((None, "is not installed"), ("inactive", "is inactive")):
        observed = observe(
            nnc, h200, **{**HEALTHY_HOST, "nvswitch_count": 4, "fabric_manager": {"state": state}}
        )
        detail = failed_on(nnc.evaluate(observed, EXPECT), "fabric_manager")
        assert detail.startswith(f"4 NVSwitch(es) on the PCI bus and nvidia-fabricmanager {words}")


def test_nvswitches_with_fabric_manager_active_pass(nnc: ModuleType, h200: Path) -> None:
    observed = observe(
        nnc, h200, **{**HEALTHY_HOST, "nvswitch_count": 4, "fabric_manager": {"state": "active"}}
    )
    assert check(nnc.evaluate(observed, EXPECT), "fabric_manager")["status"] == "pass"
    # A GPU that has not joined the fabric fails though the service runs.
    edit = setter("gpu/fabric/state", "In Progress")
    observed = observe(
        nnc,
        h200,
        edit,
        **{**HEALTHY_HOST, "nvswitch_count": 4, "fabric_manager": {"state": "active"}},
    )
    assert "fabric registration In Progress" in failed_on(
        nnc.evaluate(observed, EXPECT), "fabric_manager"
    )


DCGM_FAILED = """Successfully ran diagnostic for group.
+---------------------------+------------------------------------------------+
| Diagnostic                | Result                                         |
+===========================+================================================+
|-----  Metadata  ----------+------------------------------------------------|
| DCGM Version              | 3.3.9                                          |
|-----  Deployment  --------+------------------------------------------------|
| Denylist                  | Pass                                           |
| NVML Library              | Pass                                           |
| Persistence Mode          | Fail                                           |
|   Warning                 | GPU 0 Persistence mode for GPU 0 is disabled.  |
| Environment Variables     | Pass                                           |
+---------------------------+------------------------------------------------+
"""


def test_dcgm_diag_failure_is_a_failure_only_when_asked(nnc: ModuleType, h200: Path) -> None:
    dcgm = {"found": True, "rc": 226, "output": DCGM_FAILED}
    observed = observe(nnc, h200, **{**HEALTHY_HOST, "dcgm": dcgm})
    assert check(nnc.evaluate(observed, EXPECT), "dcgm_diag")["status"] == "skip"
    detail = failed_on(nnc.evaluate(observed, {**EXPECT, "dcgm_diag_level": 1}), "dcgm_diag")
    assert detail == (
        "dcgmi diag -r 1: Persistence Mode failed: GPU 0 Persistence mode for GPU 0 is disabled."
    )


def test_dcgm_diag_passes_and_is_skipped_without_dcgm(nnc: ModuleType, h200: Path) -> None:
    passed = {"found": True, "rc": 0, "output": DCGM_FAILED.replace("| Fail ", "| Pass ")}
    observed = observe(nnc, h200, **{**HEALTHY_HOST, "dcgm": passed})
    found = check(nnc.evaluate(observed, {**EXPECT, "dcgm_diag_level": 1}), "dcgm_diag")
    assert (found["status"], found["detail"]) == ("pass", "dcgmi diag -r 1: 4 test(s) passed")
    absent = {"found": False, "rc": None, "output": ""}
    observed = observe(nnc, h200, **{**HEALTHY_HOST, "dcgm": absent})
    found = check(nnc.evaluate(observed, {**EXPECT, "dcgm_diag_level": 1}), "dcgm_diag")
    assert (found["status"], found["detail"]) == ("skip", "DCGM not installed (no dcgmi)")


def test_ethtool_driver_and_firmware(nnc: ModuleType) -> None:
    text = (
        "driver: mlx5_core\nversion: 24.10-1.1.4\nfirmware-version: 28.39.1002 (MT_0000000838)\n"
        "expansion-rom-version: \nbus-info: 0000:17:00.0\n"
    )
    assert nnc.parse_ethtool_driver(text) == {
        "driver": "mlx5_core",
        "version": "24.10-1.1.4",
        "firmware": "28.39.1002 (MT_0000000838)",
    }


# Commands that did not answer -----------------------------------------------------------------


def test_nvidia_smi_that_hung_fails_the_driver_check_naming_it(nnc: ModuleType, h200: Path) -> None:
    """A GPU off the bus hangs nvidia-smi and may leave the PCI bus: still a GPU host, and the
    check says what hung rather than a missing or mismatched driver."""
    observed = observe(
        nnc,
        h200,
        smi_header=nnc.parse_smi_header(""),
        smi=None,
        topology=None,
        timed_out={"nvidia-smi": {"command": "nvidia-smi", "seconds": 60}},
        **{**HEALTHY_HOST, "pci_gpu_count": 0},
    )
    report = nnc.evaluate(observed, EXPECT)
    assert report["gpu_present"] is True
    assert failed_on(report, "driver_version") == (
        "nvidia-smi did not answer within 60 s (a GPU that fell off the bus or a wedged driver "
        "hangs it: check dmesg for Xid)"
    )
    assert report["driver"]["smi_error"] == "nvidia-smi did not answer within 60 s"
    found = check(report, "nvml_kernel_match")
    assert (found["status"], found["detail"]) == (
        "skip",
        f"kernel module {PIN} loaded; NVML not read: nvidia-smi did not answer within 60 s",
    )
    assert check(report, "persistence_mode")["detail"] == (
        "no per-GPU data: nvidia-smi did not answer within 60 s"
    )
    # The GPU that left the bus is missing from the count.
    assert failed_on(report, "gpu_count") == "0 GPU(s) visible, 1 expected"
    assert report["failed"] == ["driver_version", "gpu_count"]


def test_nvidia_smi_that_hung_after_its_banner_keeps_the_driver_it_named(
    nnc: ModuleType, h200: Path
) -> None:
    hung = {"nvidia-smi": {"command": "nvidia-smi topo -m", "seconds": 60}}
    report = nnc.evaluate(
        observe(nnc, h200, topology=None, timed_out=hung, **HEALTHY_HOST),
        {**EXPECT, "driver_version": "570.1"},
    )
    assert failed_on(report, "driver_version").startswith(
        f"driver {PIN} runs, 570.1 is pinned; nvidia-smi topo -m did not answer within 60 s ("
    )
    assert check(report, "nvml_kernel_match")["status"] == "pass"
    assert check(report, "topology")["detail"] == (
        "not read: nvidia-smi topo -m did not answer within 60 s"
    )


@pytest.mark.parametrize(
    ("program", "command", "name", "data", "words"),
    [
        ("dkms", "dkms status", "dkms", {"dkms": []}, "did not answer within 60 s (a DKMS build"),
        (
            "systemctl",
            "systemctl show nvidia-fabricmanager",
            "fabric_manager",
            {"nvswitch_count": 4, "fabric_manager": {"state": None}},
            "did not answer within 60 s (systemd does not answer",
        ),
        (
            "dcgmi",
            "dcgmi diag -r 3",
            "dcgm_diag",
            {"dcgm": {"found": True, "rc": None, "output": ""}},
            "did not finish within 3600 s (a wedged GPU or driver hangs the diagnostic",
        ),
    ],
)
def test_a_host_command_that_hung_fails_its_check_naming_it(
    nnc: ModuleType, h200: Path, program: str, command: str, name: str, data: Any, words: str
) -> None:
    """Without the timeout the empty result would read as no DKMS module, Fabric Manager not
    installed, or a diagnostic that passed no test."""
    timed_out = {program: {"command": command, "seconds": 3600 if program == "dcgmi" else 60}}
    observed = observe(nnc, h200, timed_out=timed_out, **{**HEALTHY_HOST, **data})
    report = nnc.evaluate(observed, {**EXPECT, "dcgm_diag_level": 3})
    assert failed_on(report, name).startswith(f"{command} {words}")
    assert report["failed"] == [name]

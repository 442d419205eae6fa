"""The parsers read what a real H200 on driver 580.159.04 printed."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType


def test_xml_gives_the_driver_and_one_h200(nnc: ModuleType, h200: Path) -> None:
    smi = nnc.parse_query_xml((h200 / "nvidia-smi-q.xml").read_text())
    assert smi["driver_version"] == "580.159.04"
    assert smi["cuda_version"] == "13.0"
    assert smi["attached_gpus"] == 1
    [gpu] = smi["gpus"]
    assert gpu["name"] == "NVIDIA H200"
    assert gpu["bus_id"] == "00000000:00:06.0"
    assert gpu["persistence_mode"] is True
    assert gpu["ecc_mode_current"] is True
    assert gpu["mig_mode_current"] is False


def test_xml_pcie_link_is_gen5_x16(nnc: ModuleType, h200: Path) -> None:
    [gpu] = nnc.parse_query_xml((h200 / "nvidia-smi-q.xml").read_text())["gpus"]
    assert (gpu["pcie_gen_current"], gpu["pcie_gen_max"]) == (5, 5)
    assert (gpu["pcie_width_current"], gpu["pcie_width_max"]) == (16, 16)


def test_xml_health_counters(nnc: ModuleType, h200: Path) -> None:
    [gpu] = nnc.parse_query_xml((h200 / "nvidia-smi-q.xml").read_text())["gpus"]
    assert gpu["ecc_volatile_uncorrectable"] == 0
    assert gpu["remapped_rows_failure"] is False
    assert gpu["remapped_rows_pending"] is False
    # 580 reports the margin to the slowdown limit (T.Limit), not absolute thresholds.
    assert gpu["temperature_c"] == 34
    assert gpu["temperature_headroom_c"] == 53
    assert gpu["power_limit_w"] == 700.0
    assert gpu["power_max_limit_w"] == 700.0
    assert 0 < gpu["power_draw_w"] < 700


def test_query_csv_strips_units_and_marks_missing_values(nnc: ModuleType, h200: Path) -> None:
    [row] = nnc.parse_query_csv((h200 / "query-full.csv").read_text())
    assert row["index"] == "0"
    assert row["memory.total"] == "143771 MiB"
    assert row["pcie.link.width.max"] == "16"
    assert row["remapped_rows.failure"] == "No"
    assert row["retired_pages.pending"] is None


def test_short_query_csv(nnc: ModuleType, h200: Path) -> None:
    [row] = nnc.parse_query_csv((h200 / "query.csv").read_text())
    assert row["name"] == "NVIDIA H200"
    assert row["driver_version"] == "580.159.04"
    assert row["mig.mode.current"] == "Disabled"


def test_csv_index_is_merged_into_the_xml_records(nnc: ModuleType, h200: Path) -> None:
    gpus = nnc.parse_query_xml((h200 / "nvidia-smi-q.xml").read_text())["gpus"]
    rows = nnc.parse_query_csv((h200 / "query-full.csv").read_text())
    rows[0]["index"] = "3"
    nnc.merge_csv(gpus, rows)
    assert gpus[0]["index"] == 3


def test_plain_nvidia_smi_banner(nnc: ModuleType, h200: Path) -> None:
    header = nnc.parse_smi_header((h200 / "nvidia-smi.txt").read_text())
    assert header == {
        "smi_version": "580.159.04",
        "driver_version": "580.159.04",
        "cuda_version": "13.0",
        "error": None,
    }


def test_plain_nvidia_smi_error_is_kept(nnc: ModuleType) -> None:
    header = nnc.parse_smi_header("Failed to initialize NVML: Driver/library version mismatch\n")
    assert header["driver_version"] is None
    assert header["error"] == "Failed to initialize NVML: Driver/library version mismatch"


def test_proc_version_of_the_open_kernel_module(nnc: ModuleType, h200: Path) -> None:
    module = nnc.parse_proc_version((h200 / "proc-version.txt").read_text())
    assert module == {"version": "580.159.04", "flavor": "open"}


def test_proc_version_of_the_proprietary_module(nnc: ModuleType) -> None:
    text = (
        "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.261.03  Tue Jul  1 12:00:00 UTC 2025\n"
        "GCC version:  gcc version 12.2.0 (Debian 12.2.0-14)\n"
    )
    assert nnc.parse_proc_version(text) == {"version": "535.261.03", "flavor": "proprietary"}


def test_topology_of_one_gpu_has_no_peers(nnc: ModuleType, h200: Path) -> None:
    topology = nnc.parse_topology((h200 / "topo.txt").read_text())
    assert topology == {"gpus": ["GPU0"], "pairs": 0, "nvlink_pairs": []}


def test_topology_counts_nvlink_pairs(nnc: ModuleType) -> None:
    text = (
        "\tGPU0\tGPU1\tGPU2\tCPU Affinity\tNUMA Affinity\n"
        "GPU0\t X \tNV18\tSYS\t0-15\t0\n"
        "GPU1\tNV18\t X \tSYS\t0-15\t0\n"
        "GPU2\tSYS\tSYS\t X \t16-31\t1\n"
        "\nLegend:\n\n  X    = Self\n"
    )
    topology = nnc.parse_topology(text)
    assert topology["pairs"] == 3
    assert topology["nvlink_pairs"] == [["GPU0", "GPU1"]]


def test_containerd_dump_runtime_names(nnc: ModuleType) -> None:
    dump = (
        '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes]\n'
        '  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia]\n'
        '    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia.options]\n'
        '  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]\n'
    )
    assert nnc.parse_containerd_dump(dump) == ["nvidia", "runc"]

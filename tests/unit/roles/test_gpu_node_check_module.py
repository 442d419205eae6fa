"""The gpu_node_check module run by Ansible on this machine, as a play would run it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[3]
ROLE = ROOT / "roles" / "gpu_node_check"
FAKE_SMI = """#!/bin/sh
case "$*" in
  "") cat {h200}/nvidia-smi.txt ;;
  "-q -x") cat {h200}/nvidia-smi-q.xml ;;
  "topo -m") cat {h200}/topo.txt ;;
  --query-gpu=*) printf 'index, pci.bus_id\\n0, 00000000:00:06.0\\n' ;;
  *) exit 3 ;;
esac
"""


def nvidia_on_pci() -> bool:
    return any(
        (device / "vendor").read_text().strip() == "0x10de"
        for device in Path("/sys/bus/pci/devices").glob("*")
        if (device / "vendor").exists()
    )


def run_module(
    tmp_path: Path, search_path: Path, *, expect_rc: int = 0, **args: Any
) -> dict[str, Any]:
    module_args = {
        "expected_driver": "580.159.04",
        "expected_gpu_count": 1,
        "search_paths": [str(search_path)],
        "report_path": str(tmp_path / "report" / "node-check.json"),
        **args,
    }
    env = {
        **os.environ,
        "ANSIBLE_LIBRARY": str(ROLE / "library"),
        "ANSIBLE_MODULE_UTILS": str(ROLE / "module_utils"),
        "ANSIBLE_LOAD_CALLBACK_PLUGINS": "1",
        "ANSIBLE_STDOUT_CALLBACK": "ansible.builtin.json",
        "ANSIBLE_LOCAL_TEMP": str(tmp_path / "ansible"),
        # Keeps the node's real nvidia-smi, if any, out of PATH.
        "PATH": f"{Path(sys.executable).parent}:/usr/sbin:/usr/bin:/sbin:/bin",
    }
    proc = subprocess.run(
        [
            str(Path(sys.executable).parent / "ansible"),
            "localhost",
            "-c",
            "local",
            "-e",
            f"ansible_python_interpreter={sys.executable}",
            "-m",
            "gpu_node_check",
            "-a",
            json.dumps(module_args),
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=120,
        check=False,
    )
    assert proc.returncode == expect_rc, proc.stdout + proc.stderr
    output = json.loads(proc.stdout)
    result: dict[str, Any] = output["plays"][0]["tasks"][0]["hosts"]["localhost"]
    return result


@pytest.fixture
def fake_smi(tmp_path: Path, h200: Path) -> Path:
    folder = tmp_path / "nvidia" / "bin"
    folder.mkdir(parents=True)
    smi = folder / "nvidia-smi"
    smi.write_text(FAKE_SMI.format(h200=h200))
    smi.chmod(0o755)
    return folder


def test_a_host_without_gpu_reports_no_gpu_present(tmp_path: Path) -> None:
    if nvidia_on_pci():
        pytest.skip("this machine has an NVIDIA GPU")
    result = run_module(tmp_path, tmp_path)
    report = result["report"]
    assert report["summary"] == "no GPU present"
    assert {c["status"] for c in report["checks"]} == {"skip"}
    written = json.loads((tmp_path / "report" / "node-check.json").read_text())
    assert written == report
    assert result["changed"] is False


def test_nvidia_smi_found_in_a_search_path_is_parsed(tmp_path: Path, fake_smi: Path) -> None:
    result = run_module(tmp_path, fake_smi, mig_mode="disabled")
    report = result["report"]
    checks = {c["name"]: c for c in report["checks"]}
    assert report["gpu_present"] is True
    assert checks["driver_version"]["status"] == "pass"
    assert checks["pcie_link"]["status"] == "pass"
    assert checks["mig_mode"]["status"] == "pass"
    assert report["gpus"][0]["name"] == "NVIDIA H200"
    # No NVIDIA kernel module is loaded here: user space alone must not pass.
    if not Path("/proc/driver/nvidia/version").exists():
        assert checks["nvml_kernel_match"]["status"] == "fail"
        assert report["summary"] == "failed"


def test_an_unchanged_report_is_not_rewritten(tmp_path: Path, fake_smi: Path) -> None:
    assert run_module(tmp_path, fake_smi)["report_written"] is True
    assert run_module(tmp_path, fake_smi)["report_written"] is False


def test_fail_on_error_fails_naming_each_failed_check_and_keeps_the_report(
    tmp_path: Path, fake_smi: Path
) -> None:
    if Path("/proc/driver/nvidia/version").exists():
        pytest.skip("a loaded NVIDIA module would make NVML and the kernel module agree")
    # Expecting two GPUs where the H200 outputs show one fails gpu_count as well.
    result = run_module(tmp_path, fake_smi, expect_rc=2, fail_on_error=True, expected_gpu_count=2)
    assert result["failed"] is True
    # Nor are the /dev/nvidia-uvm device nodes there.
    assert result["msg"].startswith("3 check(s) failed on ")
    assert "gpu_count: " in result["msg"] and "nvml_kernel_match: " in result["msg"]
    assert "uvm_devices: /dev/nvidia-uvm and /dev/nvidia-uvm-tools missing" in result["msg"]
    assert str(tmp_path / "report" / "node-check.json") in result["msg"]
    assert result["report"]["summary"] == "failed"


def test_a_passing_run_says_its_verdict(tmp_path: Path, fake_smi: Path) -> None:
    result = run_module(tmp_path, tmp_path, fail_on_error=True)
    assert result["msg"].startswith(result["report"]["summary"] + ": driver_version=skip")

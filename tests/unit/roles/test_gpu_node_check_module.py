"""The gpu_node_check module run by Ansible on this machine, as a play would run it."""

from __future__ import annotations

import ast
import datetime as dt
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

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
# A command that does not answer, as nvidia-smi does with a GPU off the bus: it starts a child of
# its own and waits for it, writing both PIDs to a file. ANSWERS is a case branch for arguments
# it answers before it hangs on the others. It ends by itself after two minutes, should a module
# that does not end it outlive the test.
HANG = """#!/bin/sh
case "$*" in
  {answers}
  *) ;;
esac
echo $$ >> {pids}
sleep 120 &
echo $! >> {pids}
wait
"""
SMI_HANG_HINT = "(a GPU that fell off the bus or a wedged driver hangs it: check dmesg for Xid)"


def nvidia_on_pci() -> bool:
    return any(
        (device / "vendor").read_text().strip() == "0x10de"
        for device in Path("/sys/bus/pci/devices").glob("*")
        if (device / "vendor").exists()
    )


def run_module(
    tmp_path: Path,
    search_path: Path,
    *,
    expect_rc: int = 0,
    bin_dir: Path | None = None,
    limit_s: float = 120,
    **args: Any,
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
        # Keeps the node's real nvidia-smi, if any, out of PATH; bin_dir's fakes come first.
        "PATH": f"{bin_dir or ''}{':' if bin_dir else ''}"
        f"{Path(sys.executable).parent}:/usr/sbin:/usr/bin:/sbin:/bin",
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
        timeout=limit_s,
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


def test_the_report_says_when_the_check_ran(tmp_path: Path, fake_smi: Path) -> None:
    before = time.time()
    result = run_module(tmp_path, fake_smi)
    assert result["report_written"] is True
    written = json.loads((tmp_path / "report" / "node-check.json").read_text())
    assert written["checked_at"] == result["report"]["checked_at"]
    # UTC with its zone, to the second: what the morning check judges the report's age by.
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", written["checked_at"])
    moment = dt.datetime.fromisoformat(written["checked_at"]).timestamp()
    assert before - 1 <= moment <= time.time()


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


# Commands that hang ---------------------------------------------------------------------------


def running(pid: int) -> bool:
    """Whether the process exists and has not ended (a zombie has: it waits to be reaped)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def pids_in(path: Path) -> list[int]:
    return [int(line) for line in path.read_text().split()] if path.exists() else []


@pytest.fixture
def hanging(tmp_path: Path) -> Iterator[Callable[..., Path]]:
    """Writes a fake command into tmp_path/hang that does not answer (with ``answers``, a case
    branch, some arguments first); returns the file its PIDs are written to. Whatever the module
    left of the fakes is killed afterwards, by PID, until no new one starts."""
    folder = tmp_path / "hang"
    folder.mkdir()
    written: list[Path] = []

    def write(name: str, answers: str = "") -> Path:
        pids = folder / f"{name}.pids"
        script = folder / name
        script.write_text(HANG.format(answers=answers, pids=pids))
        script.chmod(0o755)
        written.append(pids)
        return pids

    yield write
    # A module that does not end a fake goes on to the next command once it is killed.
    for _ in range(20):
        left = [pid for pids in written for pid in pids_in(pids) if running(pid)]
        if not left:
            break
        for pid in left:
            os.kill(pid, signal.SIGKILL)
        time.sleep(0.5)


def assert_ended(pids: Path) -> None:
    """The fake and its child ran, and neither runs now."""
    started = pids_in(pids)
    assert len(started) == 2, f"one run of the fake (itself and its child): {started}"
    deadline = time.monotonic() + 5
    while any(running(pid) for pid in started) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not [pid for pid in started if running(pid)], f"{pids.name}: still running"


def test_a_hung_nvidia_smi_and_docker_are_ended_and_named(
    tmp_path: Path, hanging: Callable[..., Path]
) -> None:
    smi = hanging("nvidia-smi")
    docker = hanging("docker")
    start = time.monotonic()
    result = run_module(
        tmp_path,
        tmp_path / "hang",
        bin_dir=tmp_path / "hang",
        limit_s=30,
        command_timeout=1,
        container_runtimes=["docker"],
    )
    # One second for each command, and Ansible's own start.
    assert time.monotonic() - start < 15
    report = result["report"]
    checks = {c["name"]: c for c in report["checks"]}
    assert report["summary"] == "failed"
    assert report["gpu_present"] is True, "nvidia-smi that hangs is a GPU host"
    assert {"driver_version", "container_runtime"} <= set(report["failed"])
    assert checks["driver_version"]["detail"] == (
        f"nvidia-smi did not answer within 1 s {SMI_HANG_HINT}"
    )
    assert checks["container_runtime"]["detail"].startswith(
        "docker: docker info did not answer within 1 s (dockerd is stuck"
    )
    # Not read as a driver that is missing or mismatched.
    assert "reboot or reload" not in json.dumps(report)
    assert checks["ecc_mode"] == {
        "name": "ecc_mode",
        "status": "skip",
        "detail": "no per-GPU data: nvidia-smi did not answer within 1 s",
        "expected": None,
        "actual": None,
    }
    # Every other check is still reported.
    assert {"gpu_count", "pcie_link", "topology", "dkms", "uvm_devices", "dcgm_diag"} <= set(checks)
    # nvidia-smi ran once: after one call hangs, no other is made.
    assert_ended(smi)
    assert_ended(docker)


def test_nvidia_smi_that_hangs_after_its_banner_is_named_with_its_arguments(
    tmp_path: Path, hanging: Callable[..., Path], h200: Path
) -> None:
    smi = hanging("nvidia-smi", answers=f'"") cat {h200}/nvidia-smi.txt; exit 0 ;;')
    start = time.monotonic()
    result = run_module(tmp_path, tmp_path / "hang", limit_s=30, command_timeout=1)
    assert time.monotonic() - start < 15
    report = result["report"]
    checks = {c["name"]: c for c in report["checks"]}
    assert checks["driver_version"]["status"] == "fail"
    assert checks["driver_version"]["detail"] == (
        f"nvidia-smi -q -x did not answer within 1 s {SMI_HANG_HINT}"
    )
    # The banner was read: the driver it names is kept.
    assert report["driver"]["nvml_version"] == "580.159.04"
    assert checks["pcie_link"]["detail"] == (
        "no per-GPU data: nvidia-smi -q -x did not answer within 1 s"
    )
    assert_ended(smi)


def test_an_answer_is_read_when_the_command_leaves_a_process_holding_its_output(
    tmp_path: Path, h200: Path, hanging: Callable[..., Path]
) -> None:
    # nvidia-smi answers and exits, but a helper it started lives on with its stdout: the answer
    # is complete when nvidia-smi exits, not when the pipe closes.
    helpers = hanging("helper")
    folder = tmp_path / "leaves"
    folder.mkdir()
    smi = folder / "nvidia-smi"
    smi.write_text(
        FAKE_SMI.format(h200=h200).replace("#!/bin/sh\n", f"#!/bin/sh\n{tmp_path}/hang/helper &\n")
    )
    smi.chmod(0o755)
    start = time.monotonic()
    result = run_module(tmp_path, folder, limit_s=60, command_timeout=10, mig_mode="disabled")
    assert time.monotonic() - start < 10
    report = result["report"]
    checks = {c["name"]: c for c in report["checks"]}
    assert checks["driver_version"]["status"] == "pass", checks["driver_version"]
    assert checks["pcie_link"]["status"] == "pass", checks["pcie_link"]
    assert "did not answer" not in json.dumps(report)
    assert pids_in(helpers), "the helper never started"


def test_a_dcgm_diag_that_does_not_finish_fails_naming_its_level_and_limit(
    tmp_path: Path, fake_smi: Path, hanging: Callable[..., Path]
) -> None:
    dcgmi = hanging("dcgmi")
    start = time.monotonic()
    result = run_module(
        tmp_path,
        fake_smi,
        bin_dir=tmp_path / "hang",
        limit_s=30,
        dcgm_diag_level=1,
        dcgm_diag_timeout=1,
    )
    assert time.monotonic() - start < 15
    report = result["report"]
    checks = {c["name"]: c for c in report["checks"]}
    assert "dcgm_diag" in report["failed"]
    assert checks["dcgm_diag"]["detail"].startswith(
        "dcgmi diag -r 1 did not finish within 1 s (a wedged GPU or driver hangs the diagnostic"
    )
    # nvidia-smi answered: its checks are judged as usual.
    assert checks["driver_version"]["status"] == "pass"
    assert_ended(dcgmi)


@pytest.mark.parametrize("option", ["command_timeout", "dcgm_diag_timeout"])
def test_a_limit_below_one_second_is_refused(tmp_path: Path, option: str) -> None:
    result = run_module(tmp_path, tmp_path, expect_rc=2, **{option: 0})
    assert result["msg"] == f"{option}: 0 is not a number of seconds (1 or more)"


# The module's interface --------------------------------------------------------------------


def module_interface() -> tuple[dict[str, Any], dict[str, Any]]:
    """The module's DOCUMENTATION options and its argument_spec, read without running it."""
    tree = ast.parse((ROLE / "library" / "gpu_node_check.py").read_text())
    documentation: dict[str, Any] = {}
    argument_spec: dict[str, Any] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "DOCUMENTATION":
            documentation = yaml.safe_load(ast.literal_eval(node.value))["options"]
        if isinstance(node, ast.keyword) and node.arg == "argument_spec":
            argument_spec = ast.literal_eval(node.value)
    return documentation, argument_spec


def test_documentation_argument_spec_and_the_role_agree() -> None:
    documentation, argument_spec = module_interface()
    assert set(documentation) == set(argument_spec)
    for name, spec in argument_spec.items():
        documented = documentation[name]
        for key in ("type", "elements", "choices", "default", "required"):
            assert documented.get(key) == spec.get(key), f"{name}: {key}"
    task = yaml.safe_load((ROLE / "tasks" / "main.yml").read_text())[0]["gpu_node_check"]
    role = yaml.safe_load((ROLE / "meta" / "argument_specs.yml").read_text())
    variables = set(role["argument_specs"]["main"]["options"])
    assert set(task) <= set(argument_spec)
    for option, value in task.items():
        assert value == f"{{{{ gpu_node_check_{option} }}}}", option
        assert f"gpu_node_check_{option}" in variables, option
    assert {"command_timeout", "dcgm_diag_timeout"} <= set(task)

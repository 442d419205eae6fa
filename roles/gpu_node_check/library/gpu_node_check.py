#!/usr/bin/python
"""Ansible module: observe a GPU node read-only and judge it against its expectations."""

from __future__ import annotations

DOCUMENTATION = r"""
module: gpu_node_check
short_description: Check a GPU node's driver, GPUs and container runtimes
description:
  - Runs C(nvidia-smi) (C(-q -x), C(--query-gpu), C(topo -m)) when present, reads
    C(/proc/driver/nvidia/version), the PCI bus and each GPU's link limits in sysfs, and where a
    GPU is present C(nvidia-smi nvlink -s), C(dkms status), the C(/dev/nvidia-uvm) device nodes,
    Fabric Manager's unit (with NVSwitches) and C(dcgmi diag) (when asked); asks containerd and
    Docker which runtimes they know, and returns a report with one verdict per check.
  - Every command runs in a session of its own with a time limit (O(command_timeout), and
    O(dcgm_diag_timeout) for C(dcgmi diag)). One that has not answered by then is killed with
    whatever it started, and the check it feeds fails naming the command and the limit; the
    module returns within about the sum of its limits.
  - Changes nothing on the host except the report file.
options:
  expected_driver:
    description: Driver version the host must run.
    type: str
    required: true
  expected_gpu_count:
    description: Number of GPUs the host must show; not asserted when omitted.
    type: int
  mig_mode:
    description: MIG mode every GPU must be in.
    type: str
    choices: [enabled, disabled, any]
    default: any
  persistence_mode:
    description: Whether persistence mode must be enabled.
    type: bool
    default: true
  nvlink:
    description: Whether every GPU pair must be linked by NVLink; only reported when omitted.
    type: bool
  nvlink_pairs:
    description:
      - GPU pairs (C(0-1), as C(nvidia-smi topo -m) numbers them) that must be linked by NVLink
        with every link of their GPUs active (C(nvidia-smi nvlink -s)).
    type: list
    elements: str
    default: []
  nvlink_min_pairs:
    description: Fewest GPU pairs that must be linked by NVLink; not asserted when omitted.
    type: int
  pcie_gen:
    description: PCIe generation every link must run at; the GPU's own maximum when omitted.
    type: int
  pcie_width:
    description: PCIe width every link must run at; the GPU's own maximum when omitted.
    type: int
  dcgm_diag_level:
    description: Run C(dcgmi diag -r LEVEL) where DCGM is installed; 0 does not run it.
    type: int
    choices: [0, 1, 2, 3]
    default: 0
  dcgm_diag_timeout:
    description:
      - Seconds C(dcgmi diag) may run before it is killed and C(dcgm_diag) fails.
      - When omitted it follows the level, with a wide margin over what DCGM takes on 8 GPUs;
        300 for level 1 (which takes seconds), 1200 for level 2 (about two minutes), 3600 for
        level 3 (up to about 30 minutes).
    type: int
  command_timeout:
    description:
      - Seconds each other command (C(nvidia-smi), C(dkms), C(systemctl), C(ethtool),
        C(containerd), C(docker)) may take before it is killed, with whatever it started.
      - A GPU that fell off the bus or a wedged driver hangs C(nvidia-smi); once one call of it
        has hung, no other is made, and C(driver_version) fails naming it.
    type: int
    default: 60
  nic_interfaces:
    description: Network interfaces whose driver and firmware (C(ethtool -i)) the report records.
    type: list
    elements: str
    default: []
  min_temperature_headroom_c:
    description: Degrees Celsius each GPU must stay below its slowdown limit.
    type: int
    default: 10
  min_power_headroom_pct:
    description: Percent of the power limit each GPU should keep free (a warning, not a failure).
    type: float
    default: 5
  container_runtimes:
    description: Container runtimes that must know the C(nvidia) runtime.
    type: list
    elements: str
    choices: [containerd, docker]
    default: []
  search_paths:
    description: Directories searched for C(nvidia-smi) besides C(PATH).
    type: list
    elements: path
    default: [/usr/local/nvidia/bin, /usr/bin]
  report_path:
    description: Where the JSON report is written; not written when omitted.
    type: path
  fail_on_error:
    description: Fail when a check fails, naming each one; the report is returned either way.
    type: bool
    default: false
"""

RETURN = r"""
report:
  description: >-
    host, gpu_present, summary (ok, failed, no GPU present), failed (names of failed checks),
    checks (name, status, detail, expected, actual), gpus, driver, and checked_at (when the
    check ran, UTC, as 2026-12-01T06:00:00Z: what the morning check judges a report's age by).
  returned: always
  type: dict
"""

import glob
import json
import os
import signal
import socket
import stat
import subprocess
import tempfile
import time

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.nvidia_node_check import (
    UVM_DEVICES,
    evaluate,
    nvlink_pair,
    merge_csv,
    parse_containerd_dump,
    parse_dkms_status,
    parse_ethtool_driver,
    parse_nvlink_status,
    parse_proc_version,
    parse_query_csv,
    parse_query_xml,
    parse_smi_header,
    parse_topology,
    read_pci_link,
    timeout_detail,
)

QUERY = "index,pci.bus_id,uuid,name,driver_version"
PCI_DISPLAY_CLASSES = ("0x0300", "0x0302")
NVIDIA_VENDOR = "0x10de"
PCI_BRIDGE_OTHER = "0x0680"
# dcgmi diag's limit by level when dcgm_diag_timeout is omitted: level 1 takes seconds, level 2
# about two minutes and level 3 up to about 30 minutes on 8 GPUs.
DCGM_DIAG_TIMEOUTS = {1: 300, 2: 1200, 3: 3600}
# How long a killed command is waited for: one stuck in the kernel (D state) cannot be reaped.
REAP_S = 2


class Commands:
    """Runs each command in a session of its own, with a time limit.

    Its output goes to unnamed temporary files, read once the command itself has exited: a
    process it left behind (a helper holding its stdout) neither delays the read nor turns an
    answer into a timeout. A command that has not exited in time is killed with its whole process
    group and waited for only briefly (REAP_S): a process stuck in the kernel cannot be reaped,
    and the module must not wait with it.
    ``timed_out`` records the first such run of each program ({program: {command, seconds}}).
    """

    def __init__(self, module):
        self.env = dict(os.environ)
        self.env.update(module.run_command_environ_update or {})
        self.timed_out = {}

    def run(self, argv, seconds, label=None):
        """(rc, stdout, stderr); rc is None when the command was killed after ``seconds``."""
        program = os.path.basename(argv[0])
        with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
            try:
                proc = subprocess.Popen(
                    argv, stdin=subprocess.DEVNULL, stdout=out, stderr=err, env=self.env,
                    close_fds=True, start_new_session=True)
            except OSError as exc:
                return 127, "", str(exc)
            try:
                proc.wait(timeout=seconds)
            except subprocess.TimeoutExpired:
                self.end(proc)
                self.timed_out.setdefault(program, {
                    "command": label or " ".join([program, *argv[1:]]), "seconds": seconds})
                return None, "", ""
            return proc.returncode, self.text(out), self.text(err)

    @staticmethod
    def text(output):
        output.seek(0)
        return output.read().decode("utf-8", "replace")

    @staticmethod
    def end(proc):
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except OSError:
            pass
        try:
            proc.wait(timeout=REAP_S)
        except subprocess.TimeoutExpired:
            pass


def pci_nvidia_devices():
    """NVIDIA GPUs (display and 3D controllers, whether or not a driver is bound) and NVSwitches
    (bridges) on the PCI bus."""
    gpus = switches = 0
    for device in glob.glob("/sys/bus/pci/devices/*"):
        try:
            with open(os.path.join(device, "vendor")) as vendor:
                if vendor.read().strip() != NVIDIA_VENDOR:
                    continue
            with open(os.path.join(device, "class")) as klass:
                code = klass.read().strip()[:6]
        except OSError:
            continue
        if code in PCI_DISPLAY_CLASSES:
            gpus += 1
        elif code == PCI_BRIDGE_OTHER:
            switches += 1
    return gpus, switches


def read(path):
    try:
        with open(path) as handle:
            return handle.read()
    except OSError:
        return None


def observe_gpus(module, commands):
    observed = {"smi_found": False, "smi_header": None, "smi": None, "topology": None,
                "nvlink_status": None}
    smi = module.get_bin_path("nvidia-smi", opt_dirs=module.params["search_paths"])
    if not smi:
        return observed
    observed["smi_found"] = True

    def run_smi(args, label=None):
        # What hangs one call of nvidia-smi (a GPU off the bus, a wedged driver) hangs the next.
        if "nvidia-smi" in commands.timed_out:
            return None, "", ""
        return commands.run([smi, *args], module.params["command_timeout"], label)

    rc, out, err = run_smi([])
    observed["smi_header"] = parse_smi_header(out + err)
    if rc != 0:
        return observed
    rc, out, err = run_smi(["-q", "-x"])
    if rc == 0:
        observed["smi"] = parse_query_xml(out)
        rc, out, err = run_smi(["--query-gpu=" + QUERY, "--format=csv"], "nvidia-smi --query-gpu")
        if rc == 0:
            merge_csv(observed["smi"]["gpus"], parse_query_csv(out))
        for gpu in observed["smi"]["gpus"]:
            gpu["pcie_sysfs"] = read_pci_link("/sys", gpu.get("bus_id"))
    rc, out, err = run_smi(["topo", "-m"])
    if rc == 0:
        observed["topology"] = parse_topology(out)
        if observed["topology"]["pairs"]:
            rc, out, err = run_smi(["nvlink", "-s"])
            if rc == 0:
                observed["nvlink_status"] = parse_nvlink_status(out)
    return observed


def is_char_device(path):
    try:
        return stat.S_ISCHR(os.stat(path).st_mode)
    except OSError:
        return False


def observe_host(module, commands, nvswitches):
    """What a GPU host needs besides nvidia-smi: its DKMS build, device nodes, Fabric Manager."""
    observed = {"dkms": None, "uvm_devices": {p: is_char_device(p) for p in UVM_DEVICES},
                "fabric_manager": None, "dcgm": None}
    seconds = module.params["command_timeout"]
    dkms = module.get_bin_path("dkms")
    if dkms:
        rc, out, err = commands.run([dkms, "status"], seconds)
        observed["dkms"] = parse_dkms_status(out) if rc == 0 else []
    if nvswitches:
        systemctl = module.get_bin_path("systemctl")
        state = None
        if systemctl:
            rc, out, err = commands.run(
                [systemctl, "show", "--property=ActiveState,LoadState", "nvidia-fabricmanager"],
                seconds, "systemctl show nvidia-fabricmanager")
            fields = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
            if fields.get("LoadState") == "loaded":
                state = fields.get("ActiveState")
        observed["fabric_manager"] = {"state": state}
    level = module.params["dcgm_diag_level"]
    dcgmi = module.get_bin_path("dcgmi") if level else None
    if level:
        observed["dcgm"] = {"found": bool(dcgmi), "rc": None, "output": ""}
    if dcgmi:
        rc, out, err = commands.run([dcgmi, "diag", "-r", str(level)], dcgm_diag_timeout(module))
        observed["dcgm"].update(rc=rc, output=out + err)
    return observed


def dcgm_diag_timeout(module):
    seconds = module.params["dcgm_diag_timeout"]
    if seconds is None:
        return DCGM_DIAG_TIMEOUTS.get(module.params["dcgm_diag_level"], 0)
    return seconds


def observe_nics(module, commands, interfaces):
    nics = {}
    seconds = module.params["command_timeout"]
    ethtool = module.get_bin_path("ethtool") if interfaces else None
    for name in interfaces:
        if not ethtool:
            nics[name] = {"driver": None, "version": None, "firmware": None,
                          "error": "ethtool not installed"}
            continue
        rc, out, err = commands.run([ethtool, "-i", name], seconds)
        if rc == 0:
            nics[name] = parse_ethtool_driver(out)
            continue
        error = timeout_detail("ethtool -i %s" % name, seconds) if rc is None else (
            (err or out).strip() or "ethtool -i exited %d" % rc)
        nics[name] = {"driver": None, "version": None, "firmware": None, "error": error}
    return nics


def observe_runtimes(module, commands, wanted):
    runtimes = {}
    seconds = module.params["command_timeout"]
    if "containerd" in wanted:
        binary = module.get_bin_path("containerd")
        state = {"installed": bool(binary), "runtimes": [], "error": None}
        if binary:
            rc, out, err = commands.run([binary, "config", "dump"], seconds)
            if rc == 0:
                state["runtimes"] = parse_containerd_dump(out)
            elif rc is None:
                state["error"] = timeout_detail("containerd config dump", seconds)
            else:
                state["error"] = "containerd config dump failed: %s" % (err.strip() or rc)
        runtimes["containerd"] = state
    if "docker" in wanted:
        binary = module.get_bin_path("docker")
        state = {"installed": bool(binary), "runtimes": [], "error": None}
        if binary:
            rc, out, err = commands.run(
                [binary, "info", "--format", "{{json .Runtimes}}"], seconds, "docker info")
            if rc == 0:
                state["runtimes"] = sorted(json.loads(out or "{}") or {})
            elif rc is None:
                state["error"] = timeout_detail("docker info", seconds)
            else:
                state["error"] = "docker info failed: %s" % (err.strip() or rc)
        runtimes["docker"] = state
    return runtimes


def write_report(path, report):
    """Write the report when its content differs; returns whether it was written."""
    content = json.dumps(report, indent=2, sort_keys=True) + "\n"
    if read(path) == content:
        return False
    os.makedirs(os.path.dirname(path), mode=0o755, exist_ok=True)
    temporary = path + ".tmp"
    with open(temporary, "w") as handle:
        handle.write(content)
    os.chmod(temporary, 0o644)
    os.replace(temporary, path)
    return True


def main():
    module = AnsibleModule(
        argument_spec={
            "expected_driver": {"type": "str", "required": True},
            "expected_gpu_count": {"type": "int"},
            "mig_mode": {"type": "str", "choices": ["enabled", "disabled", "any"],
                         "default": "any"},
            "persistence_mode": {"type": "bool", "default": True},
            "nvlink": {"type": "bool"},
            "nvlink_pairs": {"type": "list", "elements": "str", "default": []},
            "nvlink_min_pairs": {"type": "int"},
            "pcie_gen": {"type": "int"},
            "pcie_width": {"type": "int"},
            "dcgm_diag_level": {"type": "int", "choices": [0, 1, 2, 3], "default": 0},
            "dcgm_diag_timeout": {"type": "int"},
            "command_timeout": {"type": "int", "default": 60},
            "nic_interfaces": {"type": "list", "elements": "str", "default": []},
            "min_temperature_headroom_c": {"type": "int", "default": 10},
            "min_power_headroom_pct": {"type": "float", "default": 5},
            "container_runtimes": {"type": "list", "elements": "str",
                                   "choices": ["containerd", "docker"], "default": []},
            "search_paths": {"type": "list", "elements": "path",
                             "default": ["/usr/local/nvidia/bin", "/usr/bin"]},
            "report_path": {"type": "path"},
            "fail_on_error": {"type": "bool", "default": False},
        },
        supports_check_mode=True,
    )
    params = module.params
    malformed = [pair for pair in params["nvlink_pairs"] if nvlink_pair(pair) is None]
    if malformed:
        module.fail_json(msg="nvlink_pairs: %s not a pair of two GPU numbers (write them as '0-1')"
                         % ", ".join(repr(pair) for pair in malformed))
    for name in ("command_timeout", "dcgm_diag_timeout"):
        if params[name] is not None and params[name] < 1:
            module.fail_json(
                msg="%s: %d is not a number of seconds (1 or more)" % (name, params[name]))
    commands = Commands(module)
    proc_version = read("/proc/driver/nvidia/version")
    gpu_count, nvswitches = pci_nvidia_devices()
    observed = {
        "host": socket.gethostname(),
        "pci_gpu_count": gpu_count,
        "nvswitch_count": nvswitches,
        "kernel_release": os.uname()[2],
        "kernel_module": parse_proc_version(proc_version) if proc_version else None,
        "runtimes": observe_runtimes(module, commands, params["container_runtimes"]),
        "nics": observe_nics(module, commands, params["nic_interfaces"]),
    }
    observed.update(observe_gpus(module, commands))
    # nvidia-smi that hangs is a GPU host whose GPU may have left the PCI bus.
    if gpu_count or (observed["smi"] or {}).get("gpus") or "nvidia-smi" in commands.timed_out:
        observed.update(observe_host(module, commands, nvswitches))
    observed["timed_out"] = commands.timed_out
    report = evaluate(
        observed,
        {
            "driver_version": params["expected_driver"],
            "gpu_count": params["expected_gpu_count"],
            "mig_mode": params["mig_mode"],
            "persistence_mode": params["persistence_mode"],
            "nvlink": params["nvlink"],
            "nvlink_pairs": params["nvlink_pairs"],
            "nvlink_min_pairs": params["nvlink_min_pairs"],
            "pcie_gen": params["pcie_gen"],
            "pcie_width": params["pcie_width"],
            "dcgm_diag_level": params["dcgm_diag_level"],
            "min_temperature_headroom_c": params["min_temperature_headroom_c"],
            "min_power_headroom_pct": params["min_power_headroom_pct"],
            "container_runtimes": params["container_runtimes"],
        },
    )
    report["checked_at"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    written = False
    if params["report_path"] and not module.check_mode:
        written = write_report(params["report_path"], report)
    # The report records observations (temperatures, power draw) that differ on every run;
    # rewriting it configures nothing, so it does not count as a change to the node.
    failures = [check for check in report["checks"] if check["status"] == "fail"]
    result = {"changed": False, "report": report, "report_written": written}
    if failures and params["fail_on_error"]:
        where = " (report: %s)" % params["report_path"] if params["report_path"] else ""
        module.fail_json(
            msg="%d check(s) failed on %s: %s%s" % (
                len(failures), observed["host"],
                "; ".join("%s: %s" % (c["name"], c["detail"]) for c in failures), where),
            **result)
    module.exit_json(msg=verdict(report), **result)


def verdict(report):
    """One line: the summary, then each check's status."""
    return "%s: %s" % (report["summary"], ", ".join(
        "%s=%s" % (check["name"], check["status"]) for check in report["checks"]))


if __name__ == "__main__":
    main()

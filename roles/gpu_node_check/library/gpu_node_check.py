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
"""

RETURN = r"""
report:
  description: >-
    host, gpu_present, summary (ok, failed, no GPU present), failed (names of failed checks),
    checks (name, status, detail, expected, actual), gpus, driver.
  returned: always
  type: dict
"""

import glob
import json
import os
import socket
import stat

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
)

QUERY = "index,pci.bus_id,uuid,name,driver_version"
PCI_DISPLAY_CLASSES = ("0x0300", "0x0302")
NVIDIA_VENDOR = "0x10de"
PCI_BRIDGE_OTHER = "0x0680"


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


def observe_gpus(module):
    observed = {"smi_found": False, "smi_header": None, "smi": None, "topology": None,
                "nvlink_status": None}
    smi = module.get_bin_path("nvidia-smi", opt_dirs=module.params["search_paths"])
    if not smi:
        return observed
    observed["smi_found"] = True
    rc, out, err = module.run_command([smi])
    observed["smi_header"] = parse_smi_header(out + err)
    if rc != 0:
        return observed
    rc, out, err = module.run_command([smi, "-q", "-x"])
    if rc == 0:
        observed["smi"] = parse_query_xml(out)
        rc, out, err = module.run_command([smi, "--query-gpu=" + QUERY, "--format=csv"])
        if rc == 0:
            merge_csv(observed["smi"]["gpus"], parse_query_csv(out))
        for gpu in observed["smi"]["gpus"]:
            gpu["pcie_sysfs"] = read_pci_link("/sys", gpu.get("bus_id"))
    rc, out, err = module.run_command([smi, "topo", "-m"])
    if rc == 0:
        observed["topology"] = parse_topology(out)
        if observed["topology"]["pairs"]:
            rc, out, err = module.run_command([smi, "nvlink", "-s"])
            if rc == 0:
                observed["nvlink_status"] = parse_nvlink_status(out)
    return observed


def is_char_device(path):
    try:
        return stat.S_ISCHR(os.stat(path).st_mode)
    except OSError:
        return False


def observe_host(module, nvswitches):
    """What a GPU host needs besides nvidia-smi: its DKMS build, device nodes, Fabric Manager."""
    observed = {"dkms": None, "uvm_devices": {p: is_char_device(p) for p in UVM_DEVICES},
                "fabric_manager": None, "dcgm": None}
    dkms = module.get_bin_path("dkms")
    if dkms:
        rc, out, err = module.run_command([dkms, "status"])
        observed["dkms"] = parse_dkms_status(out) if rc == 0 else []
    if nvswitches:
        systemctl = module.get_bin_path("systemctl")
        state = None
        if systemctl:
            rc, out, err = module.run_command(
                [systemctl, "show", "--property=ActiveState,LoadState", "nvidia-fabricmanager"])
            fields = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
            if fields.get("LoadState") == "loaded":
                state = fields.get("ActiveState")
        observed["fabric_manager"] = {"state": state}
    level = module.params["dcgm_diag_level"]
    dcgmi = module.get_bin_path("dcgmi") if level else None
    if level:
        observed["dcgm"] = {"found": bool(dcgmi), "rc": None, "output": ""}
    if dcgmi:
        rc, out, err = module.run_command([dcgmi, "diag", "-r", str(level)])
        observed["dcgm"].update(rc=rc, output=out + err)
    return observed


def observe_nics(module, interfaces):
    nics = {}
    ethtool = module.get_bin_path("ethtool") if interfaces else None
    for name in interfaces:
        if not ethtool:
            nics[name] = {"driver": None, "version": None, "firmware": None,
                          "error": "ethtool not installed"}
            continue
        rc, out, err = module.run_command([ethtool, "-i", name])
        nics[name] = parse_ethtool_driver(out) if rc == 0 else {
            "driver": None, "version": None, "firmware": None,
            "error": (err or out).strip() or "ethtool -i exited %d" % rc}
    return nics


def observe_runtimes(module, wanted):
    runtimes = {}
    if "containerd" in wanted:
        binary = module.get_bin_path("containerd")
        state = {"installed": bool(binary), "runtimes": [], "error": None}
        if binary:
            rc, out, err = module.run_command([binary, "config", "dump"])
            if rc == 0:
                state["runtimes"] = parse_containerd_dump(out)
            else:
                state["error"] = "containerd config dump failed: %s" % (err.strip() or rc)
        runtimes["containerd"] = state
    if "docker" in wanted:
        binary = module.get_bin_path("docker")
        state = {"installed": bool(binary), "runtimes": [], "error": None}
        if binary:
            rc, out, err = module.run_command([binary, "info", "--format", "{{json .Runtimes}}"])
            if rc == 0:
                state["runtimes"] = sorted(json.loads(out or "{}") or {})
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
    proc_version = read("/proc/driver/nvidia/version")
    gpu_count, nvswitches = pci_nvidia_devices()
    observed = {
        "host": socket.gethostname(),
        "pci_gpu_count": gpu_count,
        "nvswitch_count": nvswitches,
        "kernel_release": os.uname()[2],
        "kernel_module": parse_proc_version(proc_version) if proc_version else None,
        "runtimes": observe_runtimes(module, params["container_runtimes"]),
        "nics": observe_nics(module, params["nic_interfaces"]),
    }
    observed.update(observe_gpus(module))
    if gpu_count or (observed["smi"] or {}).get("gpus"):
        observed.update(observe_host(module, nvswitches))
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

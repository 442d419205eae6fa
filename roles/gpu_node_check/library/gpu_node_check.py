#!/usr/bin/python
"""Ansible module: observe a GPU node read-only and judge it against its expectations."""

from __future__ import annotations

DOCUMENTATION = r"""
module: gpu_node_check
short_description: Check a GPU node's driver, GPUs and container runtimes
description:
  - Runs C(nvidia-smi) (C(-q -x), C(--query-gpu), C(topo -m)) when present, reads
    C(/proc/driver/nvidia/version) and the PCI bus, asks containerd and Docker which runtimes they
    know, and returns a report with one verdict per check.
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

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.nvidia_node_check import (
    evaluate,
    merge_csv,
    parse_containerd_dump,
    parse_proc_version,
    parse_query_csv,
    parse_query_xml,
    parse_smi_header,
    parse_topology,
)

QUERY = "index,pci.bus_id,uuid,name,driver_version"
PCI_DISPLAY_CLASSES = ("0x0300", "0x0302")
NVIDIA_VENDOR = "0x10de"


def pci_gpu_count():
    """NVIDIA display and 3D controllers on the PCI bus, whether or not a driver is bound."""
    count = 0
    for device in glob.glob("/sys/bus/pci/devices/*"):
        try:
            with open(os.path.join(device, "vendor")) as vendor:
                if vendor.read().strip() != NVIDIA_VENDOR:
                    continue
            with open(os.path.join(device, "class")) as klass:
                if klass.read().strip()[:6] in PCI_DISPLAY_CLASSES:
                    count += 1
        except OSError:
            continue
    return count


def read(path):
    try:
        with open(path) as handle:
            return handle.read()
    except OSError:
        return None


def observe_gpus(module):
    observed = {"smi_found": False, "smi_header": None, "smi": None, "topology": None}
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
    rc, out, err = module.run_command([smi, "topo", "-m"])
    if rc == 0:
        observed["topology"] = parse_topology(out)
    return observed


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
    proc_version = read("/proc/driver/nvidia/version")
    observed = {
        "host": socket.gethostname(),
        "pci_gpu_count": pci_gpu_count(),
        "kernel_module": parse_proc_version(proc_version) if proc_version else None,
        "runtimes": observe_runtimes(module, params["container_runtimes"]),
    }
    observed.update(observe_gpus(module))
    report = evaluate(
        observed,
        {
            "driver_version": params["expected_driver"],
            "gpu_count": params["expected_gpu_count"],
            "mig_mode": params["mig_mode"],
            "persistence_mode": params["persistence_mode"],
            "nvlink": params["nvlink"],
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

"""Parse nvidia-smi outputs and judge a GPU node against its expectations.

Pure Python (standard library only) so that it runs on any managed host Ansible reaches and can be
unit-tested on recorded outputs. The gpu_node_check module gathers the raw outputs and calls
``evaluate``; everything that decides pass or fail lives here.
"""

from __future__ import annotations

import csv
import io
import re
import xml.etree.ElementTree as ET
from typing import Any

# nvidia-smi writes this when a field does not apply to the device.
_MISSING = ("N/A", "[N/A]", "Not Supported", "[Not Supported]", "Unknown Error", "")

_SMI_HEADER = re.compile(
    r"NVIDIA-SMI\s+(?P<smi>[\d.]+)\s+Driver Version:\s+(?P<driver>[\d.]+)"
    r"(?:\s+CUDA Version:\s+(?P<cuda>[\d.]+))?"
)
_NVRM = re.compile(r"NVRM version:\s+(?P<text>.*?)\s+(?P<version>\d+\.\d+(?:\.\d+)?)\s")
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")

GPU_CHECKS = (
    "driver_version",
    "nvml_kernel_match",
    "gpu_count",
    "persistence_mode",
    "ecc_mode",
    "ecc_errors",
    "remapped_rows",
    "pcie_link",
    "mig_mode",
    "topology",
    "temperature_headroom",
    "power_headroom",
    "dkms",
    "uvm_devices",
    "fabric_manager",
    "dcgm_diag",
)
# Checks that need nvidia-smi's per-GPU data; the ones after them read the host.
_PER_GPU_CHECKS = GPU_CHECKS[3:12]
UVM_DEVICES = ("/dev/nvidia-uvm", "/dev/nvidia-uvm-tools")
NO_GPU = "no GPU present"

# What hangs each command the module runs, and where to look: said with the timeout so that the
# report names the likely cause. A program missing here is reported without a hint.
_HANG_HINTS = {
    "nvidia-smi": "a GPU that fell off the bus or a wedged driver hangs it: check dmesg for Xid",
    "dcgmi": (
        "a wedged GPU or driver hangs the diagnostic: check dmesg for Xid and nv-hostengine "
        "('systemctl status nvidia-dcgm'); a level that needs longer takes "
        "gpu_node_check_dcgm_diag_timeout"
    ),
    "dkms": "a DKMS build or package install may still hold it: look for running dkms, make or apt",
    "systemctl": "systemd does not answer: check 'systemctl status' and the journal",
    "ethtool": "a wedged NIC driver or firmware hangs it: check dmesg for the interface",
    "containerd": "check 'systemctl status containerd' and its journal",
    "docker": "dockerd is stuck: check 'systemctl status docker' and its journal",
}
# The check that fails when the program did not answer (containerd, docker and ethtool report
# theirs as the runtime's or the NIC's error).
_TIMEOUT_CHECKS = {
    "dkms": "dkms",
    "systemctl": "fabric_manager",
    "dcgmi": "dcgm_diag",
}


def timeout_detail(command: str, seconds: float, *, hint: bool = True) -> str:
    """``nvidia-smi -q -x did not answer within 60 s (...)``: a command the module ended."""
    program = command.split(" ")[0]
    verb = "finish" if program == "dcgmi" else "answer"
    text = f"{command} did not {verb} within {seconds:g} s"
    if hint and program in _HANG_HINTS:
        text += f" ({_HANG_HINTS[program]})"
    return text


def _timed_out(observed: dict[str, Any], program: str, *, hint: bool = True) -> str | None:
    """The detail for ``program`` if one of its runs was ended, else None."""
    entry = (observed.get("timed_out") or {}).get(program)
    if not entry:
        return None
    return timeout_detail(entry["command"], entry["seconds"], hint=hint)


def _text(node: ET.Element | None, path: str) -> str | None:
    if node is None:
        return None
    found = node.find(path)
    if found is None or found.text is None:
        return None
    value = found.text.strip()
    return None if value in _MISSING else value


def _number(value: str | None) -> float | None:
    """The leading number of a value with a unit ('700.00 W', '34 C', '16x')."""
    if value is None:
        return None
    match = _NUMBER.search(value)
    return float(match.group(0)) if match else None


def _int(value: str | None) -> int | None:
    number = _number(value)
    return None if number is None else int(number)


def _enabled(value: str | None) -> bool | None:
    if value is None:
        return None
    lowered = value.lower()
    if lowered in ("enabled", "yes", "on"):
        return True
    if lowered in ("disabled", "no", "off"):
        return False
    return None


def _sum(values: list[int | None]) -> int | None:
    known = [v for v in values if v is not None]
    return sum(known) if known else None


def parse_query_xml(text: str) -> dict[str, Any]:
    """``nvidia-smi -q -x``: the driver and one record per GPU."""
    root = ET.fromstring(text)
    gpus = [_gpu_from_xml(node) for node in root.findall("gpu")]
    return {
        "driver_version": _text(root, "driver_version"),
        "cuda_version": _text(root, "cuda_version"),
        "attached_gpus": _int(_text(root, "attached_gpus")),
        "gpus": gpus,
    }


def _gpu_from_xml(gpu: ET.Element) -> dict[str, Any]:
    link = gpu.find("pci/pci_gpu_link_info")
    volatile = gpu.find("ecc_errors/volatile")
    temperature = gpu.find("temperature")
    power = gpu.find("gpu_power_readings")
    if power is None:  # drivers before 530 call it power_readings
        power = gpu.find("power_readings")
    # Volatile uncorrectable (double-bit) errors since the last driver load. Hopper and later
    # report them per memory kind; older GPUs as double_bit totals.
    dbe = _sum(
        [
            _int(_text(volatile, "dram_uncorrectable")),
            _int(_text(volatile, "sram_uncorrectable_parity")),
            _int(_text(volatile, "sram_uncorrectable_secded")),
            _int(_text(volatile, "sram_uncorrectable")),
            _int(_text(volatile, "double_bit/total")),
        ]
    )
    temp = _int(_text(temperature, "gpu_temp"))
    # Since 545 the driver reports the distance to the slowdown limit (T.Limit) directly; older
    # drivers give absolute thresholds.
    headroom = _int(_text(temperature, "gpu_temp_tlimit"))
    slowdown = _int(_text(temperature, "gpu_temp_slow_threshold"))
    if headroom is None and temp is not None and slowdown is not None:
        headroom = slowdown - temp
    draw = _number(_text(power, "instant_power_draw")) or _number(_text(power, "power_draw"))
    if draw is None:
        draw = _number(_text(power, "average_power_draw"))
    limit = _number(_text(power, "current_power_limit")) or _number(_text(power, "power_limit"))
    return {
        "bus_id": gpu.get("id"),
        "name": _text(gpu, "product_name"),
        "vbios_version": _text(gpu, "vbios_version"),
        "uuid": _text(gpu, "uuid"),
        "minor_number": _int(_text(gpu, "minor_number")),
        "performance_state": _text(gpu, "performance_state"),
        "persistence_mode": _enabled(_text(gpu, "persistence_mode")),
        "mig_mode_current": _enabled(_text(gpu, "mig_mode/current_mig")),
        "mig_mode_pending": _enabled(_text(gpu, "mig_mode/pending_mig")),
        "ecc_mode_current": _enabled(_text(gpu, "ecc_mode/current_ecc")),
        "ecc_mode_pending": _enabled(_text(gpu, "ecc_mode/pending_ecc")),
        "ecc_volatile_uncorrectable": dbe,
        "remapped_rows_uncorrectable": _int(_text(gpu, "remapped_rows/remapped_row_unc")),
        "remapped_rows_pending": _enabled(_text(gpu, "remapped_rows/remapped_row_pending")),
        "remapped_rows_failure": _enabled(_text(gpu, "remapped_rows/remapped_row_failure")),
        "pcie_gen_current": _int(_text(link, "pcie_gen/current_link_gen")),
        "pcie_gen_max": _int(_text(link, "pcie_gen/max_link_gen")),
        # max_link_gen is what the device and the slot allow together; this is the device's own.
        "pcie_gen_device_max": _int(_text(link, "pcie_gen/max_device_link_gen")),
        "pcie_width_current": _int(_text(link, "link_widths/current_link_width")),
        "pcie_width_max": _int(_text(link, "link_widths/max_link_width")),
        "temperature_c": temp,
        "temperature_headroom_c": headroom,
        "power_draw_w": draw,
        "power_limit_w": limit,
        "power_max_limit_w": _number(_text(power, "max_power_limit")),
        "fabric_state": _text(gpu, "fabric/state"),
        "fabric_status": _text(gpu, "fabric/status"),
    }


def parse_query_csv(text: str) -> list[dict[str, str | None]]:
    """``nvidia-smi --query-gpu=... --format=csv``: one dict per GPU, units kept out of keys."""
    rows = list(csv.reader(io.StringIO(text.strip()), skipinitialspace=True))
    if not rows:
        return []
    keys = [re.sub(r"\s*\[.*\]$", "", key.strip()) for key in rows[0]]
    records = []
    for row in rows[1:]:
        if not row:
            continue
        values = [None if cell.strip() in _MISSING else cell.strip() for cell in row]
        records.append(dict(zip(keys, values, strict=False)))
    return records


def parse_smi_header(text: str) -> dict[str, str | None]:
    """Plain ``nvidia-smi``: the versions in its banner, or the error it printed instead."""
    match = _SMI_HEADER.search(text)
    if match:
        return {
            "smi_version": match["smi"],
            "driver_version": match["driver"],
            "cuda_version": match["cuda"],
            "error": None,
        }
    error = next((line.strip() for line in text.splitlines() if line.strip()), None)
    return {"smi_version": None, "driver_version": None, "cuda_version": None, "error": error}


def parse_proc_version(text: str) -> dict[str, str | None]:
    """``/proc/driver/nvidia/version``: the loaded kernel module's version and flavour."""
    match = _NVRM.search(text)
    if not match:
        return {"version": None, "flavor": None}
    flavor = "open" if "Open Kernel Module" in match["text"] else "proprietary"
    return {"version": match["version"], "flavor": flavor}


def parse_topology(text: str) -> dict[str, Any]:
    """``nvidia-smi topo -m``: how each pair of GPUs is connected, and the NVLink pairs."""
    # The header row is printed with terminal escapes around it.
    clean = re.sub(r"\x1b\[[0-9;]*m", "", text)
    lines = [line for line in clean.splitlines() if line.strip()]
    header: list[str] = []
    links: dict[str, dict[str, str]] = {}
    for line in lines:
        cells = line.split("\t")
        if not header and cells and cells[0].strip() == "" and "GPU0" in line:
            header = [c.strip() for c in cells[1:]]
            continue
        name = cells[0].strip()
        if header and re.fullmatch(r"GPU\d+", name):
            row = [c.strip() for c in cells[1:]]
            links[name] = {
                peer: value
                for peer, value in zip(header, row, strict=False)
                if re.fullmatch(r"GPU\d+", peer) and peer != name
            }
        elif line.startswith("Legend"):
            break
    pairs = sorted({tuple(sorted((a, b))) for a, row in links.items() for b in row})
    nvlink = [list(p) for p in pairs if links[p[0]].get(p[1], "").startswith("NV")]
    return {"gpus": sorted(links), "pairs": len(pairs), "nvlink_pairs": nvlink}


def parse_containerd_dump(text: str) -> list[str]:
    """Runtime names that ``containerd config dump`` shows under the CRI plugin."""
    found = re.findall(r'\.containerd\.runtimes\.(?:"([^"]+)"|([\w-]+))\]', text)
    return sorted({quoted or bare for quoted, bare in found})


# PCIe transfer rate per lane (GT/s, as sysfs writes it) for each generation.
_PCIE_GEN_BY_RATE = {2.5: 1, 5.0: 2, 8.0: 3, 16.0: 4, 32.0: 5, 64.0: 6}


def sysfs_pci_name(bus_id: str | None) -> str | None:
    """nvidia-smi's bus id (``00000000:00:06.0``) as the kernel names the device (``0000:00:06.0``)."""
    match = re.fullmatch(r"([0-9A-Fa-f]+):([0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7])", bus_id or "")
    if not match:
        return None
    return f"{int(match.group(1), 16):04x}:{match.group(2).lower()}"


def pcie_gen_from_speed(text: str | None) -> int | None:
    """``32.0 GT/s PCIe`` -> 5; None for what sysfs reports as unknown."""
    rate = _number(text)
    return None if rate is None else _PCIE_GEN_BY_RATE.get(rate)


def read_pci_link(sysfs_root: str, bus_id: str | None) -> dict[str, int | None] | None:
    """The GPU's own PCIe link limits from sysfs: its Link Capabilities, which the slot does not
    lower (NVML's maximum is what the device and the slot allow together)."""
    name = sysfs_pci_name(bus_id)
    if name is None:
        return None
    folder = "{}/bus/pci/devices/{}".format(sysfs_root.rstrip("/"), name)
    values: dict[str, str | None] = {}
    for key in ("max_link_width", "max_link_speed", "current_link_width", "current_link_speed"):
        try:
            with open(f"{folder}/{key}") as handle:
                values[key] = handle.read().strip()
        except OSError:
            values[key] = None
    if values["max_link_width"] is None and values["max_link_speed"] is None:
        return None
    return {
        "width_max": _int(values["max_link_width"]),
        "gen_max": pcie_gen_from_speed(values["max_link_speed"]),
        "width": _int(values["current_link_width"]),
        "gen": pcie_gen_from_speed(values["current_link_speed"]),
    }


def parse_nvlink_status(text: str) -> dict[str, dict[str, int]]:
    """``nvidia-smi nvlink -s``: active and inactive links per GPU (``GPU0``: {...})."""
    result: dict[str, dict[str, int]] = {}
    current: dict[str, int] | None = None
    for line in text.splitlines():
        gpu = re.match(r"\s*GPU (\d+):", line)
        if gpu:
            current = result.setdefault("GPU" + gpu.group(1), {"active": 0, "inactive": 0})
            continue
        link = re.match(r"\s*Link \d+:\s*(.*)$", line)
        if link and current is not None:
            state = link.group(1).strip().lower()
            current["inactive" if not state or "inactive" in state else "active"] += 1
    return result


_DKMS_LINE = re.compile(
    r"^(?P<name>[^/,:\s]+)(?:/|,\s*)(?P<version>[^,:\s]+)"
    r"(?:,\s*(?P<kernel>[^,:\s]+))?(?:,\s*(?P<arch>[^,:\s]+))?:\s*(?P<status>[A-Za-z]+)"
)


def parse_dkms_status(text: str) -> list[dict[str, str | None]]:
    """``dkms status`` (dkms 2 ``name, version, kernel, arch: state`` and dkms 3 ``name/version,
    kernel, arch: state``)."""
    entries = []
    for line in text.splitlines():
        match = _DKMS_LINE.match(line.strip())
        if match:
            entries.append(
                {key: match.group(key) for key in ("name", "version", "kernel", "status")}
            )
    return entries


def parse_ethtool_driver(text: str) -> dict[str, str | None]:
    """``ethtool -i IFACE``: the NIC's driver, its version and the firmware version."""
    fields = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            fields[key.strip()] = value.strip() or None
    return {
        "driver": fields.get("driver"),
        "version": fields.get("version"),
        "firmware": fields.get("firmware-version"),
    }


def parse_dcgm_diag(text: str) -> list[dict[str, str]]:
    """Rows of ``dcgmi diag``'s result table whose result is Pass, Fail, Warn or Skip."""
    rows = []
    for line in text.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) != 2 or not cells[0]:
            continue
        result = cells[1].split(" ")[0]
        if result in ("Pass", "Fail", "Warn", "Skip"):
            rows.append({"test": cells[0], "result": result, "detail": ""})
        elif cells[0] in ("Warning", "Error", "Info") and rows:
            # A failed test's explanation follows it on its own row(s).
            rows[-1]["detail"] = (rows[-1]["detail"] + " " + cells[1]).strip()
    return rows


def merge_csv(gpus: list[dict[str, Any]], rows: list[dict[str, str | None]]) -> None:
    """Add the index nvidia-smi assigns (only the CSV query has it) to the XML records."""
    by_bus = {(row.get("pci.bus_id") or "").lower(): row for row in rows}
    for position, gpu in enumerate(gpus):
        row = by_bus.get((gpu.get("bus_id") or "").lower())
        index = _int(row.get("index")) if row else None
        gpu["index"] = position if index is None else index


def _check(
    name: str, status: str, detail: str, expected: Any = None, actual: Any = None
) -> dict[str, Any]:
    return {
        "name": name,
        "status": status,
        "detail": detail,
        "expected": expected,
        "actual": actual,
    }


def _per_gpu(
    gpus: list[dict[str, Any]],
    bad: list[str],
    name: str,
    ok_detail: str,
    expected: Any,
    actual: Any,
    status_when_bad: str = "fail",
) -> dict[str, Any]:
    if bad:
        return _check(name, status_when_bad, "; ".join(bad), expected, actual)
    return _check(name, "pass", ok_detail, expected, actual)


def evaluate(observed: dict[str, Any], expect: dict[str, Any]) -> dict[str, Any]:
    """Judge what was observed on a host; returns the report (summary, checks, gpus, driver).

    ``observed`` keys: host, pci_gpu_count, smi_found, smi_header (parse_smi_header),
    smi (parse_query_xml or None; each GPU may carry ``pcie_sysfs`` from read_pci_link),
    kernel_module (parse_proc_version or None), topology (parse_topology or None),
    nvlink_status (parse_nvlink_status or None), runtimes ({name: {"installed": bool,
    "runtimes": [...]}}), kernel_release, dkms (parse_dkms_status, or None without dkms),
    uvm_devices ({path: exists}), nvswitch_count, fabric_manager ({"state": systemd's
    ActiveState or None}), dcgm ({"found", "rc", "output"} or None), nics ({iface:
    parse_ethtool_driver}), timed_out ({program: {"command", "seconds"}} for each program one
    of whose runs did not answer in time and was ended; the check it feeds fails saying so).
    ``expect`` keys: driver_version, gpu_count (None: not asserted), mig_mode
    (enabled|disabled|any), persistence_mode (bool), min_temperature_headroom_c,
    min_power_headroom_pct, nvlink (bool or None), nvlink_pairs (["0-1", ...]),
    nvlink_min_pairs, pcie_gen, pcie_width (None: the GPU's own maximum), dcgm_diag_level
    (0: not run), container_runtimes (list).
    """
    smi = observed.get("smi") or {}
    gpus: list[dict[str, Any]] = list(smi.get("gpus") or [])
    header = observed.get("smi_header") or {}
    kernel = observed.get("kernel_module") or {}
    smi_hung = _timed_out(observed, "nvidia-smi", hint=False)
    # A GPU that fell off the bus may vanish from the PCI bus too, and hang nvidia-smi: that host
    # has a GPU, whatever the bus says now.
    gpu_present = bool(gpus) or int(observed.get("pci_gpu_count") or 0) > 0 or bool(smi_hung)
    nvml_version = smi.get("driver_version") or header.get("driver_version")
    driver = {
        "nvml_version": nvml_version,
        "smi_version": header.get("smi_version"),
        "kernel_module_version": kernel.get("version"),
        "kernel_module_flavor": kernel.get("flavor"),
        "cuda_version": smi.get("cuda_version") or header.get("cuda_version"),
        "smi_error": (smi_hung or header.get("error")) if not nvml_version else None,
    }
    checks: list[dict[str, Any]] = []
    if gpu_present:
        checks.extend(_gpu_checks(observed, expect, gpus, driver))
    else:
        # What would have been asserted stays visible, so the report reads the same on a GPU host.
        wanted = {
            "driver_version": expect.get("driver_version"),
            "gpu_count": expect.get("gpu_count"),
            "mig_mode": expect.get("mig_mode"),
            "persistence_mode": expect.get("persistence_mode", True),
        }
        checks.extend(_check(name, "skip", NO_GPU, wanted.get(name)) for name in GPU_CHECKS)
    checks.extend(
        _runtime_checks(
            observed.get("runtimes") or {}, list(expect.get("container_runtimes") or [])
        )
    )
    # A command that was ended left its check without data: that check fails, saying why.
    for program, name in _TIMEOUT_CHECKS.items():
        detail = _timed_out(observed, program)
        if detail:
            for found in checks:
                if found["name"] == name:
                    found.update(status="fail", detail=detail)
    failed = [c["name"] for c in checks if c["status"] == "fail"]
    summary = "failed" if failed else ("ok" if gpu_present else NO_GPU)
    return {
        "host": observed.get("host"),
        "gpu_present": gpu_present,
        "summary": summary,
        "failed": failed,
        "checks": checks,
        "gpus": gpus,
        "driver": driver,
        # What the hosts of one group must share; check.yml compares it across them.
        "inventory": {
            "driver": nvml_version or kernel.get("version"),
            "vbios": {
                str(name): sorted(
                    {g["vbios_version"] for g in gpus if g["name"] == name and g["vbios_version"]}
                )
                for name in {g["name"] for g in gpus}
            },
            "kernel": observed.get("kernel_release"),
            "nics": observed.get("nics") or {},
        },
    }


def _gpu_checks(
    observed: dict[str, Any],
    expect: dict[str, Any],
    gpus: list[dict[str, Any]],
    driver: dict[str, Any],
) -> list[dict[str, Any]]:
    checks = []
    nvml = driver["nvml_version"]
    kernel = driver["kernel_module_version"]
    wanted = expect.get("driver_version")
    # nvidia-smi that hangs (a GPU off the bus, a wedged driver) was ended: every later call would
    # hang as well, so whatever it had not printed yet is unknown.
    hung = _timed_out(observed, "nvidia-smi")
    if not observed.get("smi_found"):
        unusable = "nvidia-smi not found, though the PCI bus shows an NVIDIA GPU"
    elif hung:
        unusable = hung
    elif not nvml:
        unusable = f"nvidia-smi failed: {driver['smi_error'] or 'no output'}"
    else:
        unusable = ""

    if unusable:
        # A banner read before a later call hung still tells which driver runs.
        mismatch = f"driver {nvml} runs, {wanted} is pinned; " if nvml and nvml != wanted else ""
        checks.append(_check("driver_version", "fail", mismatch + unusable, wanted, nvml))
    elif nvml != wanted:
        checks.append(
            _check(
                "driver_version", "fail", f"driver {nvml} runs, {wanted} is pinned", wanted, nvml
            )
        )
    else:
        checks.append(_check("driver_version", "pass", f"driver {nvml}", wanted, nvml))

    if kernel is None:
        checks.append(
            _check(
                "nvml_kernel_match",
                "fail",
                "no NVIDIA kernel module loaded (/proc/driver/nvidia/version missing)",
                nvml,
                None,
            )
        )
    elif not nvml and hung:
        checks.append(
            _check(
                "nvml_kernel_match",
                "skip",
                "kernel module {} loaded; NVML not read: {}".format(
                    kernel, _timed_out(observed, "nvidia-smi", hint=False)
                ),
                kernel,
                None,
            )
        )
    elif not nvml or nvml != kernel:
        checks.append(
            _check(
                "nvml_kernel_match",
                "fail",
                "kernel module {}, user-space NVML {}: reboot or reload the module after a driver "
                "change".format(kernel, nvml or f"unusable ({unusable})"),
                kernel,
                nvml,
            )
        )
    else:
        checks.append(
            _check(
                "nvml_kernel_match", "pass", f"kernel module and NVML both {kernel}", kernel, nvml
            )
        )

    count = len(gpus) if gpus else int(observed.get("pci_gpu_count") or 0)
    expected_count = expect.get("gpu_count")
    if expected_count is None:
        checks.append(
            _check(
                "gpu_count",
                "skip",
                f"{count} GPU(s); gpu_node_check_expected_gpu_count is not set",
                None,
                count,
            )
        )
    elif count != expected_count:
        checks.append(
            _check(
                "gpu_count",
                "fail",
                f"{count} GPU(s) visible, {expected_count} expected",
                expected_count,
                count,
            )
        )
    else:
        checks.append(_check("gpu_count", "pass", f"{count} GPU(s)", expected_count, count))

    if not gpus:
        why = _timed_out(observed, "nvidia-smi", hint=False) or unusable
        reason = f"no per-GPU data: {why or 'nvidia-smi listed no GPU'}"
        checks.extend(_check(name, "skip", reason) for name in _PER_GPU_CHECKS)
    else:
        checks.extend(
            [
                _persistence(gpus, bool(expect.get("persistence_mode", True))),
                _ecc_mode(gpus),
                _ecc_errors(gpus),
                _remapped_rows(gpus),
                _pcie(gpus, expect.get("pcie_gen"), expect.get("pcie_width")),
                _mig(gpus, str(expect.get("mig_mode") or "any")),
                _topology(
                    observed.get("topology"),
                    observed.get("nvlink_status"),
                    gpus,
                    expect.get("nvlink"),
                    expect.get("nvlink_pairs"),
                    expect.get("nvlink_min_pairs"),
                    _timed_out(observed, "nvidia-smi", hint=False),
                ),
                _temperature(gpus, int(expect.get("min_temperature_headroom_c") or 0)),
                _power(gpus, float(expect.get("min_power_headroom_pct") or 0)),
            ]
        )
    # What the host must have for the GPUs to be usable, read whether or not nvidia-smi works:
    # a missing DKMS build is often why it does not.
    checks.extend(
        [
            _dkms(observed, wanted),
            _uvm(observed.get("uvm_devices")),
            _fabric_manager(observed, gpus),
            _dcgm(observed.get("dcgm"), int(expect.get("dcgm_diag_level") or 0)),
        ]
    )
    return checks


def _label(gpu: dict[str, Any]) -> str:
    return "GPU {} ({})".format(gpu.get("index", "?"), gpu.get("bus_id"))


def _persistence(gpus: list[dict[str, Any]], wanted: bool) -> dict[str, Any]:
    actual = [g["persistence_mode"] for g in gpus]
    bad = [
        "{}: persistence mode {}".format(_label(g), _word(g["persistence_mode"]))
        for g in gpus
        if g["persistence_mode"] is not wanted
    ]
    return _per_gpu(gpus, bad, "persistence_mode", f"{_word(wanted)} on every GPU", wanted, actual)


def _word(flag: bool | None) -> str:
    return {True: "enabled", False: "disabled", None: "unknown"}[flag]


def _ecc_mode(gpus: list[dict[str, Any]]) -> dict[str, Any]:
    actual = [g["ecc_mode_current"] for g in gpus]
    if all(v is None for v in actual):
        return _check("ecc_mode", "skip", "ECC not supported by these GPUs", True, actual)
    bad = [
        "{}: ECC {}".format(_label(g), _word(g["ecc_mode_current"]))
        for g in gpus
        if g["ecc_mode_current"] is False
    ]
    bad += [
        "{}: ECC {}, {} after reset".format(
            _label(g), _word(g["ecc_mode_current"]), _word(g["ecc_mode_pending"])
        )
        for g in gpus
        if g["ecc_mode_current"] and g["ecc_mode_pending"] is False
    ]
    return _per_gpu(gpus, bad, "ecc_mode", "ECC enabled on every GPU", True, actual)


def _ecc_errors(gpus: list[dict[str, Any]]) -> dict[str, Any]:
    actual = [g["ecc_volatile_uncorrectable"] for g in gpus]
    bad = [
        f"{_label(g)}: {g['ecc_volatile_uncorrectable']} volatile uncorrectable ECC error(s)"
        for g in gpus
        if g["ecc_volatile_uncorrectable"]
    ]
    return _per_gpu(gpus, bad, "ecc_errors", "no volatile uncorrectable ECC errors", 0, actual)


def _remapped_rows(gpus: list[dict[str, Any]]) -> dict[str, Any]:
    actual = [
        {
            "failure": g["remapped_rows_failure"],
            "pending": g["remapped_rows_pending"],
            "uncorrectable": g["remapped_rows_uncorrectable"],
        }
        for g in gpus
    ]
    if all(g["remapped_rows_failure"] is None for g in gpus):
        return _check(
            "remapped_rows", "skip", "row remapping not supported by these GPUs", None, actual
        )
    failed = [
        f"{_label(g)}: row remapping failed (the GPU needs service)"
        for g in gpus
        if g["remapped_rows_failure"]
    ]
    if failed:
        return _check("remapped_rows", "fail", "; ".join(failed), "no failure", actual)
    pending = [
        f"{_label(g)}: remapped rows pending, reset the GPU"
        for g in gpus
        if g["remapped_rows_pending"]
    ]
    return _per_gpu(
        gpus,
        pending,
        "remapped_rows",
        "no failed or pending row remapping",
        "no failure",
        actual,
        status_when_bad="warn",
    )


def _pcie(
    gpus: list[dict[str, Any]], expected_gen: int | None, expected_width: int | None
) -> dict[str, Any]:
    """Each link against the GPU's own maximum, or the host group's expected generation and width.

    NVML's maximum is what the device and the slot allow together, so an x16 GPU in an x8-wired
    slot reports max x8: the device's own limits come from sysfs (its Link Capabilities) and from
    the XML's max_device_link_gen.
    """
    actual = []
    bad, idle = [], []
    for gpu in gpus:
        sysfs = gpu.get("pcie_sysfs") or {}
        width, slot_width = gpu["pcie_width_current"], gpu["pcie_width_max"]
        gen, slot_gen = gpu["pcie_gen_current"], gpu["pcie_gen_max"]
        device_width = sysfs.get("width_max") or slot_width
        device_gen = gpu.get("pcie_gen_device_max") or sysfs.get("gen_max") or slot_gen
        target_width = expected_width or device_width
        target_gen = expected_gen or device_gen
        why_width = "expected for this host group" if expected_width else "the GPU's maximum"
        why_gen = "expected for this host group" if expected_gen else "the GPU's maximum"
        actual.append(
            {
                "gen": gen,
                "gen_max": slot_gen,
                "gen_device_max": device_gen,
                "width": width,
                "width_max": slot_width,
                "width_device_max": device_width,
            }
        )
        if width is not None and target_width is not None and width < target_width:
            message = f"{_label(gpu)}: PCIe link x{width} of max x{target_width} ({why_width}"
            if slot_width is not None and slot_width < target_width:
                message += (
                    f"; the slot allows only x{slot_width}: an x{slot_width}-wired slot or riser,"
                    f" move the GPU to a full-width slot"
                )
            else:
                message += "; reseat the GPU or its riser"
            bad.append(message + ")")
        if gen is None or target_gen is None or gen >= target_gen:
            continue
        message = f"{_label(gpu)}: PCIe gen {gen} of max gen {target_gen} ({why_gen}"
        if slot_gen is not None and slot_gen < target_gen:
            # The slot caps the link: no load brings it up, so idle is no excuse.
            bad.append(message + f"; the slot allows only gen {slot_gen})")
        elif (gpu.get("performance_state") or "P0") not in ("P0", "P1", "P2"):
            # An idle GPU may train its link down to save power; at P0 it must not.
            idle.append(message + ") at {} (idle)".format(gpu["performance_state"]))
        else:
            bad.append(message + ")")
    expected = {
        "gen": expected_gen or "the GPU's maximum",
        "width": expected_width or "the GPU's maximum",
    }
    if bad:
        return _check("pcie_link", "fail", "; ".join(bad + idle), expected, actual)
    ok = (
        "every link at gen {} x{} or better".format(expected_gen or "max", expected_width or "max")
        if expected_gen or expected_width
        else "every link at its GPU's maximum generation and width"
    )
    return _per_gpu(gpus, idle, "pcie_link", ok, expected, actual, status_when_bad="warn")


def _mig(gpus: list[dict[str, Any]], wanted: str) -> dict[str, Any]:
    actual = [g["mig_mode_current"] for g in gpus]
    if wanted == "any":
        return _check(
            "mig_mode",
            "skip",
            "MIG mode not asserted (gpu_node_check_mig_mode: any)",
            wanted,
            actual,
        )
    if all(v is None for v in actual):
        return _check(
            "mig_mode",
            "fail" if wanted == "enabled" else "pass",
            "these GPUs do not support MIG",
            wanted,
            actual,
        )
    flag = wanted == "enabled"
    bad = [
        "{}: MIG {}".format(_label(g), _word(g["mig_mode_current"]))
        for g in gpus
        if g["mig_mode_current"] is not flag and g["mig_mode_current"] is not None
    ]
    bad += [
        "{}: MIG {} until reset".format(_label(g), _word(g["mig_mode_pending"]))
        for g in gpus
        if g["mig_mode_pending"] is not None and g["mig_mode_pending"] != g["mig_mode_current"]
    ]
    return _per_gpu(gpus, bad, "mig_mode", f"MIG {wanted} on every GPU", wanted, actual)


def nvlink_pair(text: str) -> tuple[str, str] | None:
    """``0-1``, ``GPU0-GPU1`` or ``0,1`` as a sorted pair of topology names; None if malformed."""
    match = re.fullmatch(r"\s*(?:GPU)?(\d+)\s*[-,:]\s*(?:GPU)?(\d+)\s*", text, re.IGNORECASE)
    if not match or match.group(1) == match.group(2):
        return None
    a, b = sorted((int(match.group(1)), int(match.group(2))))
    return (f"GPU{a}", f"GPU{b}")


def _topology(
    topology: dict[str, Any] | None,
    nvlink_status: dict[str, dict[str, int]] | None,
    gpus: list[dict[str, Any]],
    nvlink: bool | None,
    expected_pairs: list[str] | None,
    min_pairs: int | None,
    smi_hung: str | None = None,
) -> dict[str, Any]:
    expected: dict[str, Any] = {}
    if nvlink is not None:
        expected["all_pairs"] = nvlink
    if expected_pairs:
        expected["pairs"] = sorted(expected_pairs)
    if min_pairs:
        expected["min_pairs"] = min_pairs
    asserted = bool(nvlink) or bool(expected_pairs) or bool(min_pairs)
    if not topology:
        return _check(
            "topology",
            "fail" if asserted else "skip",
            (f"not read: {smi_hung}" if smi_hung else "nvidia-smi topo -m gave no matrix")
            + (", NVLink expected" if asserted else ""),
            expected or nvlink,
            None,
        )
    pairs = topology["pairs"]
    linked = {tuple(pair) for pair in topology["nvlink_pairs"]}
    actual = {
        "gpu_pairs": pairs,
        "nvlink_pairs": len(linked),
        "linked": ["-".join(pair) for pair in sorted(linked)],
        "links": nvlink_status or {},
    }
    if pairs == 0:
        return _check(
            "topology", "skip", f"{len(gpus)} GPU: no peers to link", expected or nvlink, actual
        )
    detail = f"{len(linked)} of {pairs} GPU pairs connected by NVLink"
    if not asserted:
        return _check("topology", "pass", detail + " (not asserted)", expected or nvlink, actual)
    bad = []
    if nvlink and len(linked) < pairs:
        bad.append(detail + ", all expected")
    if min_pairs and len(linked) < min_pairs:
        bad.append(f"{detail}, at least {min_pairs} expected")
    wanted = [pair for pair in (nvlink_pair(text) for text in expected_pairs or []) if pair]
    missing = ["-".join(pair) for pair in wanted if pair not in linked]
    if missing:
        bad.append(
            "{} not linked by NVLink (linked: {}): seat or fit the bridge".format(
                ", ".join(missing), ", ".join(actual["linked"]) or "none"
            )
        )
    # A bridge that is only partly seated leaves some of a GPU's links down.
    for name in sorted({gpu for pair in wanted for gpu in pair}):
        state = (nvlink_status or {}).get(name)
        if state and state["inactive"]:
            total = state["active"] + state["inactive"]
            bad.append(f"{name}: {state['inactive']} of {total} NVLinks inactive")
    if bad:
        return _check("topology", "fail", "; ".join(bad), expected, actual)
    return _check("topology", "pass", detail, expected, actual)


def _temperature(gpus: list[dict[str, Any]], minimum: int) -> dict[str, Any]:
    actual = [g["temperature_headroom_c"] for g in gpus]
    if all(v is None for v in actual):
        return _check(
            "temperature_headroom", "skip", "no temperature limits reported", minimum, actual
        )
    bad = [
        f"{_label(g)}: {g['temperature_headroom_c']} C below its slowdown limit, {minimum} C required"
        for g in gpus
        if g["temperature_headroom_c"] is not None and g["temperature_headroom_c"] < minimum
    ]
    return _per_gpu(
        gpus,
        bad,
        "temperature_headroom",
        f"at least {minimum} C below the slowdown limit (smallest margin {min(v for v in actual if v is not None)} C)",
        minimum,
        actual,
    )


def _power(gpus: list[dict[str, Any]], minimum_pct: float) -> dict[str, Any]:
    actual = [
        {
            "draw_w": g["power_draw_w"],
            "limit_w": g["power_limit_w"],
            "max_limit_w": g["power_max_limit_w"],
        }
        for g in gpus
    ]
    measured = [g for g in gpus if g["power_draw_w"] is not None and g["power_limit_w"]]
    if not measured:
        return _check("power_headroom", "skip", "no power readings", minimum_pct, actual)
    notes = []
    for gpu in measured:
        headroom = 100.0 * (1 - gpu["power_draw_w"] / gpu["power_limit_w"])
        if headroom < minimum_pct:
            notes.append(
                "{}: drawing {:.0f} W of {:.0f} W ({:.0f}% headroom)".format(
                    _label(gpu), gpu["power_draw_w"], gpu["power_limit_w"], headroom
                )
            )
        if gpu["power_max_limit_w"] and gpu["power_limit_w"] < gpu["power_max_limit_w"]:
            notes.append(
                "{}: power limit {:.0f} W below its maximum {:.0f} W".format(
                    _label(gpu), gpu["power_limit_w"], gpu["power_max_limit_w"]
                )
            )
    # Power draw depends on the load at the moment of the check: worth a warning, not a verdict.
    return _per_gpu(
        gpus,
        notes,
        "power_headroom",
        f"every GPU at least {minimum_pct:g}% below its power limit",
        minimum_pct,
        actual,
        status_when_bad="warn",
    )


def _dkms(observed: dict[str, Any], wanted: str | None) -> dict[str, Any]:
    """The pinned driver's module built and installed by DKMS for the running kernel."""
    entries = observed.get("dkms")
    kernel = observed.get("kernel_release")
    expected = {"version": wanted, "kernel": kernel}
    if entries is None:
        return _check(
            "dkms", "skip", "dkms not installed: the module is not built by DKMS", expected
        )
    nvidia = [e for e in entries if "nvidia" in (e["name"] or "")]
    if not nvidia:
        return _check("dkms", "skip", "DKMS holds no NVIDIA module", expected, entries)
    pinned = [e for e in nvidia if e["version"] == wanted]
    ready = [e for e in pinned if e["kernel"] == kernel and e["status"] == "installed"]
    if ready:
        entry = ready[0]
        return _check(
            "dkms",
            "pass",
            "{}/{} installed for the running kernel {}".format(
                entry["name"], entry["version"], kernel
            ),
            expected,
            nvidia,
        )
    if not pinned:
        found = ", ".join(sorted({"{}/{}".format(e["name"], e["version"]) for e in nvidia}))
        detail = f"DKMS has {found}, not the pinned {wanted}"
    else:
        name = pinned[0]["name"]
        built = sorted({e["kernel"] for e in pinned if e["kernel"] and e["status"] == "installed"})
        detail = (
            "{}/{} is not installed for the running kernel {}{}: install linux-headers-{} "
            "and run 'dkms autoinstall', then reboot".format(
                name,
                wanted,
                kernel,
                " (built for {})".format(", ".join(built)) if built else "",
                kernel,
            )
        )
    return _check("dkms", "fail", detail, expected, nvidia)


def _uvm(devices: dict[str, bool] | None) -> dict[str, Any]:
    if devices is None:
        return _check("uvm_devices", "skip", "device nodes not read", list(UVM_DEVICES))
    missing = [path for path in UVM_DEVICES if not devices.get(path)]
    if missing:
        return _check(
            "uvm_devices",
            "fail",
            "{} missing: CUDA in containers cannot run; create them with "
            "'nvidia-modprobe -u -c=0' (the nvidia-uvm module)".format(" and ".join(missing)),
            list(UVM_DEVICES),
            devices,
        )
    return _check(
        "uvm_devices", "pass", " and ".join(UVM_DEVICES) + " present", list(UVM_DEVICES), devices
    )


def _fabric_manager(observed: dict[str, Any], gpus: list[dict[str, Any]]) -> dict[str, Any]:
    """On NVSwitch systems the GPUs join the NVLink fabric only through Fabric Manager."""
    switches = int(observed.get("nvswitch_count") or 0)
    service = observed.get("fabric_manager") or {}
    actual = {"nvswitches": switches, "service": service.get("state")}
    if not switches:
        return _check("fabric_manager", "skip", "no NVSwitch on the PCI bus", None, actual)
    bad = []
    if service.get("state") != "active":
        bad.append(
            "{} NVSwitch(es) on the PCI bus and nvidia-fabricmanager is {}: install the build "
            "matching the driver and 'systemctl enable --now nvidia-fabricmanager'".format(
                switches, service.get("state") or "not installed"
            )
        )
    for gpu in gpus:
        state, status = gpu.get("fabric_state"), gpu.get("fabric_status")
        if state is not None and (state != "Completed" or (status or "Success") != "Success"):
            bad.append(f"{_label(gpu)}: fabric registration {state}, status {status}")
    if bad:
        return _check("fabric_manager", "fail", "; ".join(bad), "active", actual)
    return _check(
        "fabric_manager",
        "pass",
        f"{switches} NVSwitch(es), nvidia-fabricmanager active",
        "active",
        actual,
    )


def _dcgm(dcgm: dict[str, Any] | None, level: int) -> dict[str, Any]:
    if not level:
        return _check("dcgm_diag", "skip", "not run (gpu_node_check_dcgm_diag_level: 0)", level)
    if not dcgm or not dcgm.get("found"):
        return _check("dcgm_diag", "skip", "DCGM not installed (no dcgmi)", level)
    rows = parse_dcgm_diag(dcgm.get("output") or "")
    failed = [row for row in rows if row["result"] == "Fail"]
    if failed:
        detail = "; ".join(
            "{} failed{}".format(row["test"], ": " + row["detail"] if row["detail"] else "")
            for row in failed
        )
        return _check("dcgm_diag", "fail", f"dcgmi diag -r {level}: {detail}", level, rows)
    if dcgm.get("rc"):
        first = next(
            (line.strip() for line in (dcgm.get("output") or "").splitlines() if line.strip()), ""
        )
        return _check(
            "dcgm_diag",
            "fail",
            "dcgmi diag -r {} exited {}: {}".format(level, dcgm["rc"], first),
            level,
            rows,
        )
    passed = sum(1 for row in rows if row["result"] == "Pass")
    return _check(
        "dcgm_diag", "pass", f"dcgmi diag -r {level}: {passed} test(s) passed", level, rows
    )


def _runtime_checks(runtimes: dict[str, dict[str, Any]], wanted: list[str]) -> list[dict[str, Any]]:
    if not wanted:
        return [
            _check(
                "container_runtime",
                "skip",
                "no container runtime expected (gpu_node_check_container_runtimes)",
            )
        ]
    bad, seen = [], {}
    for name in wanted:
        state = runtimes.get(name) or {}
        seen[name] = state.get("runtimes")
        if not state.get("installed"):
            bad.append(f"{name} is not installed")
        elif state.get("error"):
            bad.append("{}: {}".format(name, state["error"]))
        elif "nvidia" not in (state.get("runtimes") or []):
            bad.append(
                "{} does not know the nvidia runtime (has: {})".format(
                    name, ", ".join(state.get("runtimes") or []) or "none"
                )
            )
    if bad:
        return [_check("container_runtime", "fail", "; ".join(bad), "nvidia", seen)]
    return [
        _check(
            "container_runtime",
            "pass",
            f"{' and '.join(wanted)} {'know' if len(wanted) > 1 else 'knows'} the nvidia runtime",
            "nvidia",
            seen,
        )
    ]


def _fleet_attributes(report: dict[str, Any]) -> dict[str, str]:
    """The values the hosts of one group must share, named for a reader."""
    inventory = report.get("inventory") or {}
    values = {
        "driver build": inventory.get("driver"),
        "kernel": inventory.get("kernel"),
    }
    # A group may mix GPU models, each with its own VBIOS line: compare like with like.
    for model, versions in sorted((inventory.get("vbios") or {}).items()):
        values[f"VBIOS of {model}"] = ", ".join(versions) or None
    for name, nic in sorted((inventory.get("nics") or {}).items()):
        values[f"NIC {name} driver"] = " ".join(
            part for part in (nic.get("driver"), nic.get("version")) if part
        ) or nic.get("error")
        values[f"NIC {name} firmware"] = nic.get("firmware") or nic.get("error")
    return {key: "unknown" if value is None else str(value) for key, value in values.items()}


def compare_fleet(
    reports: dict[str, dict[str, Any]], groups: dict[str, list[str]]
) -> list[dict[str, Any]]:
    """Values that differ between the hosts of a group: driver build, VBIOS, kernel, NIC driver
    and firmware. The most common value is the group's; every other host is an outlier. With no
    majority every host's value is listed."""
    findings = []
    for group, members in sorted(groups.items()):
        hosts = [host for host in members if host in reports]
        if len(hosts) < 2:
            continue
        per_host = {host: _fleet_attributes(reports[host]) for host in hosts}
        names = sorted({name for values in per_host.values() for name in values})
        for name in names:
            # A host without a GPU model has no VBIOS of it to compare; a host without a NIC
            # that its group's hosts record is an outlier.
            values = {
                host: per_host[host].get(name, "absent")
                for host in hosts
                if name in per_host[host] or not name.startswith("VBIOS of ")
            }
            if len(set(values.values())) < 2 or set(values.values()) == {"unknown"}:
                continue
            counts: dict[str, int] = {}
            for value in values.values():
                counts[value] = counts.get(value, 0) + 1
            ranked = sorted(counts.items(), key=lambda item: -item[1])
            majority = ranked[0][0] if ranked[0][1] > ranked[1][1] else None
            outliers = {h: v for h, v in sorted(values.items()) if v != majority}
            if majority is None:
                message = "{}: {} differs between its hosts: {}".format(
                    group, name, ", ".join(f"{h} has {v}" for h, v in outliers.items())
                )
            else:
                message = "{}: {}: {} (the other {} host(s) have {})".format(
                    group,
                    name,
                    ", ".join(f"{h} has {v}" for h, v in outliers.items()),
                    counts[majority],
                    majority,
                )
            findings.append(
                {
                    "group": group,
                    "attribute": name,
                    "majority": majority,
                    "outliers": outliers,
                    "message": message,
                }
            )
    return findings

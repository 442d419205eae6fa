"""The bare-metal XID watcher: kernel lines parsed, fatal codes picked, the node cordoned once per
event with the reason recorded; the role's list is the decision's."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from types import ModuleType

import yaml

from tests.conftest import ROOT

ROLE = ROOT / "roles" / "gpu_xid_cordon"
SCRIPT = ROLE / "files" / "gpu_xid_cordon.py"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gpu_xid_cordon", SCRIPT)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules["gpu_xid_cordon"] = module
    spec.loader.exec_module(module)
    return module


watcher = _load()
DEFAULT_XIDS = frozenset(
    yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())["gpu_xid_cordon_xids"]
)

# Kernel lines as journalctl -k and dmesg print them, in the driver's formats (R535 and later add
# pid= and name=; older ones do not; the bus id may carry a domain and a function).
KERNEL = [
    "[ 1043.127731] NVRM: Xid (PCI:0000:3b:00): 79, pid=0, name=, GPU has fallen off the bus.",
    "Dec 01 03:12:09 gpu-node-01 kernel: NVRM: Xid (PCI:0000:18:00): 48, pid=21334, "
    "name=python3, Ch 00000010, An uncorrectable double bit error (DBE) has been detected on "
    "GPU in the framebuffer at partition 0, subpartition 1.",
    "[  812.004100] NVRM: Xid (PCI:0000:3b:00): 13, pid=4321, name=python, Graphics Exception: "
    "ChID 0010, Class 0000c7c0, Offset 00000000, Data 00000000",
    "NVRM: Xid (PCI:0000:ba:00): 94, pid=9001, name=tritonserver, Contained: CE User Channel "
    "(0x9). RST: No, D-RST: No",
    "NVRM: Xid (0000:03:00): 31, Ch 00000001, engmask 00000101, intr 10000000",
    "nvidia-nvswitch3: SXid (PCI:0000:c6:00.0): 12028, Non-fatal, Link 32 egress non-posted PRIV "
    "error (First)",
    "[ 1044.000000] NVRM: GPU at PCI:0000:3b:00: GPU-3f0e2a7c-1b8d-4c1e-9d7a-5e2f0c9b8a11",
    "NVRM: Xid (PCI:0000:8a:00.0): 119, pid=1772, name=nvidia-smi, Timeout after 6s of waiting "
    "for RPC response from GPU0 GSP! Expected function 76 (GSP_RM_CONTROL) (0x20800a4c 0x4).",
]


def test_each_xid_line_gives_its_code_and_gpu() -> None:
    parsed = [watcher.parse(line) for line in KERNEL]
    assert [(x.code, x.bus_id) if x else None for x in parsed] == [
        (79, "0000:3b:00"),
        (48, "0000:18:00"),
        (13, "0000:3b:00"),
        (94, "0000:ba:00"),
        (31, "0000:03:00"),
        None,  # an NVSwitch SXid is not a GPU XID
        None,
        (119, "0000:8a:00.0"),
    ]
    assert parsed[0] is not None and parsed[0].detail == "pid=0, name=, GPU has fallen off the bus."


def test_only_the_fatal_codes_cordon() -> None:
    events = list(watcher.fatal(KERNEL, DEFAULT_XIDS))
    # 13 (a graphics engine exception: the application's fault) and 31 (an MMU fault, likewise)
    # leave the node in service.
    assert [e.code for e in events] == [79, 48, 94, 119]


def test_the_cordon_names_the_node_and_records_why() -> None:
    event = watcher.parse(KERNEL[0])
    cordon, annotate = watcher.cordon_commands(
        "/usr/bin/kubectl", "/etc/kubernetes/kubelet.conf", "gpu-node-01", event
    )
    assert cordon == [
        "/usr/bin/kubectl",
        "--kubeconfig=/etc/kubernetes/kubelet.conf",
        "cordon",
        "gpu-node-01",
    ]
    assert annotate[2:6] == ["annotate", "--overwrite", "node", "gpu-node-01"]
    key, _, value = annotate[6].partition("=")
    assert key == "gpuinfra.dev/fatal-xid"
    assert json.loads(value) == {"xid": 79, "gpu": "0000:3b:00", "line": KERNEL[0]}


def test_the_script_reads_kernel_lines_and_cordons_on_the_fatal_ones() -> None:
    result = subprocess.run(
        [
            sys.executable,
            str(SCRIPT),
            "--node",
            "gpu-node-01",
            "--kubeconfig",
            "/etc/kubernetes/kubelet.conf",
            "--xids",
            ",".join(map(str, sorted(DEFAULT_XIDS))),
            "--stdin",
            "--dry-run",
        ],
        input="\n".join(KERNEL) + "\n",
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    cordons = [line for line in result.stdout.splitlines() if line.endswith("cordon gpu-node-01")]
    assert len(cordons) == 4
    assert "fatal XID 79 on GPU 0000:3b:00: cordoning gpu-node-01" in result.stdout
    assert "XID 13" not in result.stdout


def test_the_list_is_the_decisions() -> None:
    record = (ROOT / "docs" / "decisions" / "0056-cordon-on-fatal-xid.md").read_text()
    for code in DEFAULT_XIDS:
        assert f"| {code} |" in record, code
    unit = (ROLE / "templates" / "gpuinfra-xid-cordon.service.j2").read_text()
    assert "--xids {{ gpu_xid_cordon_xids | join(',') }}" in unit

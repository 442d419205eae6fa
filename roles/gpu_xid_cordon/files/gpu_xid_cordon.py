#!/usr/bin/python3
"""Cordon this Kubernetes node when the NVIDIA driver reports a fatal XID.

Reads kernel messages (``journalctl -k -f -o short-iso``, or lines on stdin with ``--stdin``),
picks the driver's ``NVRM: Xid (PCI:<bus id>): <code>, ...`` lines, and for a code in the fatal
list marks the node unschedulable with kubectl, annotating it with the XID, the GPU's bus id and
the kernel line. Running pods are left alone (drain is a person's decision, or the driver upgrade
playbook's); new pods go elsewhere. The standard library only: it runs on the host's python3.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

# NVRM: Xid (PCI:0000:18:00): 79, pid=1234, name=python, GPU has fallen off the bus.
# Older drivers omit pid/name; some prefix the bus id with a domain, some do not.
XID_LINE = re.compile(
    r"NVRM: Xid \((?:PCI:)?(?P<bus>[0-9A-Fa-f]{4}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}(?:\.[0-7])?|"
    r"[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}(?:\.[0-7])?)\): (?P<code>\d+),\s*(?P<rest>.*)$"
)
ANNOTATION = "gpuinfra.dev/fatal-xid"


@dataclass(frozen=True)
class Xid:
    code: int
    bus_id: str
    detail: str
    line: str


def parse(line: str) -> Xid | None:
    """The XID event a kernel log line reports, or None for any other line."""
    match = XID_LINE.search(line.rstrip("\n"))
    if match is None:
        return None
    return Xid(int(match["code"]), match["bus"].lower(), match["rest"].strip(), line.strip())


def fatal(lines: Iterable[str], codes: frozenset[int]) -> Iterator[Xid]:
    """The XID events among ``lines`` whose code is in ``codes``."""
    for line in lines:
        event = parse(line)
        if event is not None and event.code in codes:
            yield event


def cordon_commands(kubectl: str, kubeconfig: str, node: str, event: Xid) -> list[list[str]]:
    """kubectl calls that cordon ``node`` and record why (idempotent: a second run changes
    nothing but the annotation's text)."""
    base = [kubectl, f"--kubeconfig={kubeconfig}"]
    reason = json.dumps({"xid": event.code, "gpu": event.bus_id, "line": event.line[-300:]})
    return [
        [*base, "cordon", node],
        [*base, "annotate", "--overwrite", "node", node, f"{ANNOTATION}={reason}"],
    ]


def _kernel_lines(stdin: bool) -> Iterator[str]:
    if stdin:
        yield from sys.stdin
        return
    # From now on: a reboot (which clears a fallen-off GPU) must not re-cordon on old lines.
    with subprocess.Popen(
        ["journalctl", "-k", "-f", "-n", "0", "-o", "cat"],
        stdout=subprocess.PIPE,
        text=True,
    ) as proc:
        assert proc.stdout is not None
        yield from proc.stdout


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--node", required=True, help="this node's name in Kubernetes")
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--kubectl", default="kubectl")
    parser.add_argument("--xids", required=True, help="fatal XID codes, comma separated")
    parser.add_argument("--stdin", action="store_true", help="read kernel lines from stdin")
    parser.add_argument("--dry-run", action="store_true", help="print the kubectl calls only")
    args = parser.parse_args(argv)
    codes = frozenset(int(c) for c in args.xids.split(",") if c.strip())
    for event in fatal(_kernel_lines(args.stdin), codes):
        print(f"fatal XID {event.code} on GPU {event.bus_id}: cordoning {args.node}", flush=True)
        for command in cordon_commands(args.kubectl, args.kubeconfig, args.node, event):
            if args.dry_run:
                print(" ".join(command), flush=True)
                continue
            done = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
            if done.returncode != 0:
                print(f"{command[2]} failed: {done.stderr.strip()}", file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The no-op re-converge of playbooks/nodes.yml: this checkout against another revision.

Each arm runs its own code on a lab of its own: the other revision from a git worktree with the
virtual environment its own scripts/setup.sh builds, this checkout from here. Each arm brings up
its hosts and converges them with its own CLI; then the arms re-converge in turns, ``--repeat``
times each, with their own ``ansible-playbook`` alone (no ansible-runner), and every
re-converge must change nothing. Turns matter on a shared machine, where a slow spell moves one
run by a second: it then hits both arms.

Prints, per arm, the median wall time (with min and max), the median controller CPU (the
``ansible-playbook`` process with its workers and ssh clients: user + system) and the tasks a
host ran or skipped, then how much this checkout's re-converge grows over the other's. Writes
JSON. The labs and the worktree are removed at the end, also on failure.

    .venv/bin/python benchmarks/reconverge.py --against 1c16f96^ --hosts 4 --repeat 5
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import statistics
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RECAP = re.compile(
    r"^(\S+)\s+: ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)\s+skipped=(\d+)"
)


@dataclass(frozen=True)
class Arm:
    name: str
    root: Path
    prefix: str
    port_base: int

    def run(self, *args: str, timeout: float) -> subprocess.CompletedProcess[str]:
        """A command of this arm's own environment, run in its root against its own lab."""
        env = {
            **os.environ,
            "GPUINFRA_LAB_PREFIX": self.prefix,
            "GPUINFRA_LAB_PORT_BASE": str(self.port_base),
            "ANSIBLE_CONFIG": str(self.root / "ansible.cfg"),
            "ANSIBLE_NOCOLOR": "1",
        }
        return subprocess.run(
            [str(self.root / ".venv" / "bin" / args[0]), *args[1:]],
            cwd=self.root,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def inventory(self) -> Path:
        found = sorted((self.root / ".lab" / self.prefix).rglob("hosts.yml"))
        if not found:
            raise SystemExit(f"{self.name}: no inventory under .lab/{self.prefix} after lab up")
        return found[0]


def step(arm: Arm, what: str, *args: str, timeout: float) -> None:
    print(f"{arm.name}: {what}", flush=True)
    result = arm.run(*args, timeout=timeout)
    if result.returncode != 0:
        tail = (result.stdout + result.stderr).strip().splitlines()[-5:]
        raise SystemExit(f"{arm.name}: {what} failed (rc {result.returncode}):\n" + "\n".join(tail))


def children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def reconverge(arm: Arm, inventory: Path) -> dict[str, Any]:
    """One re-converge with the arm's ansible-playbook: wall time, controller CPU, tasks."""
    cpu, start = children_cpu_s(), time.monotonic()
    result = arm.run("ansible-playbook", "-i", str(inventory), "playbooks/nodes.yml", timeout=600)
    wall, cpu = time.monotonic() - start, children_cpu_s() - cpu
    recap = [m for m in map(RECAP.match, result.stdout.splitlines()) if m]
    changed = sum(int(m[3]) for m in recap)
    if result.returncode != 0 or not recap or changed:
        tail = result.stdout.strip().splitlines()[-8:]
        raise SystemExit(
            f"{arm.name}: the re-converge failed or changed something (rc {result.returncode}, "
            f"changed={changed}):\n" + "\n".join(tail)
        )
    tasks = max(int(m[2]) + int(m[6]) for m in recap)
    return {"wall_s": round(wall, 2), "cpu_s": round(cpu, 2), "tasks_per_host": tasks}


def summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    walls = [r["wall_s"] for r in runs]
    return {
        "reconverge_s": round(statistics.median(walls), 2),
        "reconverge_min_s": min(walls),
        "reconverge_max_s": max(walls),
        "controller_cpu_s": round(statistics.median(r["cpu_s"] for r in runs), 2),
        "tasks_per_host": runs[-1]["tasks_per_host"],
        "samples": runs,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--against", required=True, help="the revision to compare with")
    parser.add_argument("--hosts", type=int, default=4, help="lab hosts per arm")
    parser.add_argument("--repeat", type=int, default=5, help="re-converges per arm")
    parser.add_argument("--port-base", type=int, default=2900, help="ports BASE+N and BASE+100+N")
    parser.add_argument("--json", type=Path, default=ROOT / "benchmarks/results/reconverge.json")
    args = parser.parse_args()
    if not 1 <= args.hosts <= 16 or args.repeat < 1:
        parser.error("--hosts takes 1 to 16, --repeat at least 1")
    revision = subprocess.run(
        ["git", "rev-parse", "--verify", "--quiet", f"{args.against}^{{commit}}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()
    if not revision:
        parser.error(f"--against: {args.against!r} names no commit in this repository")
    head = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()

    with tempfile.TemporaryDirectory(prefix="gpuinfra-reconverge-") as work:
        base_root = Path(work) / "base"
        subprocess.run(
            ["git", "worktree", "add", "--detach", "--quiet", str(base_root), revision],
            cwd=ROOT,
            check=True,
        )
        arms = [
            Arm(f"base {revision[:7]}", base_root, "gpuinfrareco-base", args.port_base),
            Arm(f"this checkout {head}", ROOT, "gpuinfrareco-head", args.port_base + 100),
        ]
        try:
            results = measure(arms, args.hosts, args.repeat)
        finally:
            for arm in arms:
                if (arm.root / ".venv" / "bin" / "gpuinfra").exists():
                    arm.run("gpuinfra", "lab", "down", timeout=300)
            subprocess.run(
                ["git", "worktree", "remove", "--force", str(base_root)], cwd=ROOT, check=False
            )
    base, this = results
    growth = this["reconverge_s"] / base["reconverge_s"] - 1
    report = {
        "benchmark": "reconverge",
        "hosts": args.hosts,
        "repeat": args.repeat,
        "base": {"revision": revision, **base},
        "this_checkout": {"revision": head, **this},
        "growth": round(growth, 3),
        "cpu_growth": round(this["controller_cpu_s"] / base["controller_cpu_s"] - 1, 3),
    }
    for arm, row in zip(arms, results, strict=True):
        print(
            f"{arm.name}: re-converge {row['reconverge_s']}s ({row['reconverge_min_s']} to "
            f"{row['reconverge_max_s']}), controller CPU {row['controller_cpu_s']}s, "
            f"{row['tasks_per_host']} tasks per host"
        )
    print(
        f"this checkout over base: {growth:+.0%} wall, {report['cpu_growth']:+.0%} controller CPU"
    )
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {args.json}")


def measure(arms: list[Arm], hosts: int, repeat: int) -> list[dict[str, Any]]:
    base = arms[0]
    print(f"{base.name}: its own environment (scripts/setup.sh)", flush=True)
    setup = subprocess.run(
        ["bash", "scripts/setup.sh"], cwd=base.root, capture_output=True, text=True, timeout=1800
    )
    if setup.returncode != 0:
        raise SystemExit(f"{base.name}: scripts/setup.sh failed:\n{setup.stderr[-800:]}")
    inventories = []
    for arm in arms:
        step(
            arm, f"{hosts} lab hosts", "gpuinfra", "lab", "up", "--hosts", str(hosts), timeout=1800
        )
        step(arm, "first converge", "gpuinfra", "converge", "--playbook", "nodes.yml", timeout=3600)
        inventories.append(arm.inventory())
    runs: list[list[dict[str, Any]]] = [[] for _ in arms]
    for turn in range(repeat):
        for arm, inventory, own in zip(arms, inventories, runs, strict=True):
            own.append(reconverge(arm, inventory))
            print(f"{arm.name}: re-converge {turn + 1}/{repeat}: {own[-1]['wall_s']}s", flush=True)
    return [summary(own) for own in runs]


if __name__ == "__main__":
    main()

"""Wall time of the ``gpuinfra`` command, each run a fresh process writing no bytecode.

Every command runs as a child process with ``PYTHONDONTWRITEBYTECODE=1`` in its environment, as
on CI runners and in containers, so a figure includes the interpreter's start and every import,
from whatever bytecode the environment was installed with. Prints the median wall time of
``--repeat`` runs beside its target, and the child's CPU time beside it (a shared machine
stretches wall time), and writes the figures as JSON (default ``build/bench/cli.json``).

    .venv/bin/python benchmarks/cli.py [--repeat 5] [--out build/bench/cli.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from gpuinfra.paths import repo_root

# Seconds, median wall time; commands without a target are measured and shown all the same.
TARGETS = {"--help": 0.3, "versions check": 0.5, "plan --stack prod": 1.5}


def commands(scratch: Path) -> dict[str, list[str]]:
    """The commands measured, by the name they are reported under."""
    return {
        "--help": ["--help"],
        "versions check": ["versions", "check"],
        "config check --stack prod": ["config", "check", "--stack", "prod"],
        "addons render --site inventory/example": [
            "addons",
            "render",
            "--site",
            "inventory/example",
            "--out",
            str(scratch / "addons"),
        ],
        "plan --stack prod": ["plan", "--stack", "prod"],
    }


def entry() -> list[str]:
    """The console script beside this interpreter, as a user runs it; else ``-m gpuinfra``."""
    script = Path(sys.executable).with_name("gpuinfra")
    return [str(script)] if script.is_file() else [sys.executable, "-m", "gpuinfra"]


def pyc_count(root: Path) -> int:
    """Compiled files under the interpreter's prefix: 0 means every import compiles its source."""
    return sum(1 for _ in root.rglob("*.pyc"))


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def timed(argv: list[str], env: dict[str, str], cwd: Path) -> tuple[float, float]:
    """Wall and CPU seconds (user + system) of one run of ``argv``."""
    cpu = _children_cpu()
    start = time.perf_counter()
    done = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)}: exit {done.returncode}\n{done.stderr.strip()}")
    return wall, _children_cpu() - cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--out", type=Path, default=repo_root() / "build" / "bench" / "cli.json")
    args = parser.parse_args()

    root = repo_root()
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    base = entry()
    scratch = Path(tempfile.mkdtemp(prefix="gpuinfra-bench-cli-"))
    try:
        todo = commands(scratch)
        samples: dict[str, list[tuple[float, float]]] = {name: [] for name in todo}
        # One untimed run each fills the page cache; then the commands take turns, so a burst of
        # load from another process on a shared machine spreads over all of them.
        for argv in todo.values():
            timed(base + argv, env, root)
        for _ in range(args.repeat):
            for name, argv in todo.items():
                samples[name].append(timed(base + argv, env, root))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)

    rows: list[dict[str, Any]] = []
    for name, runs in samples.items():
        walls = [wall for wall, _ in runs]
        median = statistics.median(walls)
        target = TARGETS.get(name)
        rows.append(
            {
                "command": f"gpuinfra {name}",
                "median_seconds": round(median, 3),
                "min_seconds": round(min(walls), 3),
                "max_seconds": round(max(walls), 3),
                "samples_seconds": [round(w, 3) for w in walls],
                "cpu_median_seconds": round(statistics.median(cpu for _, cpu in runs), 3),
                "target_seconds": target,
                "met": None if target is None else median <= target,
            }
        )
    result = {
        "repeat": args.repeat,
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "pyc_files_in_prefix": pyc_count(Path(sys.prefix)),
        "commands": rows,
    }

    print(
        f"gpuinfra, PYTHONDONTWRITEBYTECODE=1, median of {args.repeat} "
        f"({result['pyc_files_in_prefix']} .pyc files under {sys.prefix})"
    )
    width = max(len(r["command"]) for r in rows)
    print(
        f"{'command':<{width}} {'median s':>9} {'min s':>7} {'max s':>7} {'CPU s':>7} "
        f"{'target s':>9}  met"
    )
    for r in rows:
        shown = "" if r["target_seconds"] is None else f"{r['target_seconds']:.2f}"
        met = "" if r["met"] is None else ("yes" if r["met"] else "NO")
        print(
            f"{r['command']:<{width}} {r['median_seconds']:>9.3f} {r['min_seconds']:>7.3f} "
            f"{r['max_seconds']:>7.3f} {r['cpu_median_seconds']:>7.3f} {shown:>9}  {met}"
        )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")
    print(f"written to {args.out}")


if __name__ == "__main__":
    main()

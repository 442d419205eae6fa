"""Plan time of the prod stack and of synthetic stacks with 1, 10, 25 and 50 GPU node pools.

Prints a table and writes the figures as JSON (default ``build/bench/plan.json``). The plan
should grow linearly with the number of resources: the time per resource stays flat as pools
are added.

    .venv/bin/python benchmarks/plan.py [--repeat 3] [--out build/bench/plan.json]
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import time
from pathlib import Path
from typing import Any
from unittest import mock

from gpuinfra import catalog, config
from gpuinfra.paths import repo_root
from gpuinfra.review import plan, stackrun

POOL_COUNTS = (1, 10, 25, 50)


class ProgramClock:
    """CPU seconds spent inside the stack program under the mock runtime (``run_checked``), so the
    plan's own work (redaction, policy, cost, add-on renders) can be told apart from it."""

    def __init__(self) -> None:
        self.cpu = 0.0
        self._run_program = stackrun.run_checked
        self._patch = mock.patch.object(stackrun, "run_checked", new=self._timed)

    def _timed(self, *args: Any, **kwargs: Any) -> stackrun.StackRun:
        start = time.process_time()
        try:
            return self._run_program(*args, **kwargs)
        finally:
            self.cpu += time.process_time() - start

    def __enter__(self) -> ProgramClock:
        self._patch.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._patch.stop()


def timed(env: str, cfg: config.StackConfig | None, repeat: int) -> dict[str, float]:
    """Median wall and CPU seconds of ``repeat`` plans, the program's share of the CPU time, and
    the number of resources planned.

    CPU time is reported beside wall time because a shared machine stretches wall time.
    """
    walls: list[float] = []
    cpus: list[float] = []
    programs: list[float] = []
    resources = 0
    for _ in range(repeat):
        with ProgramClock() as clock:
            wall, cpu = time.perf_counter(), time.process_time()
            document = plan.stack_plan(env, config=cfg)
            walls.append(time.perf_counter() - wall)
            cpus.append(time.process_time() - cpu)
        programs.append(clock.cpu)
        resources = len(document["resources"])
    cpu = statistics.median(cpus)
    program = statistics.median(programs)
    return {
        "resources": resources,
        "wall_seconds": round(statistics.median(walls), 4),
        "cpu_seconds": round(cpu, 4),
        "program_cpu_seconds": round(program, 4),
        "cpu_ms_per_resource": round(1000 * cpu / resources, 3),
        "plan_own_cpu_ms_per_resource": round(1000 * max(cpu - program, 0.0) / resources, 3),
    }


def synthetic(base: config.StackConfig, pools: int) -> config.StackConfig:
    """The prod stack with ``pools`` node pools, cycling through its own pools' shapes."""
    node_pools = [
        base.node_pools[i % len(base.node_pools)].model_copy(update={"name": f"pool-{i:02d}"})
        for i in range(pools)
    ]
    gpu_types = {catalog.instance_types()[p.instance_type].gpu_name for p in node_pools}
    kueue = base.addons.kueue
    flavors = [f for f in kueue.flavors if f.gpu_type in gpu_types]
    addons = base.addons.model_copy(update={"kueue": kueue.model_copy(update={"flavors": flavors})})
    # The policy pack's limits (policies/limits.yaml) refuse that many nodes: the plan still
    # does all its work and reports the refusals.
    return base.model_copy(update={"node_pools": node_pools, "addons": addons})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--out", type=Path, default=repo_root() / "build" / "bench" / "plan.json")
    args = parser.parse_args()

    # The first plan pays for imports; it is not part of any figure.
    plan.stack_plan("dev")

    prod = timed("prod", None, args.repeat)
    base = config.load_stack("prod")
    rows = [
        {"node_pools": pools, **timed("prod", synthetic(base, pools), args.repeat)}
        for pools in POOL_COUNTS
    ]
    # Linear growth shows as a steady cost per added resource from one size to the next.
    for before, after in itertools.pairwise(rows):
        grown = after["resources"] - before["resources"]
        after["cpu_ms_per_added_resource"] = round(
            1000 * (after["cpu_seconds"] - before["cpu_seconds"]) / grown, 3
        )
    first, last = rows[0], rows[-1]
    added = (last["cpu_seconds"] - first["cpu_seconds"]) / (last["resources"] - first["resources"])
    result = {
        "repeat": args.repeat,
        "prod": prod,
        "synthetic": rows,
        "cpu_ms_per_added_resource": round(1000 * added, 3),
    }

    print(
        f"prod stack: {prod['resources']} resources, {prod['wall_seconds']:.3f} s wall, "
        f"{prod['cpu_seconds']:.3f} s CPU, of which the program {prod['program_cpu_seconds']:.3f} s "
        f"(median of {args.repeat})"
    )
    header = (
        "pools",
        "resources",
        "wall s",
        "CPU s",
        "program s",
        "CPU ms/res",
        "plan ms/res",
        "ms/added res",
    )
    print(" ".join(f"{h:>12}" for h in header))
    for row in rows:
        marginal = row.get("cpu_ms_per_added_resource")
        print(
            f"{row['node_pools']:>12} {row['resources']:>12} {row['wall_seconds']:>12.3f} "
            f"{row['cpu_seconds']:>12.3f} {row['program_cpu_seconds']:>12.3f} "
            f"{row['cpu_ms_per_resource']:>12.3f} {row['plan_own_cpu_ms_per_resource']:>12.3f} "
            + (f"{marginal:>12.3f}" if marginal is not None else f"{'':>12}")
        )
    print(f"each added resource: {result['cpu_ms_per_added_resource']:.3f} ms CPU")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")
    print(f"written to {args.out}")


if __name__ == "__main__":
    main()

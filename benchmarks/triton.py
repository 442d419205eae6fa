"""Triton batching on a real server: the four hand-tuned rows, then a full `triton tune` sweep.

The model is the local stand-in with a known cost (a fixed time per batch plus a time per
item), served by the pinned local Triton (``bash scripts/setup-triton.sh``) and measured with
perf_analyzer. The four rows are the settings a team tuning a BERT classifier by hand tried:
max_batch_size 8 then 32 at a 1000 us queue delay, the delay cut to 200 us, and preferred batch
sizes [16, 32]. Their shape, not their figures, carries over: a bigger batch raises throughput
and P99, a shorter delay lowers P99.

The sweep is ``triton tune``'s default grid (max_batch_size x preferred sizes x delay x
instances) over three concurrency levels; it prints the table, the time it took and the gain
over the untuned model at the highest concurrency.

    .venv/bin/python benchmarks/triton.py [--out build/bench/triton.json] [--no-sweep]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from gpuinfra.addons.triton import TritonModel
from gpuinfra.lab import tune
from gpuinfra.paths import repo_root

COST_US = "4000,250"
# The sweep's stand-in, as `triton tune` and its test use it.
SWEEP_COST_US = "10000,500"
HAND_TUNED = (
    tune.Candidate(8, (), 1000, 1),
    tune.Candidate(32, (), 1000, 1),
    tune.Candidate(32, (), 200, 1),
    tune.Candidate(32, (16, 32), 1000, 1),
)
SWEEP_LEVELS = [1, 8, 16]
SLA_MS = 100.0


def _rows(points: list[tuple[tune.Candidate, tune.Point]]) -> str:
    lines = [f"{'configuration':<58} {'infer/s':>8} {'P99 ms':>7}"]
    lines += [f"{c.label():<58} {p.throughput:>8.0f} {p.p99_ms:>7.1f}" for c, p in points]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=repo_root() / "build/bench/triton.json")
    parser.add_argument("--no-sweep", action="store_true", help="only the four rows")
    args = parser.parse_args()
    model = TritonModel(name="bert", backend="onnxruntime")

    # Each setting at the load it is sized for: as many requests in flight as its batch holds.
    # Longer windows than the sweep: a P99 on a shared machine needs more samples.
    with tune.session(model, stand_in_cost_us=COST_US, interval_ms=2500) as running:
        rows = [(c, running.measure(c.apply(model), [c.max_batch_size])[0]) for c in HAND_TUNED]
    print(f"Four hand-tuned rows, concurrency = max_batch_size, stand-in cost {COST_US} us")
    print(_rows(rows))
    figures: dict[str, object] = {
        "triton_version": running.triton_version,
        "machine": tune.machine(),
        "stand_in_cost_us": COST_US,
        "hand_tuned": [
            {"label": c.label(), "throughput": p.throughput, "p99_ms": p.p99_ms} for c, p in rows
        ],
    }

    if not args.no_sweep:
        started = time.monotonic()
        result = tune.tune(model, tune.Sla(SLA_MS), SWEEP_LEVELS, stand_in_cost_us=SWEEP_COST_US)
        seconds = time.monotonic() - started
        print(f"\nSweep: {len(result.rows)} configurations x {SWEEP_LEVELS} in {seconds:.0f} s")
        for row in result.rows:
            cells = "  ".join(
                f"c={p.concurrency}: {p.throughput:5.0f}/s {p.p99_ms:6.1f} ms" for p in row.points
            )
            mark = "chosen" if row is result.chosen else ("ok" if row.meets_sla else "no")
            print(f"{row.candidate.label():<58} {cells}  {mark}")
        base = result.baseline.at_highest().throughput
        best = result.chosen.at_highest().throughput if result.chosen else 0.0
        print(f"gain at c={max(SWEEP_LEVELS)} within P99 {SLA_MS:g} ms: {best / base:.1f}x")
        figures["sweep"] = {**result.document(), "gain": best / base}

    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(figures, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()

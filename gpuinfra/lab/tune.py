"""Tune a model's batching and instances against an SLA, measured with perf_analyzer.

Each candidate configuration is the model's own config with ``max_batch_size``,
``dynamic_batching`` (preferred sizes, queue delay) and the instance count changed; it is loaded
into a real Triton in explicit model control mode (``load_model`` with the config, no file
written) and measured by ``perf_analyzer`` at each concurrency level. The chosen one has the
highest throughput at the highest concurrency among those whose P99 latency stays within the
bound at every level (and that reach the minimum throughput, if one is given).
"""

from __future__ import annotations

import csv
import itertools
import platform
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from gpuinfra.addons.triton import (
    DynamicBatching,
    InstanceGroup,
    TritonModel,
    model_config,
    refused_for_admin_key,
)
from gpuinfra.errors import GpuinfraError, ToolError, UsageError
from gpuinfra.lab import triton as local


class MeasurementFailed(GpuinfraError):
    exit_code = 1


# Seconds a server given by ``--url`` has to say which Triton it is before anything is measured.
ANSWER_TIMEOUT = 10.0
# Seconds one load of a configuration may take: a large model's weights take minutes to read and
# place; a server silent for longer has stopped answering.
LOAD_TIMEOUT = 600.0
# Seconds one perf_analyzer run may take: its trials (1 s windows, 10 at most) end within a
# minute on a server that answers.
MEASURE_TIMEOUT = 300.0
_NO_ANSWER = ("StatusCode.UNAVAILABLE", "StatusCode.DEADLINE_EXCEEDED")


class AdminKeyRefused(GpuinfraError):
    """The server refused to load without its admin key, or with another (docs/decisions/0078):
    nothing was measured."""

    exit_code = 3


@dataclass(frozen=True)
class Sla:
    p99_ms: float
    min_throughput: float | None = None


@dataclass(frozen=True)
class Grid:
    """The values swept; every combination is one candidate (batching off adds none)."""

    max_batch_sizes: tuple[int, ...] = (8, 32)
    queue_delays_us: tuple[int, ...] = (200, 1000)
    # "none", or "half-and-max": [max_batch_size / 2, max_batch_size].
    preferred: tuple[str, ...] = ("none", "half-and-max")
    instance_counts: tuple[int, ...] = (1, 2)


@dataclass(frozen=True)
class Candidate:
    max_batch_size: int
    preferred_batch_size: tuple[int, ...]
    max_queue_delay_microseconds: int | None
    instances: int
    untuned: bool = False

    def label(self) -> str:
        if self.max_queue_delay_microseconds is None:
            batching = f"batch {self.max_batch_size}, no dynamic batching"
        else:
            preferred = list(self.preferred_batch_size) or "-"
            batching = (
                f"batch {self.max_batch_size}, preferred {preferred}, "
                f"delay {self.max_queue_delay_microseconds} us"
            )
        return f"{batching}, {self.instances} instance{'s' if self.instances > 1 else ''}"

    def apply(self, model: TritonModel) -> TritonModel:
        batching = (
            None
            if self.max_queue_delay_microseconds is None
            else DynamicBatching(
                preferred_batch_size=list(self.preferred_batch_size),
                max_queue_delay_microseconds=self.max_queue_delay_microseconds,
            )
        )
        return model.model_copy(
            update={
                "max_batch_size": self.max_batch_size,
                "dynamic_batching": batching,
                "instance_group": InstanceGroup(
                    count=self.instances, kind=model.instance_group.kind
                ),
            }
        )


def untuned(model: TritonModel) -> Candidate:
    batching = model.dynamic_batching
    return Candidate(
        max_batch_size=model.max_batch_size,
        preferred_batch_size=tuple(batching.preferred_batch_size) if batching else (),
        max_queue_delay_microseconds=batching.max_queue_delay_microseconds if batching else None,
        instances=model.instance_group.count,
        untuned=True,
    )


def candidates(model: TritonModel, grid: Grid) -> list[Candidate]:
    """The model as configured first, then every combination of the grid."""
    found = [untuned(model)]
    for size, delay, preferred, count in itertools.product(
        grid.max_batch_sizes, grid.queue_delays_us, grid.preferred, grid.instance_counts
    ):
        sizes = (max(1, size // 2), size) if preferred == "half-and-max" else ()
        option = Candidate(size, tuple(sorted(set(sizes))), delay, count)
        if option not in found and option != found[0]:
            found.append(option)
    return found


@dataclass(frozen=True)
class Point:
    concurrency: int
    throughput: float
    p99_ms: float


@dataclass
class Row:
    candidate: Candidate
    points: list[Point]
    meets_sla: bool = False

    def at_highest(self) -> Point:
        return max(self.points, key=lambda p: p.concurrency)


@dataclass
class Result:
    model: str
    sla: Sla
    concurrency: list[int]
    rows: list[Row]
    chosen: Row | None
    triton_version: str
    machine: dict[str, Any]
    seconds: float
    target: str = "local"
    notes: list[str] = field(default_factory=list)

    @property
    def baseline(self) -> Row:
        return next(r for r in self.rows if r.candidate.untuned)

    def document(self) -> dict[str, Any]:
        """The measurement as JSON: what ran where, every row, and the choice."""
        return {
            "model": self.model,
            "sla": asdict(self.sla),
            "concurrency": self.concurrency,
            "triton_version": self.triton_version,
            "target": self.target,
            "machine": self.machine,
            "seconds": round(self.seconds, 1),
            "rows": [
                {
                    **asdict(r.candidate),
                    "label": r.candidate.label(),
                    "meets_sla": r.meets_sla,
                    "points": [asdict(p) for p in r.points],
                }
                for r in self.rows
            ],
            "chosen": self.chosen.candidate.label() if self.chosen else None,
        }


def machine() -> dict[str, Any]:
    import os

    cpu = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "hostname": platform.node(),
        "cpu": cpu,
        "cpus": os.cpu_count(),
        "os": platform.platform(),
        "gpu": None,
    }


def choose(rows: list[Row], sla: Sla) -> Row | None:
    for row in rows:
        highest = row.at_highest()
        row.meets_sla = all(p.p99_ms <= sla.p99_ms for p in row.points) and (
            sla.min_throughput is None or highest.throughput >= sla.min_throughput
        )
    fitting = [r for r in rows if r.meets_sla]
    return max(fitting, key=lambda r: r.at_highest().throughput, default=None)


def perf_analyzer(
    inst: local.Installation,
    url: str,
    model: str,
    concurrency: int,
    work: Path,
    *,
    interval_ms: int = 1000,
    extra: list[str] | None = None,
) -> Point:
    """One perf_analyzer run at one concurrency: throughput and P99 latency."""
    report = work / f"perf-{model}-{concurrency}.csv"
    args = [
        str(inst.perf_analyzer),
        "-m",
        model,
        "-u",
        url,
        "-i",
        "grpc",
        f"--concurrency-range={concurrency}",
        f"--measurement-interval={interval_ms}",
        "--stability-percentage=40",
        "--max-trials=10",
        "-f",
        str(report),
        *(extra or []),
    ]
    try:
        done = subprocess.run(
            args,
            env=inst.env(),
            capture_output=True,
            text=True,
            timeout=MEASURE_TIMEOUT,
            check=False,
        )
    except subprocess.TimeoutExpired:
        # Stopped (run kills it): nothing was measured, so nothing is known of the configuration.
        raise ToolError(
            f"perf_analyzer did not finish measuring {model} at concurrency {concurrency} on "
            f"Triton at {url} within {MEASURE_TIMEOUT:g} s: the server does not answer its "
            "requests in time"
        ) from None
    if done.returncode != 0 or not report.exists():
        tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        raise MeasurementFailed(
            f"perf_analyzer failed for {model} at concurrency {concurrency}: {' '.join(tail)}"
        )
    with report.open() as handle:
        (row,) = list(csv.DictReader(handle))
    report.unlink()
    return Point(concurrency, float(row["Inferences/Second"]), int(row["p99 latency"]) / 1000)


def sweep(
    model: TritonModel,
    sla: Sla,
    concurrency: list[int],
    grid: Grid,
    measure: Callable[[TritonModel, list[int]], list[Point]],
    progress: Callable[[str], None] = lambda _: None,
) -> tuple[list[Row], Row | None]:
    rows = []
    for option in candidates(model, grid):
        progress(option.label())
        rows.append(Row(option, measure(option.apply(model), sorted(concurrency))))
    return rows, choose(rows, sla)


@contextmanager
def target(
    inst: local.Installation, model: TritonModel, url: str | None, work: Path, cost_us: str
) -> Iterator[tuple[str, bool]]:
    """The server to measure on: the given URL, or a local Triton serving the stand-in."""
    if url is not None:
        yield url, False
        return
    files = {f"models/{model.name}/config.pbtxt": _text(model, cpu=True)}
    with local.serving(
        inst,
        work,
        [model],
        files,
        control_mode="explicit",
        env={local.STANDIN_COST_ENV: cost_us},
    ) as server:
        yield server.grpc_url, True


def _text(model: TritonModel, *, cpu: bool) -> str:
    from google.protobuf import text_format  # type: ignore[import-untyped]

    text = str(text_format.MessageToString(model_config(model)))
    return local.cpu_config(text) if cpu else text


@dataclass(frozen=True)
class Session:
    """A Triton to measure on: ``measure`` loads a configuration of the model and runs
    perf_analyzer at each concurrency level."""

    measure: Callable[[TritonModel, list[int]], list[Point]]
    triton_version: str


@contextmanager
def session(
    model: TritonModel,
    *,
    url: str | None = None,
    stand_in_cost_us: str = "10000,500",
    interval_ms: int = 1000,
    headers: Mapping[str, str] | None = None,
) -> Iterator[Session]:
    """``headers``: gRPC metadata sent with each load (a restricted server's admin key)."""
    from google.protobuf import json_format
    from tritonclient.grpc import InferenceServerClient
    from tritonclient.utils import InferenceServerException

    inst = local.installation()
    with tempfile.TemporaryDirectory(prefix="gpuinfra-tune-") as scratch:
        work = Path(scratch)
        with target(inst, model, url, work, stand_in_cost_us) as (address, is_local):
            client = InferenceServerClient(address)

            def measure(configured: TritonModel, levels: list[int]) -> list[Point]:
                config = model_config(configured)
                if is_local:
                    # No GPU here: the one substitution, as everywhere the local server runs.
                    for group in config.instance_group:
                        group.kind = group.KIND_CPU
                try:
                    client.load_model(
                        model.name,
                        headers=dict(headers or {}),
                        config=json_format.MessageToJson(config),
                        client_timeout=LOAD_TIMEOUT,
                    )
                except InferenceServerException as refused:
                    # Checked first: Triton refuses a load without the key as UNAVAILABLE.
                    if refused_for_admin_key(refused.message() or ""):
                        raise AdminKeyRefused(
                            f"Triton at {address} refused to load {model.name}"
                        ) from None
                    status = refused.status() or "error"
                    if status in _NO_ANSWER:
                        raise ToolError(
                            f"Triton at {address} does not answer: {status}: "
                            f"{refused.message()} (loading {model.name}, at most "
                            f"{LOAD_TIMEOUT:g} s)"
                        ) from None
                    raise MeasurementFailed(
                        f"Triton at {address} did not load {model.name}: {refused.message()}"
                    ) from None
                return [
                    perf_analyzer(inst, address, model.name, c, work, interval_ms=interval_ms)
                    for c in levels
                ]

            try:
                version = client.get_server_metadata(client_timeout=ANSWER_TIMEOUT).version
            except InferenceServerException as failed:
                status = failed.status() or "error"
                what = "does not answer" if status in _NO_ANSWER else "gave no server metadata"
                raise ToolError(
                    f"Triton at {address} {what}: {status}: {failed.message()}"
                ) from None
            yield Session(measure, str(version))


def tune(
    model: TritonModel,
    sla: Sla,
    concurrency: list[int],
    *,
    grid: Grid | None = None,
    url: str | None = None,
    stand_in_cost_us: str = "10000,500",
    interval_ms: int = 1000,
    progress: Callable[[str], None] = lambda _: None,
    headers: Mapping[str, str] | None = None,
) -> Result:
    """Sweep the grid on a real Triton and choose the configuration that fits the SLA."""
    if not concurrency or min(concurrency) < 1:
        raise UsageError("--concurrency: give one or more levels of at least 1, e.g. 1,8,16")
    # A level given twice is measured once, as a grid value given twice is one candidate.
    levels = sorted(set(concurrency))
    started = time.monotonic()
    with session(
        model,
        url=url,
        stand_in_cost_us=stand_in_cost_us,
        interval_ms=interval_ms,
        headers=headers,
    ) as running:
        rows, chosen = sweep(model, sla, levels, grid or Grid(), running.measure, progress)
    return Result(
        model=model.name,
        sla=sla,
        concurrency=levels,
        rows=rows,
        chosen=chosen,
        triton_version=running.triton_version,
        machine=machine(),
        seconds=time.monotonic() - started,
        target="local stand-in" if url is None else url,
        notes=[f"stand-in cost per batch, per item (us): {stand_in_cost_us}"]
        if url is None
        else [],
    )

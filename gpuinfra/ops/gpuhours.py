"""GPU-hours allocated and used per team, project and namespace, from the recording rules.

The rules (``gpuinfra/addons/data/gpu-accounting.yaml``) record GPUs once a minute; summing a
window's samples and dividing by the samples per hour gives GPU-hours, including pods that ran
for part of the window only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta

from gpuinfra.addons import accounting
from gpuinfra.errors import ToolError
from gpuinfra.ops.prometheus import Prometheus, promql_duration

KEYS = ("team", "project", "namespace")


@dataclass(frozen=True)
class Row:
    team: str
    project: str
    namespace: str
    allocated: float
    used: float

    @property
    def utilisation(self) -> float | None:
        """Used over allocated, or None when nothing was allocated."""
        return self.used / self.allocated if self.allocated else None


def _hours(
    prometheus: Prometheus, metric: str, window: timedelta, at: datetime
) -> dict[tuple[str, ...], float]:
    query = (
        f"sum by (namespace, team, project) "
        f"(sum_over_time({metric}[{promql_duration(window)}])) / {accounting.SAMPLES_PER_HOUR}"
    )
    hours = {}
    for sample in prometheus.query(query, at):
        if not math.isfinite(sample.value):
            # NaN or Inf: no count of hours to add up, and no value JSON can carry.
            labels = ", ".join(f"{k}={sample.labels.get(k, '')}" for k in KEYS)
            raise ToolError(
                f"Prometheus at {prometheus.url}: {metric}: {sample.value} GPU-hours for "
                f"{labels}: the recorded series hold no number"
            )
        hours[tuple(sample.labels.get(k, "") for k in KEYS)] = sample.value
    return hours


def gpu_hours(
    prometheus: Prometheus, window: timedelta, until: datetime, by: tuple[str, ...] = KEYS
) -> list[Row]:
    """One row per group of ``by`` (team, project, namespace), the most allocated first."""
    allocated = _hours(prometheus, accounting.ALLOCATED, window, until)
    used = _hours(prometheus, accounting.USED, window, until)
    totals: dict[tuple[str, ...], list[float]] = {}
    for key in allocated.keys() | used.keys():
        grouped = tuple(v if k in by else "" for k, v in zip(KEYS, key, strict=True))
        sums = totals.setdefault(grouped, [0.0, 0.0])
        sums[0] += allocated.get(key, 0.0)
        sums[1] += used.get(key, 0.0)
    rows = [
        Row(team=key[0], project=key[1], namespace=key[2], allocated=a, used=u)
        for key, (a, u) in totals.items()
    ]
    return sorted(rows, key=lambda r: (-r.allocated, r.team, r.project, r.namespace))

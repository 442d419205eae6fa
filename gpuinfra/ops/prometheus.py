"""A Prometheus server's HTTP API: instant queries and scrape targets."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from gpuinfra.errors import ToolError, UsageError
from gpuinfra.ops.http import server

_DURATION = re.compile(r"([0-9]+)(m|h|d|w)")


# Prometheus's duration units, as its flags and its status API write them ("15d", "1y2w").
_PROM_UNITS = {
    "y": timedelta(days=365),
    "w": timedelta(weeks=1),
    "d": timedelta(days=1),
    "h": timedelta(hours=1),
    "m": timedelta(minutes=1),
    "s": timedelta(seconds=1),
    "ms": timedelta(milliseconds=1),
}
# Ten years: far beyond the 15 days the stack keeps by default, and far inside what a
# timedelta holds.
LONGEST_WINDOW = timedelta(days=3650)


def parse_duration(option: str, text: str) -> timedelta:
    """``24h``, ``7d``, ``90m``, ``2w``: a window a report covers, 1m to 3650d."""
    match = _DURATION.fullmatch(text)
    count = int(match.group(1)) if match else 0
    # The digits' length is checked first: a timedelta of 10**20 days cannot be built.
    if (
        not match
        or count == 0
        or len(match.group(1)) > 7
        or (count * _PROM_UNITS[match.group(2)] > LONGEST_WINDOW)
    ):
        raise UsageError(
            f"{option} {text!r}: not a duration (allowed: 1m to 3650d, e.g. 90m, 24h, 7d, 2w)"
        )
    return count * _PROM_UNITS[match.group(2)]


_PROM_DURATION = re.compile(r"(?:[0-9]+(?:ms|y|w|d|h|m|s))+")


def prometheus_duration(text: str) -> timedelta | None:
    """A duration as Prometheus writes it, or None for text that is not one."""
    if not _PROM_DURATION.fullmatch(text):
        return None
    parts = re.findall(r"([0-9]+)(ms|y|w|d|h|m|s)", text)
    return sum((int(count) * _PROM_UNITS[unit] for count, unit in parts), timedelta())


def promql_duration(window: timedelta) -> str:
    return f"{int(window.total_seconds())}s"


@dataclass(frozen=True)
class Sample:
    labels: dict[str, str]
    value: float


@dataclass(frozen=True)
class Target:
    job: str
    instance: str
    health: str
    last_error: str
    labels: dict[str, str]


class Prometheus:
    def __init__(self, url: str) -> None:
        self.server = server("--prometheus", url)
        self.url = self.server.url

    def _api(self, path: str, params: dict[str, str] | None = None) -> Any:
        document = self.server.get_json(f"/api/v1/{path}", params, what="Prometheus")
        if not isinstance(document, dict):
            raise self._unexpected(path)
        if document.get("status") == "error" and document.get("error"):
            raise ToolError(f"Prometheus at {self.url}: {path}: {document['error']}")
        data = document.get("data")
        if document.get("status") != "success" or not isinstance(data, dict):
            raise self._unexpected(path)
        return data

    def _unexpected(self, path: str) -> ToolError:
        """A server that answers, but not as Prometheus's API does (another service, a proxy)."""
        return ToolError(
            f"Prometheus at {self.url}: {path}: the answer is not what Prometheus's API returns"
        )

    def query(self, promql: str, at: datetime | None = None) -> list[Sample]:
        """An instant query's vector."""
        params = {"query": promql}
        if at is not None:
            params["time"] = f"{at.timestamp():.3f}"
        data = self._api("query", params)
        if data.get("resultType") != "vector":
            raise ToolError(f"Prometheus at {self.url}: {promql}: not a vector")
        try:
            return [
                Sample({str(k): str(v) for k, v in r["metric"].items()}, float(r["value"][1]))
                for r in data["result"]
            ]
        except (KeyError, IndexError, TypeError, ValueError, AttributeError):
            raise self._unexpected("query") from None

    def retention(self) -> timedelta | None:
        """How long the server keeps samples (its ``storage.tsdb.retention.time``), or None when
        it does not say: a size limit alone, or a server without the status API (a proxy, a
        long-term store in front of it)."""
        try:
            data = self._api("status/runtimeinfo")
        except ToolError:
            return None
        stated = str(data.get("storageRetention") or "") if isinstance(data, dict) else ""
        # "15d", "10GiB", or "15d or 10GiB" when both limits are set.
        times = [d for part in stated.split(" or ") if (d := prometheus_duration(part.strip()))]
        return times[0] if times else None

    def targets(self) -> list[Target]:
        data = self._api("targets", {"state": "active"})
        try:
            return [
                Target(
                    job=str(t["labels"].get("job", "")),
                    instance=str(t["labels"].get("instance", "")),
                    health=str(t.get("health", "unknown")),
                    last_error=str(t.get("lastError") or ""),
                    labels=dict(t["labels"]),
                )
                for t in data.get("activeTargets") or []
            ]
        except (KeyError, TypeError, ValueError, AttributeError):
            raise self._unexpected("targets") from None

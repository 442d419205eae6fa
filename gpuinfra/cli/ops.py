"""CLI commands: report (GPU-hours per team) and doctor (the morning check)."""

from __future__ import annotations

import csv
import dataclasses
import io
import json
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from gpuinfra.cli.console import emit, out, waiting, warn
from gpuinfra.cli.options import parse_site
from gpuinfra.errors import SourcesUnread, UsageError

report_app = typer.Typer(help="Reports read from a running cluster's Prometheus.")


class ReportFormat(StrEnum):
    table = "table"
    csv = "csv"
    json = "json"


def _until(text: str | None) -> datetime:
    if text is None:
        return datetime.now(UTC)
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise UsageError(
            f"--until {text!r}: not a time (allowed: ISO 8601, e.g. 2026-12-01T00:00:00Z)"
        ) from None
    moment = moment if moment.tzinfo else moment.replace(tzinfo=UTC)
    if moment > datetime.now(UTC):
        # Prometheus has no samples there: the report would read as GPUs nobody used.
        raise UsageError(f"--until {text!r}: in the future (allowed: a time up to now)")
    return moment


def _span(span: timedelta) -> str:
    """A retention as people write it: 400d, 36h, 90m."""
    for unit, size in (("d", timedelta(days=1)), ("h", timedelta(hours=1))):
        if span >= size and span % size == timedelta():
            return f"{span // size}{unit}"
    return f"{span // timedelta(minutes=1)}m"


@report_app.command("gpu-hours")
def gpu_hours(
    prometheus: Annotated[
        str, typer.Option(help="Prometheus base URL, e.g. http://127.0.0.1:9090")
    ],
    since: Annotated[
        str, typer.Option(help="Window to cover, ending at --until: 24h, 7d, 90m")
    ] = "24h",
    until: Annotated[
        str | None, typer.Option(help="End of the window (ISO 8601); now when unset")
    ] = None,
    by: Annotated[
        str, typer.Option(help="Group by any of team, project, namespace (comma-separated)")
    ] = "team,project,namespace",
    fmt: Annotated[
        ReportFormat, typer.Option("--format", help="table, csv or json")
    ] = ReportFormat.table,
) -> None:
    """GPU-hours allocated and used per team, project and namespace."""
    from gpuinfra.ops import gpuhours
    from gpuinfra.ops.prometheus import Prometheus, parse_duration

    keys = tuple(k.strip() for k in by.split(",") if k.strip())
    wrong = [k for k in keys if k not in gpuhours.KEYS]
    if wrong or not keys:
        raise UsageError(
            f"--by {by!r}: allowed: team, project, namespace (one or more, comma-separated)"
        )
    window = parse_duration("--since", since)
    end = _until(until)
    if end < datetime(1970, 1, 1, tzinfo=UTC) + window:
        # Prometheus counts time from 1970: a window that starts before holds no samples.
        raise UsageError(
            f"--since {since} before --until {end.isoformat(timespec='minutes')} starts before 1970 "
            "(allowed: a window inside Prometheus's time, which starts on 1970-01-01)"
        )
    server = Prometheus(prometheus)
    with waiting(f"report: reading Prometheus at {server.url}"):
        rows = gpuhours.gpu_hours(server, window, end, by=keys)
        kept = server.retention()
    if kept is not None and end - window < datetime.now(UTC) - kept:
        # Samples older than the retention are gone: the report counts only what is left.
        warn(
            f"Prometheus at {server.url} keeps {_span(kept)} of samples; the window starts "
            f"{(end - window):%Y-%m-%d %H:%M} UTC, before its oldest, so GPU-hours before "
            f"{(datetime.now(UTC) - kept):%Y-%m-%d %H:%M} UTC are missing from the report",
            stderr=True,
        )
    shown = [k for k in gpuhours.KEYS if k in keys]
    records = [
        {
            **{k: getattr(r, k) for k in shown},
            "gpu_hours_allocated": round(r.allocated, 3),
            "gpu_hours_used": round(r.used, 3),
            "utilisation": None if r.utilisation is None else round(r.utilisation, 4),
        }
        for r in rows
    ]
    if fmt is ReportFormat.json:
        document = {
            "since": since,
            "start": (end - window).isoformat(),
            "end": end.isoformat(),
            "rows": records,
        }
        emit(json.dumps(document, indent=2) + "\n")
        return
    if fmt is ReportFormat.csv:
        buffer = io.StringIO()
        writer = csv.DictWriter(
            buffer, fieldnames=[*shown, "gpu_hours_allocated", "gpu_hours_used", "utilisation"]
        )
        writer.writeheader()
        writer.writerows(records)
        emit(buffer.getvalue())
        return
    table = Table(title=f"GPU-hours, {since} to {end:%Y-%m-%d %H:%M} UTC")
    for key in shown:
        table.add_column(key)
    table.add_column("allocated GPU-h", justify="right")
    table.add_column("used GPU-h", justify="right")
    table.add_column("used %", justify="right")
    for r in rows:
        table.add_row(
            *(getattr(r, k) or "-" for k in shown),
            f"{r.allocated:.1f}",
            f"{r.used:.1f}",
            "-" if r.utilisation is None else f"{100 * r.utilisation:.0f}%",
        )
    allocated = sum(r.allocated for r in rows)
    used = sum(r.used for r in rows)
    table.add_section()
    table.add_row(
        "total", *([""] * (len(shown) - 1)), f"{allocated:.1f}", f"{used:.1f}",
        f"{100 * used / allocated:.0f}%" if allocated else "-",
    )  # fmt: skip
    out.print(table)


class DoctorFormat(StrEnum):
    table = "table"
    json = "json"


_MARKS = {
    "ok": "[green]ok[/]",
    "fail": "[bold red]FAIL[/]",
    "skip": "[dim]skip[/]",
    "unread": "[bold red]UNREAD[/]",
}


def doctor(
    kubeconfig: Annotated[
        Path | None, typer.Option(help="Kubeconfig of the cluster (nodes, Triton)")
    ] = None,
    prometheus: Annotated[
        str | None, typer.Option(help="Prometheus base URL (targets, Triton models)")
    ] = None,
    alertmanager: Annotated[
        str | None, typer.Option(help="Alertmanager base URL (firing alerts)")
    ] = None,
    node_checks: Annotated[
        Path | None,
        typer.Option(help="Node check reports: converge's --report-json file or a directory"),
    ] = None,
    stack: Annotated[
        str | None, typer.Option(help="The stack that declares the cluster: dev, staging, prod")
    ] = None,
    site: Annotated[
        Path | None,
        typer.Option(parser=parse_site, help="The site inventory that declares the cluster"),
    ] = None,
    fmt: Annotated[DoctorFormat, typer.Option("--format", help="table or json")] = (
        DoctorFormat.table
    ),
) -> None:
    """The morning check: GPU nodes, DCGM exporter, scrapes, Triton, alerts, node checks.

    Exit 0 when every item passes, 1 when one fails, 3 when a server could not be read (the
    others are still checked and shown).
    """
    from gpuinfra import addons, config, integrity
    from gpuinfra import site as site_mod
    from gpuinfra.ops import doctor as doctor_mod

    if stack is not None and site is not None:
        raise UsageError("give at most one of --stack ENV or --site DIR")
    if kubeconfig is None and prometheus is None and alertmanager is None and node_checks is None:
        # Every item would be skipped: "all ok" would say a cluster is healthy unread.
        raise UsageError(
            "nothing to check: give at least one of --kubeconfig, --prometheus, --alertmanager "
            "or --node-checks"
        )
    declared = doctor_mod.Declared()
    if stack is not None:
        cfg = config.load_stack(stack)
        declared = doctor_mod.Declared(integrity.stack_nodes(cfg), cfg.addons.triton)
    elif site is not None:
        loaded = site_mod.load_site(site)
        settings = addons.settings_from_site(loaded)
        declared = doctor_mod.Declared(integrity.site_nodes(loaded), settings.triton, by_host=True)
    given = {
        "the Kubernetes API": kubeconfig,
        "Prometheus": prometheus,
        "Alertmanager": alertmanager,
        "the node check reports": node_checks,
    }
    with waiting(f"doctor: reading {', '.join(n for n, v in given.items() if v is not None)}"):
        items = doctor_mod.run(
            declared=declared,
            kubeconfig=kubeconfig,
            prometheus_url=prometheus,
            alertmanager_url=alertmanager,
            node_checks=node_checks,
        )
    failures = doctor_mod.failed(items)
    unread = doctor_mod.unread(items)
    if fmt is DoctorFormat.json:
        document = {
            "ok": not failures and not unread,
            "items": [dataclasses.asdict(i) for i in items],
        }
        emit(json.dumps(document, indent=2) + "\n")
    else:
        table = Table(title="gpuinfra doctor")
        for column in ("check", "subject", "status", "detail"):
            table.add_column(column, overflow="fold")
        for item in items:
            table.add_row(item.check, item.subject, _MARKS[item.status], item.detail)
        out.print(table)
        summary = [f"{len(failures)} of {len(items)} items failed"] if failures else []
        if unread:
            summary.append(f"{len(unread)} source{'s' if len(unread) > 1 else ''} not read")
        out.print(", ".join(summary) or "all ok")
    if unread:
        # The check is incomplete: its verdict on what it read is in the table.
        raise SourcesUnread(i.detail for i in unread)
    if failures:
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    app.add_typer(report_app, name="report")
    app.command("doctor")(doctor)

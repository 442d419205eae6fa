"""CLI commands: ``lab up|down|status`` and ``converge`` (a playbook with a live view)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Group
from rich.live import Live
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from gpuinfra import lab as lab_mod
from gpuinfra.cli.console import out, warn
from gpuinfra.cli.options import (
    parse_out_file,
    parse_site,
    parse_vault_password_file,
    parse_whole,
    vault_password_problem,
)
from gpuinfra.errors import CheckFailed, UsageError, excerpt

if TYPE_CHECKING:
    from gpuinfra.lab import runner

lab_app = typer.Typer(help="Local Debian 12 or 13 lab hosts (podman containers booting systemd).")

Prefix = Annotated[
    str | None,
    typer.Option(help="Lab name prefix (env GPUINFRA_LAB_PREFIX; default gpuinfra-lab)"),
]
PortBase = Annotated[
    int | None,
    typer.Option(
        parser=parse_whole,
        help="Host N listens on 127.0.0.1:BASE+N (env GPUINFRA_LAB_PORT_BASE; default 2200)",
    ),
]

_STATUS_STYLE = {
    "pass": "green",
    "ok": "green",
    "fail": "bold red",
    "failed": "bold red",
    "unreachable": "bold red",
    "warn": "yellow",
    "skip": "dim",
}


@lab_app.command("up")
def lab_up(
    hosts: Annotated[int, typer.Option(parser=parse_whole, help="How many hosts")] = 2,
    prefix: Prefix = None,
    port_base: PortBase = None,
    suite: Annotated[
        str | None,
        typer.Option(
            help="Debian release of new hosts: bookworm (12) or trixie (13) "
            "(env GPUINFRA_LAB_SUITE; default bookworm); running hosts keep theirs"
        ),
    ] = None,
) -> None:
    """Start the lab hosts (kept when running) and write their inventory."""
    settings = lab_mod.Settings.from_env(prefix, port_base, suite)
    started = lab_mod.up(settings, hosts, log=lambda line: out.print(f"lab: {escape(line)}"))
    for host in started:
        out.print(f"lab: {host.name} ready on 127.0.0.1:{host.port}")
    shown = settings.hosts_file.relative_to(settings.root)
    out.print(f"lab: inventory written to {shown}")


@lab_app.command("down")
def lab_down(prefix: Prefix = None, port_base: PortBase = None) -> None:
    """Remove the lab's containers, repository server and generated inventory."""
    settings = lab_mod.Settings.from_env(prefix, port_base, builds=False)
    removed = lab_mod.down(settings)
    out.print(f"lab: removed {', '.join(removed) if removed else 'nothing (no hosts)'}")


@lab_app.command("status")
def lab_status(prefix: Prefix = None, port_base: PortBase = None) -> None:
    """List the lab's hosts, their state and SSH port."""
    settings = lab_mod.Settings.from_env(prefix, port_base, builds=False)
    table = Table(title=f"lab {settings.prefix}")
    for column in ("host", "state", "ssh"):
        table.add_column(column)
    for host in lab_mod.hosts(settings):
        style = "green" if host.state == "running" else "yellow"
        table.add_row(host.name, f"[{style}]{host.state}[/]", f"127.0.0.1:{host.port}")
    if table.row_count:
        out.print(table)
    else:
        out.print(f"lab {settings.prefix}: no hosts (`gpuinfra lab up` starts them)")
    proxy = "running" if lab_mod.proxy_listening(settings.proxy_port) else "not running"
    out.print(f"apt proxy 127.0.0.1:{settings.proxy_port}: {proxy}")


def _live_view(progress: runner.Progress, started: float) -> Group:
    elapsed = time.monotonic() - started
    head = Text.assemble(
        (f"{elapsed:6.0f}s ", "dim"), (progress.play or "starting", "bold"), "  ", progress.task
    )
    table = Table(expand=False, show_edge=False)
    for column in ("host", "status", "ok", "changed", "failed", "task"):
        table.add_column(column)
    for name, state in sorted(progress.hosts.copy().items()):
        style = _STATUS_STYLE.get(state.status, "")
        table.add_row(
            name,
            f"[{style}]{state.status}[/]" if style else state.status,
            str(state.ok),
            str(state.changed),
            str(state.failed),
            escape(f"{state.task}: {state.progress}" if state.progress else state.task),
        )
    return Group(head, table)


def recap_table(result: runner.RunResult) -> Table:
    table = Table(title="PLAY RECAP")
    for column in ("host", "ok", "changed", "failed", "unreachable", "skipped"):
        table.add_column(column, justify="left" if column == "host" else "right")
    for host, counts in result.recap.items():
        failed = counts["failures"]
        dark = counts["dark"]
        table.add_row(
            host,
            str(counts["ok"]),
            f"[yellow]{counts['changed']}[/]" if counts["changed"] else "0",
            f"[bold red]{failed}[/]" if failed else "0",
            f"[bold red]{dark}[/]" if dark else "0",
            str(counts["skipped"]),
        )
    return table


def report_table(host: str, report: dict[str, Any]) -> Table:
    summary = str(report.get("summary", ""))
    style = _STATUS_STYLE.get(summary, "yellow")
    table = Table(title=f"node check {escape(host)}: [{style}]{escape(summary)}[/]")
    for column in ("check", "status", "expected", "actual", "detail"):
        table.add_column(column, overflow="fold")
    for check in report.get("checks") or []:
        status = str(check.get("status", ""))
        table.add_row(
            escape(str(check.get("name", ""))),
            f"[{_STATUS_STYLE.get(status, '')}]{status}[/]",
            escape(_cell(check.get("expected"))),
            escape(_cell(check.get("actual"))),
            escape(_cell(check.get("detail"))),
        )
    return table


def _cell(value: Any) -> str:
    if value is None:
        return ""
    return value if isinstance(value, str) else json.dumps(value)


def converge(
    site: Annotated[
        Path | None,
        typer.Option(parser=parse_site, help="Inventory directory (default: the lab's)"),
    ] = None,
    playbook: Annotated[str, typer.Option(help="Playbook under playbooks/")] = "nodes.yml",
    limit: Annotated[str | None, typer.Option(help="Only these hosts (Ansible pattern)")] = None,
    report_json: Annotated[
        Path | None,
        typer.Option(
            parser=parse_out_file,
            metavar="FILE",
            help="Also write recap and node check reports here",
        ),
    ] = None,
    vault_password_file: Annotated[
        Path | None,
        typer.Option(
            parser=parse_vault_password_file,
            metavar="FILE",
            help="Decrypts the site's Ansible Vault values (or ANSIBLE_VAULT_PASSWORD_FILE)",
        ),
    ] = None,
    check: Annotated[
        bool,
        typer.Option(
            "--check",
            help="Change nothing: show what a run would change on each host, with each file's "
            "difference; exit 1 when something would change",
        ),
    ] = False,
) -> None:
    """Run a playbook on a site with a live view; end with the recap and node check tables."""
    from gpuinfra import site as site_mod
    from gpuinfra.lab import runner
    from gpuinfra.loading import display_path

    if site is None:
        lab = lab_mod.Settings.from_env()
        if not lab.hosts_file.exists():
            raise UsageError(f"{lab_mod.not_up(lab)}, or give --site DIR")
        site_dir = lab.inventory_dir
    else:
        site_dir = site
    # A bad inventory value stops here, before any host is touched.
    loaded = site_mod.load_site(site_dir)
    for problem in site_mod.keepalive_warnings(loaded, os.environ):
        warn(str(problem))
    inventory = loaded.inventory or site_dir / "hosts.yml"
    book = runner.find_playbook(playbook)
    # ansible-playbook reads this one too, beside --vault-password-file.
    from_env = os.environ.get("ANSIBLE_VAULT_PASSWORD_FILE")
    if from_env is not None and (why := vault_password_problem(from_env)):
        raise UsageError(f"ANSIBLE_VAULT_PASSWORD_FILE {why}")
    targets = list(loaded.hosts) if limit is None else runner.limited_hosts(inventory, limit)
    # A lab's apt proxy and stand-in repository answer before anything runs on its hosts.
    lab_mod.check_lab_sources(site_dir)
    started = time.monotonic()
    count = f"{len(targets)} of {len(loaded.hosts)}" if limit is not None else len(targets)
    hosts = "host" if count == 1 else "hosts"
    mode = " in check mode: nothing on the hosts is changed" if check else ""
    out.print(f"converge: {book.name} on {loaded.name} ({count} {hosts}){mode}")
    if out.is_terminal:
        live = Live(console=out, refresh_per_second=4, transient=False)
        with live:
            result = runner.converge(
                book,
                inventory,
                limit=limit,
                on_event=lambda _e, p: live.update(_live_view(p, started)),
                vault_password_file=vault_password_file,
                check=check,
            )
    else:
        shown: dict[str, str] = {}
        result = runner.converge(
            book,
            inventory,
            limit=limit,
            on_event=lambda e, p: _log_line(out, e, p, started, shown, check),
            vault_password_file=vault_password_file,
            check=check,
        )
    out.print(recap_table(result))
    for host, report in sorted(result.reports.items()):
        out.print(report_table(host, report))
    if check:
        for change in result.changes:
            out.print(
                f"would change: {escape(change.host)}: {escape(change.task)}", highlight=False
            )
            for line in change.diff.splitlines():
                out.print(f"  {escape(line)}", highlight=False, soft_wrap=True)
    if report_json is not None:
        document = {
            "status": result.status,
            "recap": result.recap,
            "failures": [f.__dict__ for f in result.failures],
            "reports": result.reports,
            **({"would_change": [c.__dict__ for c in result.changes]} if check else {}),
        }
        try:
            report_json.write_text(json.dumps(document, indent=2) + "\n")
        except OSError as exc:
            raise UsageError(
                f"--report-json {excerpt(str(report_json), 80)}: cannot write: {exc.strerror}"
            ) from None
    elapsed = f"{time.monotonic() - started:.0f}s"
    if check and result.ok:
        pending = sorted({c.host for c in result.changes})
        said = (
            f"would make {len(result.changes)} change(s) on {len(pending)} host(s)"
            if pending
            else "would change nothing"
        )
        out.print(f"converge --check: a run {said}; nothing was changed ({elapsed})")
        if pending:
            raise CheckFailed(
                f"{host}: a run would make {sum(c.host == host for c in result.changes)} "
                "change(s); see 'would change' above"
                for host in pending
            )
        return
    out.print(f"converge: {result.status} in {elapsed}")
    if not result.ok:
        if result.failures:
            raise CheckFailed([str(f) for f in result.failures])
        if why := result.stopped_why():
            said = why if len(why) <= 200 else why[:197] + "..."
            raise CheckFailed(
                [f"ansible-playbook stopped: {said}; output in {display_path(result.artifact_dir)}"]
            )
        raise CheckFailed(
            [
                f"ansible-playbook ended {result.status} (rc {result.rc}); "
                f"events in {result.artifact_dir}"
            ]
        )


def _log_line(
    out: Any,
    event: runner.Event,
    progress: runner.Progress,
    started: float,
    shown: dict[str, str] | None = None,
    check: bool = False,
) -> None:
    """Without a terminal (CI logs, pipes) progress is one line per task and per problem, and a
    line when a long task's progress on a host changes (``shown``: each host's last one)."""
    kind = event.get("event")
    data = event.get("event_data") or {}
    stamp = f"{time.monotonic() - started:6.0f}s"
    if kind == "playbook_on_task_start":
        out.print(f"{stamp} {escape(progress.play)} | {escape(progress.task)}", highlight=False)
    elif kind == "runner_retry" and shown is not None:
        host = str(data.get("host"))
        line = progress.host(host).progress
        if line and shown.get(host) != line:
            shown[host] = line
            out.print(f"{stamp}   {escape(host)}: {escape(line)}", highlight=False, soft_wrap=True)
    elif kind == "runner_on_ok" and (data.get("res") or {}).get("changed"):
        what = "would change" if check else "changed"
        out.print(f"{stamp}   {what}: {escape(str(data.get('host')))}", highlight=False)
    elif (
        kind in ("runner_on_failed", "runner_on_unreachable")
        and progress.failures
        and not data.get("ignore_errors")
    ):
        out.print(f"{stamp}   [bold red]{escape(str(progress.failures[-1]))}[/]", soft_wrap=True)


def register(app: typer.Typer) -> None:
    """Add this module's commands to the `gpuinfra` app."""
    app.add_typer(lab_app, name="lab")
    app.command("converge")(converge)

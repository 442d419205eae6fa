"""The ``gpuinfra`` command: the only package that prints or exits.

Library code raises ``GpuinfraError`` subclasses; ``main`` turns them into their lines on stderr
and their exit code, once, here. A user mistake never shows a traceback. The command groups
(``addons``, ``lab``, ``review``, ``schemas``) each expose ``register(app)``; every line they
write goes through ``console``.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import signal
import sys
import threading
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

# typer (pinned) carries its own copy of click; its usage errors are these classes.
from typer._click.exceptions import NoArgsIsHelpError
from typer._click.exceptions import UsageError as ArgumentError
from typer.core import TyperOption

from gpuinfra import secrets
from gpuinfra.cli.console import OutputClosed, err, out, say, warn
from gpuinfra.cli.options import STACK_HELP, AsOf, parse_site
from gpuinfra.errors import (
    EXIT_INTERNAL,
    EXIT_INTERRUPTED,
    EXIT_OUTPUT_CLOSED,
    CheckFailed,
    ConfigError,
    GpuinfraError,
    UsageError,
    one_line,
)

if TYPE_CHECKING:
    from gpuinfra import versions as versions_mod


def _flag_type(self: TyperOption, ctx: Any) -> str | None:
    """A flag takes no value: its help row shows no type. Typer's plain help already leaves it
    out; its rich help wrote ``--all <bool>``, which reads as an option that wants a value."""
    return None if self.is_flag else _option_type(self, ctx)


_option_type = TyperOption.display_type_rich
TyperOption.display_type_rich = _flag_type  # type: ignore[method-assign]

app = typer.Typer(
    help="Infrastructure as code for GPU clusters: versions, lab, plan, diff and cost.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
versions_app = typer.Typer(help="The pinned versions in versions.yaml.", no_args_is_help=True)
config_app = typer.Typer(help="Validate stack and site configuration.", no_args_is_help=True)
app.add_typer(versions_app, name="versions")
app.add_typer(config_app, name="config")


class Format(StrEnum):
    table = "table"
    json = "json"


def versions_document(v: versions_mod.Versions) -> list[dict[str, str | None]]:
    rows: list[dict[str, str | None]] = []
    for name, comp in v.entries():
        rows.append(
            {
                "component": name,
                "version": comp.version,
                "tag": comp.tag,
                "source": comp.source.type,
                "from": comp.source.describe(),
            }
        )
        # The same packages' build of another Debian release, right below the entry.
        for suite, build in comp.releases.items():
            rows.append(
                {
                    "component": f"{name}.releases.{suite}",
                    "version": build.version,
                    "tag": build.package_version,
                    "source": comp.source.type,
                    "from": f"{comp.source.type} {', '.join(comp.source.packages)} from "
                    f"{comp.source.repository} {suite} {comp.source.component or ''}".rstrip(),
                }
            )
    return rows


@versions_app.command("show")
def versions_show(
    fmt: Annotated[Format, typer.Option("--format", help="table or json")] = Format.table,
) -> None:
    """Print every pinned version and where it comes from.

    A versions.yaml that breaks a pinning or compatibility rule is refused (exit 2), as every
    command that reads the pins refuses it, with the lines `versions check` prints.
    """
    from gpuinfra import versions as versions_mod

    v = versions_mod.load_checked()
    # A cell folds a long URL over lines, out of the console's reach: redact the rows.
    rows: list[dict[str, str | None]] = secrets.redact(versions_document(v))
    if fmt is Format.json:
        out.print_json(json.dumps({"versions": rows}))
        return
    table = Table(title="Pinned versions (versions.yaml)")
    table.add_column("component", no_wrap=True)
    table.add_column("version", no_wrap=True)
    table.add_column("from", overflow="fold")
    for row in rows:
        version = row["version"] or ""
        if row["tag"] and row["tag"] != version:
            version = f"{version} ({row['tag']})"
        table.add_row(row["component"], version, row["from"])
    out.print(table)


class Environment(StrEnum):
    dev = "dev"
    staging = "staging"
    prod = "prod"


@versions_app.command("check")
def versions_check(
    environment: Annotated[
        Environment | None,
        typer.Option(
            help="The environment the pins serve: prod turns an ended support window into an error"
        ),
    ] = None,
    as_of: AsOf = None,
) -> None:
    """Check versions.yaml: pins, compatibility rules, chart schemas and support windows.

    Exit 1 with one line per broken rule; exit 2 where the file itself is malformed (an unknown
    key, a wrong type). A support window that has ended, or ends soon, is a warning; with
    --environment prod an ended one is an error.
    """
    from gpuinfra import chartdata, support
    from gpuinfra import versions as versions_mod

    today = as_of or dt.date.today()
    v = versions_mod.load()
    problems = [f"versions.yaml: {p}" for p in [*versions_mod.check(v), *chartdata.missing(v)]]
    windows = support.check(v, today)
    for finding in windows:
        if finding.state == "past" and environment is Environment.prod:
            problems.append(f"versions.yaml: {finding} (environment prod)")
        elif finding.state in ("past", "soon"):
            warn(f"versions.yaml: {finding}")
    if problems:
        raise CheckFailed(problems)
    dated = sum(1 for f in windows if f.state != "undated")
    say(
        f"support windows: {dated} pins dated on {today.isoformat()} ({support.table()['as_of']} table)"
    )
    # Judged neither ok nor ended: the reader sees which pins no date covers, and why.
    for finding in windows:
        if finding.state == "undated":
            say(f"undated: {finding}")
    say(support.eks_ami_hint(v))
    count = sum(1 for _ in v.entries())
    say(f"versions.yaml: {count} components pinned, all compatibility rules pass")


def prod_support_problems(
    environment: str | None,
    as_of: dt.date | None,
    *,
    sources: set[str] | None = None,
    containerd_sources: set[str] | None = None,
) -> list[str]:
    """For a prod stack (``sources`` None) or a prod site (its hosts' driver and containerd
    sources): every pin it runs that is past its end of support. Other environments get none."""
    from gpuinfra import support
    from gpuinfra import versions as versions_mod

    if environment != Environment.prod:
        return []
    runs = support.stack_pin if sources is None else support.site_pin(sources, containerd_sources)
    return support.prod_problems(versions_mod.pinned(), as_of or dt.date.today(), runs)


@config_app.command("check")
def config_check(
    stack: Annotated[str | None, typer.Option(help=STACK_HELP)] = None,
    site: Annotated[
        Path | None, typer.Option(parser=parse_site, help="A site inventory directory")
    ] = None,
    as_of: AsOf = None,
) -> None:
    """Validate a stack file or a site inventory; exit 2 with one line per problem.

    A prod stack or site whose pins are past their end of support fails the check (exit 1).
    """
    from gpuinfra import config, integrity
    from gpuinfra import site as site_mod

    if (stack is None) == (site is None):
        raise UsageError("give exactly one of --stack ENV or --site DIR")
    if stack is not None:
        from gpuinfra.cli import checks

        cfg = config.load_stack(stack)
        warnings = checks.stack_warnings(stack, cfg)
        for warning in warnings:
            warn(f"{warning.object} {warning.path}: {warning.message}")
        if problems := prod_support_problems(cfg.environment, as_of):
            raise CheckFailed(problems)
        out.print(f"stack {stack}: valid ({len(cfg.node_pools)} node pools)")
    else:
        assert site is not None
        checked = integrity.load_checked_site(site)
        for warning in checked.warnings:
            warn(f"{warning.object} {warning.path}: {warning.message}")
        for problem in site_mod.keepalive_warnings(checked.site, os.environ):
            warn(str(problem))
        if problems := prod_support_problems(
            checked.site.environment,
            as_of,
            sources=checked.site.driver_sources(),
            containerd_sources=checked.site.containerd_sources(),
        ):
            raise CheckFailed(problems)
        count = len(checked.site.hosts)
        out.print(f"site {checked.site.name}: valid ({count} host{'' if count == 1 else 's'})")


def _register_command_groups() -> None:
    from gpuinfra.cli import addons, lab, ops, review, schemas, triton, workloads

    for module in (lab, addons, review, schemas, workloads, triton, ops):
        module.register(app)


_register_command_groups()


def _terminated(signum: int, frame: object) -> None:
    """SIGTERM ends a command as Ctrl-C does: its cleanups run, and it exits 130."""
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> None:
    """Console-script entry: run the app, turn library errors into messages and exit codes."""
    # A command that stops child processes itself on SIGTERM (a converge) sets its own handler
    # for the while, and puts this one back.
    previous = None
    if threading.current_thread() is threading.main_thread():
        previous = signal.signal(signal.SIGTERM, _terminated)
    try:
        _main(argv)
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def _main(argv: list[str] | None) -> None:
    try:
        # Not standalone: a usage error comes back here and is told in one line, like the rest.
        code = app(args=argv, prog_name="gpuinfra", standalone_mode=False)
    except NoArgsIsHelpError as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except ArgumentError as exc:
        sys.exit(_usage_error(exc))
    except GpuinfraError as exc:
        for line in exc.lines():
            err.print(f"[bold red]error:[/] {escape(one_line(line))}", highlight=False)
        sys.exit(exc.exit_code)
    except (KeyboardInterrupt, typer.Abort):
        err.print("interrupted")
        sys.exit(EXIT_INTERRUPTED)
    except OutputClosed:
        # Nothing to tell, and nobody to tell it to: what is still buffered goes nowhere, rather
        # than into a second broken pipe as the interpreter exits.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        sys.exit(EXIT_OUTPUT_CLOSED)
    except Exception as exc:
        # Not a user mistake and not the machine: a defect. The traceback is what a report needs.
        err.print_exception()
        line = f"internal error: {type(exc).__name__}: {exc}; this is a defect in gpuinfra"
        err.print(f"[bold red]error:[/] {escape(line)}", highlight=False)
        sys.exit(EXIT_INTERNAL)
    if code == EXIT_INTERRUPTED:
        # typer turns a KeyboardInterrupt in a command (Ctrl-C, SIGTERM) into this code.
        err.print("interrupted")
    if isinstance(code, int) and code:
        sys.exit(code)


def _usage_error(exc: ArgumentError) -> int:
    """An argument the command line library refused, as one line naming the command."""
    message = exc.format_message().replace("Value error, ", "")
    command = exc.ctx.command_path if exc.ctx is not None else "gpuinfra"
    line = one_line(f"{command}: {message[0].lower()}{message[1:]} (see {command} --help)")
    err.print(f"[bold red]error:[/] {escape(line)}", highlight=False)
    return exc.exit_code


__all__ = ["ConfigError", "app", "main"]

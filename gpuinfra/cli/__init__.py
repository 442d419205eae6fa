"""The ``gpuinfra`` command: the only package that prints or exits.

Library code raises ``GpuinfraError`` subclasses; ``main`` turns them into their lines on stderr
and their exit code, once, here. A user mistake never shows a traceback. The command groups
(``addons``, ``lab``, ``review``, ``schemas``) each expose ``register(app)``; every line they
write goes through ``console``.
"""

from __future__ import annotations

import json
import sys
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.markup import escape
from rich.table import Table

from gpuinfra.cli.console import err, out
from gpuinfra.errors import EXIT_INTERNAL, CheckFailed, ConfigError, GpuinfraError, UsageError

if TYPE_CHECKING:
    from gpuinfra import versions as versions_mod

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
    return [
        {
            "component": name,
            "version": comp.version,
            "tag": comp.tag,
            "source": comp.source.type,
            "from": comp.source.describe(),
        }
        for name, comp in v.entries()
    ]


@versions_app.command("show")
def versions_show(
    fmt: Annotated[Format, typer.Option("--format", help="table or json")] = Format.table,
) -> None:
    """Print every pinned version and where it comes from."""
    from gpuinfra import versions as versions_mod

    v = versions_mod.load()
    rows = versions_document(v)
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


@versions_app.command("check")
def versions_check() -> None:
    """Check pins, compatibility rules and schemas per chart; exit 1 with one line per problem."""
    from gpuinfra import chartdata
    from gpuinfra import versions as versions_mod

    v = versions_mod.load()
    problems = [*versions_mod.check(v), *chartdata.missing(v)]
    if problems:
        raise CheckFailed(f"versions.yaml: {p}" for p in problems)
    count = sum(1 for _ in v.entries())
    out.print(f"versions.yaml: {count} components pinned, all compatibility rules pass")


@config_app.command("check")
def config_check(
    stack: Annotated[str | None, typer.Option(help="A stack: dev, staging or prod")] = None,
    site: Annotated[Path | None, typer.Option(help="A site inventory directory")] = None,
) -> None:
    """Validate a stack file or a site inventory; exit 2 with one line per problem."""
    from gpuinfra import addons, config, integrity
    from gpuinfra import site as site_mod
    from gpuinfra.loading import display_path

    if (stack is None) == (site is None):
        raise UsageError("give exactly one of --stack ENV or --site DIR")
    if stack is not None:
        cfg = config.load_stack(stack)
        warnings = integrity.check_stack(cfg, display_path(config.stack_path(stack)))
        for warning in warnings:
            out.print(f"warning: {warning.object} {warning.path}: {warning.message}")
        out.print(f"stack {stack}: valid ({len(cfg.node_pools)} node pools)")
    else:
        assert site is not None
        loaded = site_mod.load_site(site)
        renders = addons.render_all(addons.settings_from_site(loaded))
        warnings = integrity.check_site(loaded, display_path(site), renders=renders)
        for warning in warnings:
            out.print(f"warning: {warning.object} {warning.path}: {warning.message}")
        out.print(f"site {loaded.name}: valid ({len(loaded.hosts)} hosts)")


def _register_command_groups() -> None:
    from gpuinfra.cli import addons, lab, review, schemas, triton

    for module in (lab, addons, review, schemas, triton):
        module.register(app)


_register_command_groups()


def main(argv: list[str] | None = None) -> None:
    """Console-script entry: run the app, turn library errors into messages and exit codes."""
    # Standalone mode lets the CLI library report its own usage errors (exit 2).
    try:
        app(args=argv)
    except GpuinfraError as exc:
        for line in exc.lines():
            err.print(f"[bold red]error:[/] {escape(line)}", highlight=False)
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        err.print("interrupted")
        sys.exit(130)
    except Exception as exc:
        # Not a user mistake and not the machine: a defect. The traceback is what a report needs.
        err.print_exception()
        line = f"internal error: {type(exc).__name__}: {exc}; this is a defect in gpuinfra"
        err.print(f"[bold red]error:[/] {escape(line)}", highlight=False)
        sys.exit(EXIT_INTERNAL)


__all__ = ["ConfigError", "app", "main"]

"""CLI commands of the review path: ``plan``, ``cost`` and ``diff``.

Each command builds a document with the library (``gpuinfra.review.plan``, ``.cost``,
``.diff``) and only chooses how to show it: a table for people, JSON for machines,
markdown for a pull request comment.
"""

from __future__ import annotations

import os
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import RenderableType
from rich.table import Table
from rich.text import Text

from gpuinfra.cli.console import emit, err, render_text, warning
from gpuinfra.cli.options import STACK_HELP, AsOf, parse_out, parse_site
from gpuinfra.errors import CheckFailed, InputInvalid, UsageError, excerpt

if TYPE_CHECKING:
    from gpuinfra.review import diff as diff_mod


class ReviewFormat(StrEnum):
    table = "table"
    json = "json"
    markdown = "markdown"


FormatOption = Annotated[ReviewFormat, typer.Option("--format", help="table, json or markdown")]
OutOption = Annotated[
    Path | None,
    typer.Option("--out", parser=parse_out, help="Write to this file instead of standard output"),
]
StackOption = Annotated[str | None, typer.Option("--stack", help=STACK_HELP)]


def _usd(value: float | None) -> str:
    return "lacking" if value is None else f"${value:,.2f}"


def cost_table(doc: dict[str, Any]) -> Table:
    prices = doc["prices"]
    table = Table(
        title=f"Monthly cost estimate: {doc['environment']} ({doc['region']})",
        caption=(
            f"instance prices {prices['instances']['as_of']}, storage prices "
            f"{prices['storage']['as_of']}; {doc['hours_per_month']:g} hours a month"
        ),
    )
    for column in ("category", "item", "at desired", "at max", "note"):
        table.add_column(column, overflow="fold")
    for line in doc["lines"]:
        if line["status"] == "usage":
            desired = maximum = f"usage: ${line['unit_usd']}/{line['unit']}"
        else:
            desired, maximum = _usd(line["monthly_desired_usd"]), _usd(line["monthly_max_usd"])
        table.add_row(line["category"], line["item"], desired, maximum, line["note"])
    table.add_section()
    table.add_row(
        "total", "priced lines", _usd(doc["monthly_desired_usd"]), _usd(doc["monthly_max_usd"]), ""
    )
    return table


def plan_tables(doc: dict[str, Any]) -> list[RenderableType]:
    from gpuinfra.review import plan as plan_mod

    tables: list[RenderableType] = []
    for title, columns, rows in plan_mod.summary_rows(doc):
        if not rows:
            tables.append(Text(f"{title}: none"))
            continue
        table = Table(title=title)
        for column in columns:
            table.add_column(column, overflow="fold")
        for row in rows:
            table.add_row(*row)
        tables.append(table)
    if doc.get("cost"):
        tables.append(cost_table(doc["cost"]))
    return tables


def diff_tables(report: diff_mod.Report) -> list[RenderableType]:
    from gpuinfra.review import diff as diff_mod

    tables: list[RenderableType] = []
    if report.versions.bumped:
        table = Table(title=f"Versions against {report.base}")
        for column in ("component", "old", "new"):
            table.add_column(column)
        for change in report.versions.bumped:
            table.add_row(change.path, str(change.old), str(change.new))
        tables.append(table)
    tables += [warning(w) for w in report.versions.warnings]
    for target in report.targets:
        table = Table(title=f"{target.target}: {target.status}")
        for column in ("section", "what", "property", "old", "new"):
            table.add_column(column, overflow="fold")
        for line in target.errors:
            table.add_row("error", line, "", "", "")
        if target.cost:
            cost = target.cost
            for what, base, head, delta in (
                ("desired", cost.base_desired, cost.head_desired, cost.delta_desired),
                ("max", cost.base_max, cost.head_max, cost.delta_max),
            ):
                moved = diff_mod.signed_usd(delta)
                if not cost.delta_known:
                    moved = f"delta unknown: {cost.unknown_because}; priced lines {moved}"
                table.add_row(
                    "cost", f"monthly at {what} size", "", _usd(base), f"{_usd(head)} ({moved})"
                )
            for line in cost.lacking_added:
                table.add_row("cost", f"now lacking a price: {line}", "", "", "")
            for line in cost.lacking_removed:
                table.add_row("cost", f"no longer lacking a price: {line}", "", "", "")
        for name, section in target.sections.items():
            for key in section.added:
                table.add_row(name, f"+ {key}", "", "", "")
            for key in section.removed:
                table.add_row(name, f"- {key}", "", "", "")
            for item in section.changed:
                for change in item.changes:
                    table.add_row(
                        name,
                        f"~ {item.key}",
                        change.path,
                        str(change.old),
                        str(change.new),
                    )
        # A target with nothing to list (unchanged) is its title alone, not an empty table.
        tables.append(table if table.row_count else Text(f"{target.target}: {target.status}"))
    return tables


def register(app: typer.Typer) -> None:
    """Add ``plan``, ``cost`` and ``diff`` to the `gpuinfra` app."""

    @app.command("plan")
    def plan(
        stack: StackOption = None,
        site: Annotated[
            Path | None,
            typer.Option("--site", parser=parse_site, help="A site inventory directory"),
        ] = None,
        fmt: FormatOption = ReviewFormat.table,
        out: OutOption = None,
        as_of: AsOf = None,
    ) -> None:
        """The desired state of a stack or a site, offline: resources, releases, versions, cost.

        A prod stack or site with a pin past its end of support fails after the plan (exit 1).
        """
        from gpuinfra.cli import prod_support_problems
        from gpuinfra.review import plan as plan_mod

        if stack is not None and site is not None:
            raise UsageError("give exactly one of --stack ENV or --site DIR")
        if stack is not None:
            doc = plan_mod.stack_plan(stack)
        elif site is not None:
            doc = plan_mod.site_plan(site)
        else:
            raise UsageError("give exactly one of --stack ENV or --site DIR")
        if fmt is ReviewFormat.json:
            emit(plan_mod.to_json(doc), out)
        elif fmt is ReviewFormat.markdown:
            emit(plan_mod.render_markdown(doc), out)
        else:
            emit(render_text(plan_tables(doc)), out)
        failed: list[str] = []
        policy = doc.get("policy")
        if policy is not None and not policy["passed"]:
            failed += [f"policy {v['policy']}: {v['message']}" for v in policy["violations"]]
        if stack is not None:
            failed += prod_support_problems(doc["cost"]["environment"], as_of)
        elif site is not None:
            from gpuinfra import site as site_mod

            served = site_mod.load_site(site)
            failed += prod_support_problems(
                served.environment,
                as_of,
                sources=served.driver_sources(),
                containerd_sources=served.containerd_sources(),
            )
        if failed:
            # The plan is shown whole, then the command fails as a check does (exit 1).
            raise CheckFailed(failed)

    @app.command("cost")
    def cost(
        stack: Annotated[str, typer.Option("--stack", help=STACK_HELP)],
        fmt: FormatOption = ReviewFormat.table,
        out: OutOption = None,
    ) -> None:
        """Monthly cost estimate of a stack by line, from the dated price tables."""
        from gpuinfra import config
        from gpuinfra.cli import checks
        from gpuinfra.review import cost as cost_mod
        from gpuinfra.review import plan as plan_mod

        cfg = config.load_stack(stack)
        # A stack config check refuses is not priced: the figures would be for what cannot ship.
        checks.stack_warnings(stack, cfg)
        doc = cost_mod.estimate(cfg).document()
        if fmt is ReviewFormat.json:
            emit(plan_mod.to_json(doc), out)
        elif fmt is ReviewFormat.markdown:
            emit(plan_mod.cost_markdown(doc), out)
        else:
            emit(render_text([cost_table(doc)]), out)

    @app.command("diff")
    def diff(
        base: Annotated[str, typer.Option("--base", help="The git revision to compare against")],
        stack: StackOption = None,
        site: Annotated[
            str | None, typer.Option("--site", help="A site under inventory/ (name or path)")
        ] = None,
        all_targets: Annotated[
            bool, typer.Option("--all", help="Every stack and every site (the default)")
        ] = False,
        fmt: FormatOption = ReviewFormat.table,
        out: OutOption = None,
    ) -> None:
        """What the working tree changes against --base: resources, versions, values, alerts, cost."""
        from gpuinfra import config
        from gpuinfra.review import diff as diff_mod
        from gpuinfra.review import plan as plan_mod

        if sum((stack is not None, site is not None, all_targets)) > 1:
            raise UsageError("give one of --stack ENV, --site NAME or --all")
        only = None
        if stack is not None:
            only = diff_mod.Target("stack", config.check_stack_name(stack))
        elif site is not None:
            name = Path(site).name
            if not name or len(os.fsencode(name)) > 255:
                raise UsageError(
                    f"--site {excerpt(repr(site), 40)}: not a site name (allowed: a directory "
                    "name under inventory/, at most 255 bytes)"
                )
            only = diff_mod.Target("site", name)
        if err.is_terminal:
            # Each plan takes seconds: at a terminal a transient line says how far it is. Naming
            # the spinner draws the line at once: two plans that end together both show.
            with err.status("diff: planning", spinner="line") as status:
                report = diff_mod.diff(
                    base,
                    only=only,
                    on_plan=lambda done, total, what: status.update(
                        Text(f"diff: {done} of {total} plans done ({what})"), spinner="line"
                    ),
                )
        else:
            report = diff_mod.diff(base, only=only)
        if fmt is ReviewFormat.json:
            emit(plan_mod.to_json(report.document()), out)
        elif fmt is ReviewFormat.markdown:
            emit(diff_mod.render_markdown(report), out)
        else:
            emit(render_text(diff_tables(report)), out)
        if report.input_error and not report.versions.warnings:
            # A file of the working tree is wrong: the user's input, exit 2. A bump that breaks
            # a compatibility rule stays a failed check (exit 1): the diff's finding.
            raise InputInvalid(
                f"{t.target}: {line}" for t in report.targets if t.input_error for line in t.errors
            )
        if report.failed:
            raise CheckFailed(f"{t.target}: {line}" for t in report.targets for line in t.errors)
        if report.added_violations:
            # The plan of the change fails the policy pack where the base's did not: what
            # `plan` exits 1 for, so a pull request's diff step fails on it too.
            raise CheckFailed(report.added_violations)

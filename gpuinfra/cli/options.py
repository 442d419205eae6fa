"""Options more than one command takes, parsed and checked as the command line is read.

A value refused here stops the command before it reads a file, prints a line or writes one:
``main`` tells click's usage error in one line, exit 2.
"""

from __future__ import annotations

import datetime as dt
import re
from typing import Annotated

import typer

from gpuinfra.errors import excerpt

_DATE = re.compile(r"\d{4}-\d{2}-\d{2}", re.ASCII)


def parse_date(value: str) -> dt.date:
    """``--as-of``: a calendar date written YYYY-MM-DD (2026-02-30 is not one; nor is ISO's
    week form 2026-W01-1, which ``fromisoformat`` would take)."""
    try:
        if _DATE.fullmatch(value):
            return dt.date.fromisoformat(value)
    except ValueError:
        pass
    raise typer.BadParameter(f"{excerpt(repr(value), 40)} is not a date (allowed: YYYY-MM-DD)")


AsOf = Annotated[
    dt.date | None,
    typer.Option(
        "--as-of",
        parser=parse_date,
        metavar="YYYY-MM-DD",
        help="Judge the support windows on this date (YYYY-MM-DD); default today",
    ),
]

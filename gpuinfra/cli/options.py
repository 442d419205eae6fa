"""Options more than one command takes, parsed and checked as the command line is read.

A value refused here stops the command before it reads a file, prints a line or writes one:
``main`` tells click's usage error in one line, exit 2.
"""

from __future__ import annotations

import datetime as dt
import os
import re
from pathlib import Path
from typing import Annotated, Any

import typer

from gpuinfra.errors import UsageError, excerpt

_DATE = re.compile(r"\d{4}-\d{2}-\d{2}", re.ASCII)
_WHOLE = re.compile(r"-?[0-9]+")

# ``--stack``: a stack is named for its environment, or <environment>-<suffix> (dev-alice).
STACK_HELP = "A stack: dev, staging, prod or <environment>-<suffix> (stacks/Pulumi.<stack>.yaml)"


def parse_date(value: str) -> dt.date:
    """``--as-of``: a calendar date written YYYY-MM-DD (2026-02-30 is not one; nor is ISO's
    week form 2026-W01-1, which ``fromisoformat`` would take)."""
    try:
        if _DATE.fullmatch(value):
            return dt.date.fromisoformat(value)
    except ValueError:
        pass
    raise typer.BadParameter(f"{excerpt(repr(value), 40)} is not a date (allowed: YYYY-MM-DD)")


def parse_whole(value: str | int) -> int:
    """A count or a number option: ASCII digits, a minus sign at most. Python's ``int`` also
    reads ``1_000``, `` 8 `` and other scripts' digits, none of which a command line means.
    (The option's default comes here as it is.)"""
    if isinstance(value, int):
        return value
    if _WHOLE.fullmatch(value):
        return int(value)
    raise typer.BadParameter(
        f"{excerpt(repr(value), 40)} is not a valid integer (allowed: digits, such as 8)"
    )


AsOf = Annotated[
    dt.date | None,
    typer.Option(
        "--as-of",
        parser=parse_date,
        metavar="YYYY-MM-DD",
        help="Judge the support windows on this date (YYYY-MM-DD); default today",
    ),
]


def parse_out_dir(value: str) -> Path:
    """``--out DIR`` of the commands that write a tree of files. An empty value (an unset
    shell variable) would write into the current directory: it is refused."""
    if not value.strip():
        raise typer.BadParameter(
            f"{excerpt(repr(value), 40)} is empty (allowed: a directory, or a path where one "
            "can be created)"
        )
    from gpuinfra.addons.output import check_out

    path = Path(value)
    refuse_input("--out", path)
    check_out(path)
    return path


def given_path(value: str, allowed: str) -> Path:
    """A path option's value. An empty one (an unset shell variable) would be the current
    directory, read without a word: it is refused, saying what is ``allowed``."""
    if not value.strip():
        raise typer.BadParameter(f"{excerpt(repr(value), 40)} is empty (allowed: {allowed})")
    return Path(value)


def parse_site(value: str) -> Path:
    """``--site DIR``, not empty. A lab's inventory directory before ``lab up`` has written
    its hosts is told as such, with the command that starts them."""
    path = given_path(value, "a site inventory directory, e.g. inventory/example")
    from gpuinfra import lab

    if (unstarted := lab.unstarted_lab(path)) is not None:
        raise UsageError(f"--site {excerpt(value, 60)}: {lab.not_up(unstarted)}")
    return path


# What gpuinfra and Ansible read from a repository: a command's output is never written there.
INPUT_FILES = ("versions.yaml", "Pulumi.yaml", "ansible.cfg", "pyproject.toml", "uv.lock")
INPUT_DIRS = ("stacks", "inventory", "roles", "playbooks", "components", "policies", "gpuinfra")


def refuse_input(option: str, path: Path) -> None:
    """Refuse an output path that is one of the repository's inputs, or inside a folder of
    them: a report written over a stack file, or a render written into a site's group_vars,
    would be read back as configuration."""
    from gpuinfra.paths import repo_root

    try:
        root = repo_root()
        # As written and with its links followed: a linked roles/ is the repository's still.
        places = [
            (Path(os.path.abspath(path)), Path(os.path.abspath(root))),
            (path.resolve(), root.resolve()),
        ]
    except (UsageError, OSError):
        return  # outside every repository, or a path the system refuses (told when written)
    inside = next((p.relative_to(r) for p, r in places if p.is_relative_to(r)), None)
    if inside is None:
        return
    top = inside.parts[0] if inside.parts else ""
    if (inside.parts == (top,) and top in INPUT_FILES) or top in INPUT_DIRS:
        what = (
            top if top in INPUT_FILES else f"{top}/" if inside.parts == (top,) else f"under {top}/"
        )
        raise UsageError(
            f"{option} {excerpt(str(path), 80)}: {what}, which gpuinfra reads as input (allowed: "
            f"a path outside {', '.join(f'{d}/' for d in INPUT_DIRS)} and the files "
            f"{', '.join(INPUT_FILES)})"
        )


def parse_out(value: str) -> Path:
    """``--out FILE`` of the review commands, which write one document."""
    path = given_path(value, "a file path, e.g. build/plan.json")
    refuse_input("--out", path)
    return path


def parse_out_file(value: str) -> Path:
    """An option naming one file a command writes when it is done (``converge --report-json``):
    refused before the command starts, so that a long run does not end on a path it cannot
    write."""
    allowed = "allowed: a file path in an existing, writable directory"
    shown = excerpt(repr(value), 60)
    if not value.strip():
        raise typer.BadParameter(f"{shown} is empty ({allowed})")
    path = Path(value)
    refuse_input("--report-json", path)
    if path.is_dir():
        raise typer.BadParameter(f"{shown} is a directory ({allowed})")
    folder = path.parent
    if not folder.is_dir():
        what = "is not a directory" if folder.exists() else "does not exist"
        raise typer.BadParameter(f"{shown}: {excerpt(str(folder), 60)} {what} ({allowed})")
    if not os.access(path if path.exists() else folder, os.W_OK):
        raise typer.BadParameter(f"{shown} cannot be written: permission denied ({allowed})")
    return path


def vault_password_problem(value: str) -> str:
    """Why ``value`` names no vault password ansible-playbook can read: not a readable file
    holding one, nor a script that prints it ('' when it does)."""
    allowed = "allowed: a file holding the vault password, or an executable that prints it"
    shown = excerpt(repr(value), 60)
    path = Path(value)
    if not value.strip() or not path.exists():
        return f"{shown}: no such file ({allowed})"
    if path.is_dir():
        return f"{shown} is a directory ({allowed})"
    if not os.access(path, os.R_OK):
        return f"{shown} cannot be read: permission denied ({allowed})"
    if not os.access(path, os.X_OK):
        try:
            empty = not path.read_bytes().strip()
        except OSError as exc:
            return f"{shown} cannot be read: {exc.strerror} ({allowed})"
        if empty:
            return f"{shown} is empty ({allowed})"
    return ""


def parse_vault_password_file(value: str) -> Path:
    """``--vault-password-file``, refused before any host is touched."""
    if why := vault_password_problem(value):
        raise typer.BadParameter(why)
    return Path(value)


def out_dir(help_text: str) -> Any:
    """The ``--out DIR`` option, parsed and checked by parse_out_dir."""
    return typer.Option("--out", parser=parse_out_dir, metavar="DIR", help=help_text)

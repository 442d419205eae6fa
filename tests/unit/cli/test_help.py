from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from gpuinfra.cli import app

GROUPS = sorted(
    name
    for name, command in typer.main.get_command(app).commands.items()  # type: ignore[attr-defined]
    if hasattr(command, "commands")
)


@pytest.mark.parametrize("group", ["", *GROUPS])
def test_each_command_is_one_line_in_its_groups_listing(group: str) -> None:
    # A terminal wide enough for any summary: a second line in a row is a broken sentence.
    argv = [group, "--help"] if group else ["--help"]
    result = CliRunner().invoke(app, argv, env={"COLUMNS": "400"})
    assert result.exit_code == 0, result.output
    panel = result.output.split("Commands")[1].splitlines()[1:]
    rows = [line.strip("│ ").strip() for line in panel if line.startswith("│")]
    assert rows, result.output
    continued = [line for line in panel if line.startswith("│" + " " * 8)]
    assert not continued, result.output


def _commands(command: Any, path: list[str]) -> Iterator[tuple[list[str], Any]]:
    yield path, command
    for name, sub in getattr(command, "commands", {}).items():
        yield from _commands(sub, [*path, name])


@pytest.mark.parametrize(
    "path",
    [path for path, _ in _commands(typer.main.get_command(app), [])],
    ids=lambda path: " ".join(path) or "gpuinfra",
)
def test_help_shows_bracketed_text_as_written(path: list[str]) -> None:
    # The help is rich markup: "[env X; default Y]" would be read as a style and dropped.
    command = typer.main.get_command(app)
    for name in path:
        command = command.commands[name]  # type: ignore[attr-defined]
    texts = [command.help or "", *(getattr(p, "help", None) or "" for p in command.params)]
    written = [m for text in texts for m in re.findall(r"\[[^\]\n]*\]", text)]
    result = CliRunner().invoke(app, [*path, "--help"], env={"COLUMNS": "1000"})
    shown = " ".join(result.output.replace("│", " ").split())
    assert [m for m in written if " ".join(m.split()) not in shown] == []


COMMANDS = [path for path, command in _commands(typer.main.get_command(app), [])]


@pytest.mark.parametrize("path", COMMANDS, ids=lambda path: " ".join(path) or "gpuinfra")
def test_a_flag_shows_no_value_type_and_an_option_shows_its_own(path: list[str]) -> None:
    """``--all`` takes no value: its row must not read ``--all <bool>``; ``--base`` takes a
    string and says so."""
    result = CliRunner().invoke(app, [*path, "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "<bool>" not in result.output
    if path == ["diff"]:
        assert re.search(r"--base\s+<str>", result.output), result.output

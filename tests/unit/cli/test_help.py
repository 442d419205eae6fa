from __future__ import annotations

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

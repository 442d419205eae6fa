"""The CLI writes through one module: a command that prints on its own bypasses widths, the
error format and the JSON/markdown documents' exact bytes."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.conftest import ROOT

PACKAGE = ROOT / "gpuinfra"
CONSOLE = PACKAGE / "cli" / "console.py"


def _writers(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")
        owner = (
            func.value.id
            if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name)
            else ""
        )
        if (
            (name == "print" and isinstance(func, ast.Name))
            or name == "Console"
            or (owner in {"typer", "click", "sys"} and name in {"echo", "secho"})
        ):
            found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {ast.unparse(func)}")
    return found


def test_only_the_console_module_creates_consoles_or_prints() -> None:
    offenders = [
        line for path in sorted(PACKAGE.rglob("*.py")) if path != CONSOLE for line in _writers(path)
    ]
    assert offenders == []

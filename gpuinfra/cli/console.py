"""The one way the CLI writes: ``out`` for results on stdout, ``err`` for errors on stderr.

Commands print rich renderables with ``out.print``, plain lines with ``say`` and whole
documents (JSON, markdown, tables rendered to text) with ``emit``; nothing else writes.
"""

from __future__ import annotations

import io
import shutil
from pathlib import Path

from rich.console import Console, RenderableType

from gpuinfra.errors import UsageError, excerpt

# Pipes and CI logs get a wide table rather than rich's 80-column default.
WIDTH = max(shutil.get_terminal_size((160, 24)).columns, 120)
out = Console(width=WIDTH)
err = Console(stderr=True, soft_wrap=True)


def say(line: str) -> None:
    """One plain line: no markup, no highlighting, never wrapped (paths stay whole)."""
    out.print(line, markup=False, highlight=False, soft_wrap=True)


def emit(text: str, path: Path | None = None) -> None:
    """A document exactly as given, on stdout or into ``path``."""
    if path is None:
        out.file.write(text)
        out.file.flush()
        return
    try:
        path.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"--out {excerpt(str(path), 80)}: cannot write: {exc.strerror}") from None


def render_text(renderables: list[RenderableType]) -> str:
    """Tables and text as plain characters, for a file or a pipe."""
    buffer = io.StringIO()
    console = Console(file=buffer, width=WIDTH, force_terminal=False, color_system=None)
    for item in renderables:
        console.print(item)
    return buffer.getvalue()

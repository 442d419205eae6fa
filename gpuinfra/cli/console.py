"""The one way the CLI writes: ``out`` for results on stdout, ``err`` for errors on stderr.

Commands print rich renderables with ``out.print``, plain lines with ``say``, warnings with
``warn`` and whole documents (JSON, markdown, tables rendered to text) with ``emit``; nothing
else writes. A line (an error, a warning) is one line whatever the terminal's width. CI
keeps what a command prints, so every character on the way out loses its URL logins
(``https://<redacted>@mirror/``), whichever command wrote it: ``versions show``, an error line,
a traceback.
"""

from __future__ import annotations

import io
import shutil
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TextIO, cast

from rich.console import Console, RenderableType
from rich.file_proxy import FileProxy
from rich.text import Text

from gpuinfra import secrets
from gpuinfra.errors import UsageError, excerpt


class OutputClosed(Exception):
    """The reader of stdout or stderr went away: a pipe into ``head`` that has read enough."""


class _Redacted(io.TextIOBase):
    """Writes to the process's current stdout or stderr, without URL userinfo."""

    def __init__(self, name: str) -> None:
        super().__init__()
        self._name = name

    @property
    def _target(self) -> TextIO:
        target: TextIO = getattr(sys, self._name)
        # While a live view runs (converge, diff at a terminal), rich puts a proxy in sys.stdout
        # and sys.stderr that prints through its console: writing there from the console would
        # come back here, for good.
        if isinstance(target, FileProxy):
            return cast(TextIO, target.rich_proxied_file)
        return target

    def write(self, text: str) -> int:
        shown = secrets.redact_text(text)
        if not shown.isascii():
            # A name made of bytes that are no UTF-8 (an argument, a file name) holds
            # surrogates, which no stream encodes: they are written as \udcff.
            shown = shown.encode("utf-8", "backslashreplace").decode("utf-8")
        try:
            self._target.write(shown)
        except BrokenPipeError:
            raise OutputClosed from None
        return len(text)

    def flush(self) -> None:
        try:
            self._target.flush()
        except BrokenPipeError:
            raise OutputClosed from None

    def isatty(self) -> bool:
        return self._target.isatty()

    def fileno(self) -> int:
        return self._target.fileno()

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return getattr(self._target, "encoding", None) or "utf-8"


# Pipes and CI logs get a wide table rather than rich's 80-column default.
WIDTH = max(shutil.get_terminal_size((160, 24)).columns, 120)
# No emoji codes: a user's key or host name such as "gpuinfra:x:" is printed as written.
out = Console(file=cast(TextIO, _Redacted("stdout")), width=WIDTH, emoji=False)
err = Console(file=cast(TextIO, _Redacted("stderr")), soft_wrap=True, emoji=False)


def say(line: str) -> None:
    """One plain line: no markup, no highlighting, never wrapped (paths stay whole)."""
    out.print(line, markup=False, highlight=False, soft_wrap=True)


def warning(line: str) -> Text:
    """``warning: <line>``, the label styled and the line as it is (never read as markup)."""
    return Text.assemble(("warning:", "bold yellow"), " ", line)


def warn(line: str, *, stderr: bool = False) -> None:
    """One warning on stdout (on stderr where stdout carries a document such as CSV or JSON):
    one line, never wrapped at the terminal's width."""
    (err if stderr else out).print(warning(line), soft_wrap=True)


def emit(text: str, path: Path | None = None) -> None:
    """A document exactly as given, on stdout or into ``path``."""
    if path is None:
        out.file.write(text)
        out.file.flush()
        return
    try:
        path.write_text(secrets.redact_text(text), encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"--out {excerpt(str(path), 80)}: cannot write: {exc.strerror}") from None


# How long a wait goes unremarked: most servers answer well within it.
WAIT_SHOWN_S = 3.0


@contextmanager
def waiting(what: str) -> Iterator[None]:
    """While the block runs: at a terminal, once it has taken WAIT_SHOWN_S, a line on stderr,
    "<what> … 12 s", counting, erased when the block ends; elsewhere (a pipe, a CI log) nothing.

    A server that dribbles its answer may hold the command up to its bound (a minute): the
    person at the terminal sees that it is waiting, and on what."""
    if not err.is_terminal:
        yield
        return
    done = threading.Event()
    started = time.monotonic()

    def line() -> Text:
        return Text(f"{what} … {time.monotonic() - started:.0f} s")

    def show() -> None:
        if done.wait(WAIT_SHOWN_S):
            return
        with err.status(line(), spinner="line") as status:
            while not done.wait(1):
                status.update(line())

    thread = threading.Thread(target=show, name="waiting", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        # The line is gone before the command prints what it read.
        thread.join()


def render_text(renderables: list[RenderableType]) -> str:
    """Tables and text as plain characters, for a file or a pipe; a line of text (a warning)
    stays one line."""
    buffer = io.StringIO()
    console = Console(
        file=buffer, width=WIDTH, force_terminal=False, color_system=None, emoji=False
    )
    for item in renderables:
        console.print(item, soft_wrap=isinstance(item, str | Text))
    return buffer.getvalue()

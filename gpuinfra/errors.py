"""Typed errors that carry the user-facing message and the exit code.

The library raises; only the CLI prints and exits. Every mistake a user can make in a file they
edit (versions.yaml, a stack file, an inventory) becomes a ``ConfigError``: one line per problem,
each naming the file, the key path and what is allowed.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from gpuinfra import secrets

# Exit codes, one meaning each (the README's "Exit codes" lists them):
EXIT_CHECK_FAILED = 1  # a check or a run found something wrong: versions rules, a failed host
EXIT_USAGE = 2  # the user's input: a file they edit, an argument, the directory they stand in
EXIT_ENVIRONMENT = 3  # this machine lacks what the command needs: a tool, a service, an answer
EXIT_INTERNAL = 70  # a defect in gpuinfra itself (sysexits' EX_SOFTWARE): the traceback is shown
EXIT_INTERRUPTED = 130  # Ctrl-C or SIGTERM, as a shell reports SIGINT
EXIT_OUTPUT_CLOSED = 141  # the reader of the output went away (`| head`), as for SIGPIPE


# A message is one line a person reads whole: values are quoted as excerpts, and a line that
# would still be longer is cut here.
MAX_LINE = 300
# The key path's share of it.
MAX_PATH = 100


def excerpt(text: str, limit: int = 60) -> str:
    """``text`` on one line, cut in the middle to at most ``limit`` characters."""
    flat = " ".join(str(text).split()) if "\n" in str(text) else str(text)
    if len(flat) <= limit:
        return flat
    head = (limit - 5) * 2 // 3
    tail = limit - 5 - head
    return f"{flat[:head]} ... {flat[-tail:]}" if tail > 0 else flat[:limit]


# A word of a problem's message longer than this (a value as given, quoted) is cut in its
# middle when the line is too long: what is allowed, at the end of the line, stays on it.
MAX_WORD = 60


def shortened(text: str, limit: int) -> str:
    """``text`` on one line; when longer than ``limit``, each overlong word is cut first."""
    flat = " ".join(text.split())
    if len(flat) <= limit:
        return flat
    return " ".join(excerpt(word, MAX_WORD) for word in flat.split(" "))


def one_line(text: str) -> str:
    """A message as one line of at most MAX_LINE characters."""
    flat = " ".join(text.split())
    return flat if len(flat) <= MAX_LINE else flat[: MAX_LINE - 3] + "..."


@dataclass(frozen=True)
class Problem:
    """One thing wrong with one key of one file."""

    file: str
    path: str
    message: str

    def __str__(self) -> str:
        # A long key in the path is cut in the middle, so that what is wrong and what is
        # allowed still fit on the line.
        where = f"{self.file}: {excerpt(self.path, MAX_PATH)}" if self.path else self.file
        message = secrets.redact_message(self.path, self.message)
        return one_line(f"{where}: {shortened(message, MAX_LINE - len(where) - 2)}")


class GpuinfraError(Exception):
    """Base of every error the CLI turns into a message and an exit code."""

    exit_code = EXIT_CHECK_FAILED

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def lines(self) -> list[str]:
        return [self.message]


class ConfigError(GpuinfraError):
    """A user mistake in a file: unknown key, wrong type, bad value. Exit code 2."""

    exit_code = EXIT_USAGE

    def __init__(self, problems: Iterable[Problem]) -> None:
        self.problems = list(problems)
        if not self.problems:
            raise ValueError("ConfigError needs at least one problem")
        super().__init__("\n".join(str(p) for p in self.problems))

    def lines(self) -> list[str]:
        return [str(p) for p in self.problems]


class CheckFailed(GpuinfraError):
    """A check ran and found problems (versions check, node check). Exit code 1."""

    exit_code = EXIT_CHECK_FAILED

    def __init__(self, problems: Iterable[str]) -> None:
        self.problems = list(problems)
        super().__init__("\n".join(self.problems))

    def lines(self) -> list[str]:
        return list(self.problems)


class InputInvalid(CheckFailed):
    """Lines about the user's input that come as text, not as Problems (a subprocess's). Exit 2."""

    exit_code = EXIT_USAGE


class SourcesUnread(CheckFailed):
    """Services a command could not read, a line each, after it showed what it read from the
    others. Exit code 3."""

    exit_code = EXIT_ENVIRONMENT


class UsageError(GpuinfraError):
    """A command asked for something that does not exist (an unknown stack, a missing site)."""

    exit_code = EXIT_USAGE


class ToolError(GpuinfraError):
    """An external tool or service the command needs failed or is missing (podman, git, a mirror)."""

    exit_code = EXIT_ENVIRONMENT


class Interrupted(GpuinfraError):
    """The user stopped a run (Ctrl-C, SIGTERM) and it was stopped, with what it had started."""

    exit_code = EXIT_INTERRUPTED

"""Ending a process this program started, with what it started in turn."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from typing import Any


def end(proc: subprocess.Popen[Any], *, group: bool = True) -> None:
    """Kill ``proc`` (with its process group, when it leads a session of its own) and reap it.

    Its pipes are closed, not read: a process it started in another session may hold them open
    for good, and reading them would wait for that process too.
    """
    with contextlib.suppress(ProcessLookupError):
        if group:
            os.killpg(proc.pid, signal.SIGKILL)
        else:
            proc.kill()
    for pipe in (proc.stdin, proc.stdout, proc.stderr):
        if pipe is not None:
            pipe.close()
    proc.wait()

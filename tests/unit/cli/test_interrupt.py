"""SIGTERM ends a command as Ctrl-C does: exit 130, and what it set up is taken down.

``gpuinfra diff`` checks the base out in a git worktree under /tmp; stopped while the plans run,
it must end them, remove the worktree and leave git listing none. The repository here carries a
stand-in ``gpuinfra.review`` that never finishes planning (both sides run the checkout's own
code), so the signal always comes while the plans run.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.unit.review.conftest import stand_in_repo, worktrees

SLOW_PLANNER = """\
import os, pathlib, sys, time
started = pathlib.Path(os.environ["GPUINFRA_TEST_STARTED"])
(started / str(os.getpid())).write_text(" ".join(sys.argv[1:]))
time.sleep(300)
"""


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return stand_in_repo(tmp_path / "repo", SLOW_PLANNER, envs=("dev", "prod"))


def _ctrl_c_as_at_a_terminal() -> None:
    """Ctrl-C's default in the command, as a terminal gives it. A test run started in the
    background by a shell without job control inherits SIGINT ignored, and Python then leaves it
    ignored: the command would rightly not see the SIGINT this test sends."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_an_interrupted_diff_exits_130_and_leaves_no_worktree(
    signum: int, repo: Path, tmp_path: Path
) -> None:
    started = tmp_path / "started"
    started.mkdir()
    elsewhere = tmp_path / "elsewhere"  # not the repository: its gpuinfra is the stand-in
    elsewhere.mkdir()
    env = {**os.environ, "GPUINFRA_ROOT": str(repo), "GPUINFRA_TEST_STARTED": str(started)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpuinfra", "diff", "--base", "HEAD", "--all"],
        cwd=elsewhere,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=_ctrl_c_as_at_a_terminal,
    )
    planners: list[int] = []
    try:
        deadline = time.monotonic() + 60
        while len(list(started.iterdir())) < 2:
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the plans never started"
            time.sleep(0.1)
        planners = [int(p.name) for p in started.iterdir()]
        (base,) = [w for w in worktrees(repo) if w != str(repo)]
        assert Path(base).is_dir()
        proc.send_signal(signum)
        stdout, stderr = proc.communicate(timeout=30)
        assert proc.returncode == 130, stderr
        assert stderr.strip().splitlines()[-1] == "interrupted"
        assert "Traceback" not in stderr
        assert stdout == ""
        assert worktrees(repo) == [str(repo)]
        assert not Path(base).exists()
        assert not Path(base).parent.exists(), "the temporary directory stayed"
        assert [pid for pid in planners if _alive(pid)] == [], "a plan outlived the interrupt"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
        for pid in planners:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)

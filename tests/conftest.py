"""Shared fixtures: the repository and a way to run the real CLI."""

from __future__ import annotations

import os
import pty
import random
import re
import select
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from gpuinfra import support

ROOT = Path(__file__).resolve().parent.parent

# The day the embedded support table was written, when every pin a prod stack or site runs was
# in support. A test that plans or checks prod for another reason passes it as --as-of, so that
# a pin reaching its end of support on the calendar fails the prod check, not that test.
SUPPORT_TABLE_DAY = str(support.table()["as_of"])


@dataclass
class Result:
    code: int
    stdout: str
    stderr: str


def user_repo(root: Path, monkeypatch: pytest.MonkeyPatch, *, site: bool = False) -> Path:
    """A repository at ``root`` for a command to run in: the files a user edits (the pins, the
    stacks, the limits and, with ``site``, the example site) copied, what the commands only read
    linked. The CLI runs on it (``GPUINFRA_ROOT`` and the working directory)."""
    root.mkdir()
    for name in ("versions.yaml", "Pulumi.yaml"):
        shutil.copy(ROOT / name, root / name)
    shutil.copytree(ROOT / "stacks", root / "stacks", ignore=shutil.ignore_patterns("__pycache__"))
    if site:
        shutil.copytree(ROOT / "inventory" / "example", root / "inventory" / "example")
    (root / "policies").mkdir()
    shutil.copy(ROOT / "policies" / "limits.yaml", root / "policies" / "limits.yaml")
    for name in ("roles", "playbooks", "components"):
        (root / name).symlink_to(ROOT / name)
    monkeypatch.setenv("GPUINFRA_ROOT", str(root))
    monkeypatch.chdir(root)
    return root


def run_main(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """Run ``gpuinfra`` in this process (its entry point, exit code included), for tests that set
    the repository with monkeypatch: exit code, stdout and stderr; what was printed before is
    dropped."""
    from gpuinfra import cli

    capsys.readouterr()
    code = 0
    try:
        cli.main(list(args))
    except SystemExit as done:
        code = int(done.code or 0)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def doctor_rows(table: str) -> list[tuple[str, str, str]]:
    """Check, subject and status of each row of doctor's table (a detail may fold onto more
    lines, which have no status)."""
    cells = [
        [cell.strip() for cell in line.split("│")[1:-1]]
        for line in table.splitlines()
        if line.startswith("│")
    ]
    return [(check, subject, status) for check, subject, status, _ in cells if status]


def example_site_with_full_l4_quota(tmp_path: Path) -> Path:
    """inventory/example copied, its Kueue L4 flavor granting all eight of the L4 host's GPUs
    while Triton's replica holds one outside Kueue: a site that draws a `quotas` warning."""
    site = tmp_path / "site"
    shutil.copytree(ROOT / "inventory" / "example", site)
    kueue = site / "group_vars" / "all" / "kueue.yml"
    text = kueue.read_text()
    assert "    gpus: 7\n" in text, "the example's L4 flavor changed: update this helper"
    kueue.write_text(text.replace("    gpus: 7\n", "    gpus: 8\n"))
    return site


def running(pid: int) -> bool:
    """Whether ``pid`` still runs: an ended process not yet reaped by its parent does not."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


def left_running(pids_file: Path, grace: float = 5.0) -> list[int]:
    """The processes listed in ``pids_file`` (numbers, whitespace apart) still running after
    ``grace`` seconds. A process killed with SIGKILL ends on its own time: under load, the kernel
    may still be tearing it down when the killer returns. One that was never killed (the tests'
    helpers sleep for minutes) outlasts the grace."""
    pids = [int(pid) for pid in pids_file.read_text().split()]
    deadline = time.monotonic() + grace
    while (left := [pid for pid in pids if running(pid)]) and time.monotonic() < deadline:
        time.sleep(0.05)
    return left


def run_cli(*args: str, root: Path | None = None, cwd: Path | None = None) -> Result:
    """Run ``gpuinfra`` as a user would, in a child process."""
    env = dict(os.environ)
    if root is not None:
        env["GPUINFRA_ROOT"] = str(root)
    proc = subprocess.run(
        [sys.executable, "-m", "gpuinfra", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd or ROOT,
        timeout=600,
    )
    return Result(proc.returncode, proc.stdout, proc.stderr)


def run_at_terminal(*args: str, root: Path, cwd: Path, timeout: float = 120) -> Result:
    """Run ``gpuinfra`` with stdout and stderr on a terminal (a pty), as a person at a shell
    does; ``stdout`` is what the terminal received, without its control sequences (colours,
    cursor moves) and carriage returns. A command still running after ``timeout``
    seconds is killed with its process group, and its code is -9."""
    leader, follower = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpuinfra", *args],
        stdin=subprocess.DEVNULL,
        stdout=follower,
        stderr=follower,
        cwd=cwd,
        env={**os.environ, "GPUINFRA_ROOT": str(root), "TERM": "xterm", "COLUMNS": "200"},
        start_new_session=True,
    )
    os.close(follower)
    seen = bytearray()
    deadline = time.monotonic() + timeout
    try:
        while (left := deadline - time.monotonic()) > 0:
            if not select.select([leader], [], [], left)[0]:
                break
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # every writer has closed the terminal
                break
            if not chunk:
                break
            seen += chunk
        if proc.poll() is None and time.monotonic() >= deadline:
            os.killpg(proc.pid, signal.SIGKILL)
        code = proc.wait(timeout=30)
    finally:
        os.close(leader)
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]|\r", "", seen.decode("utf-8", "replace"))
    return Result(code, text, "")


@pytest.fixture
def cli():
    return run_cli


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return ROOT


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A loopback port that takes connections and never answers: the kernel accepts them into
    the listen backlog and nothing reads. Closing it at the end resets them, so a client left
    waiting on one ends too."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        yield listener.getsockname()[1]


@pytest.fixture
def closed_port() -> Iterator[int]:
    """A loopback port where connections are refused for the whole test.

    The socket stays bound and never listens: a port merely found free and let go can be
    taken by another test's server before this test connects to it.
    """
    with socket.socket() as sock:
        # Below 32768, so that it is a port the lab's apt proxy could have (lab.PROXY_PORT_MAX).
        for port in range(random.randrange(30000, 32000), 32768):
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            break
        else:
            pytest.fail("no free loopback port in 30000-32767")
        yield port

"""The container toolkit's waits for containerd and Docker after a restart end, whatever the
daemon does: each try is bounded, and a try that runs out is retried like a refused one."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import left_running

from .conftest import ROOT, run_playbook_here

HANDLERS = ROOT / "roles" / "nvidia_container_toolkit" / "handlers" / "main.yml"
# The first call hangs, holding the connection as a stuck daemon would; the second answers.
DAEMON_CLIENT = """#!/bin/sh
echo $$ >> {pids}
if [ ! -e {tried} ]; then
  : > {tried}
  exec sleep 300
fi
echo answered
"""


def wait_task(name: str, retries: int) -> dict[str, Any]:
    """The role's handler ``name`` as a plain task: no listen or when, ``retries`` tries more."""
    (task,) = [h for h in yaml.safe_load(HANDLERS.read_text()) if h["name"] == name]
    task = {k: v for k, v in task.items() if k not in ("listen", "when")}
    return {**task, "retries": retries, "delay": 0}


@pytest.mark.parametrize(
    ("handler", "client"),
    [("Wait until containerd answers", "ctr"), ("Wait until Docker answers", "docker")],
)
@pytest.mark.parametrize("retries", [0, 1], ids=["no-retry", "one-retry"])
def test_a_daemon_that_never_answers_ends_the_try_and_the_next_one_counts(
    tmp_path: Path, handler: str, client: str, retries: int
) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    pids = tmp_path / "pids"
    fake = bin_dir / client
    fake.write_text(DAEMON_CLIENT.format(pids=pids, tried=tmp_path / "tried"))
    fake.chmod(0o755)
    playbook = tmp_path / "play.yml"
    play = {
        "hosts": "localhost",
        "connection": "local",
        "gather_facts": False,
        "environment": {"PATH": f"{bin_dir}:/usr/sbin:/usr/bin:/sbin:/bin"},
        "tasks": [wait_task(handler, retries)],
    }
    playbook.write_text(yaml.safe_dump([play]))
    started = time.monotonic()
    result = run_playbook_here(
        tmp_path, "-i", "localhost,", str(playbook), env={"ANSIBLE_STDOUT_CALLBACK": "json"}
    )
    took = time.monotonic() - started
    (task,) = json.loads(result.stdout)["plays"][0]["tasks"]
    outcome = task["hosts"]["localhost"]
    # One try of 10 s at most, plus Ansible's own start.
    assert took < 30, took
    if retries:
        assert result.returncode == 0, outcome
        assert outcome["stdout"] == "answered"
    else:
        assert result.returncode == 2
        assert outcome["failed"] is True
        assert outcome["rc"] == 124
    assert left_running(pids) == []

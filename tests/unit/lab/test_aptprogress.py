"""The live view's line for a host's package transaction, from real polls of a lab host."""

from __future__ import annotations

import pytest

from gpuinfra.lab import aptprogress, runner

WAITING = (
    " <- http:102%20Status%0aMessage:%20Waiting%20for%20headers%0aURI:%20"
    "http://deb.debian.org/debian/dists/bookworm/InRelease"
)


def poll(phase: str, status: str, waiting: str = "", finished: str = "0") -> str:
    return f"phase={phase}\nstatus={status}\nwaiting={waiting}\nfinished={finished}\n"


@pytest.mark.parametrize(
    ("stdout", "line"),
    [
        (
            poll("update", "dlstatus:5:0.0000:Retrieving file 5 of 13", WAITING),
            "reading the indexes, file 5 of 13; Waiting for headers: "
            "http://deb.debian.org/debian/dists/bookworm/InRelease",
        ),
        (poll("update", ""), "reading the indexes"),
        (poll("install", ""), "resolving the packages"),
        (
            poll("install", "dlstatus:2:45.3224:Retrieving file 2 of 3"),
            "downloading, file 2 of 3 (45%)",
        ),
        (
            poll("install", "pmstatus:libjq1:23.0769:Unpacking libjq1 (amd64)"),
            "installing: Unpacking libjq1 (amd64) (23%)",
        ),
        (
            poll("install", "pmstatus:dpkg-exec:46.1538:Running dpkg"),
            "installing: Running dpkg (46%)",
        ),
        (
            poll("install", "pmerror:/tmp/x.deb:50.0000:trying to overwrite '/usr/bin/x'"),
            "dpkg: trying to overwrite '/usr/bin/x'",
        ),
    ],
)
def test_a_poll_becomes_one_line(stdout: str, line: str) -> None:
    assert aptprogress.describe(stdout) == line


def test_other_output_is_not_a_poll() -> None:
    assert aptprogress.describe("") is None
    assert aptprogress.describe("dpkg's lock is held by another package run") is None
    assert aptprogress.describe("status=dlstatus:1:0:Retrieving file 1 of 1") is None


def test_a_method_status_without_uri_keeps_its_message() -> None:
    assert aptprogress.waiting_for(" <- http:102%20Status%0aMessage:%20Connecting") == "Connecting"
    assert aptprogress.waiting_for("") == ""


def test_retries_show_apt_progress_or_the_try() -> None:
    events = [
        {"event": "runner_on_start", "event_data": {"host": "gpu-1", "task": "Packages | wait"}},
        {
            "event": "runner_retry",
            "event_data": {
                "host": "gpu-1",
                "res": {"stdout": poll("install", "dlstatus:2:45.3224:Retrieving file 2 of 3")},
            },
        },
        {
            "event": "runner_retry",
            "event_data": {"host": "gpu-2", "res": {"attempts": 3, "retries": 121, "rc": 75}},
        },
    ]
    progress = runner.Progress()
    for event in events:
        progress.feed(event)
    assert progress.hosts["gpu-1"].progress == "downloading, file 2 of 3 (45%)"
    assert progress.hosts["gpu-2"].progress == "try 3 of 121"
    progress.feed({"event": "runner_on_ok", "event_data": {"host": "gpu-1", "res": {}}})
    assert progress.hosts["gpu-1"].progress == ""

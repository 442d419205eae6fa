"""A server URL with ``user:password@`` reaches the server with Basic authorization, and the
password appears in no message."""

from __future__ import annotations

import base64
import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from gpuinfra.ops import http
from tests import servers
from tests.conftest import doctor_rows, run_cli, run_main

USER, PASSWORD = "ops", "s3cret:with@odd"  # characters a URL must escape
QUOTED = "ops:s3cret%3Awith%40odd"


@pytest.fixture
def guarded_alertmanager() -> Iterator[tuple[int, list[str]]]:
    """An Alertmanager stand-in on loopback that answers only with the right Basic credentials:
    its port and the Authorization headers it saw."""
    seen: list[str] = []
    expected = "Basic " + base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            seen.append(self.headers.get("Authorization", ""))
            ok = seen[-1] == expected and self.path.startswith("/api/v2/alerts?")
            body = json.dumps([] if ok else {"error": "unauthorized"}).encode()
            self.send_response(200 if ok else 401)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            del format, args

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        yield httpd.server_address[1], seen
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_credentials_in_the_url_become_basic_authorization(
    guarded_alertmanager: tuple[int, list[str]],
) -> None:
    port, seen = guarded_alertmanager
    result = run_cli("doctor", "--alertmanager", f"http://{QUOTED}@127.0.0.1:{port}")
    assert result.code == 0, result.stdout + result.stderr
    assert "no critical or warning alert firing" in result.stdout
    assert len(seen) == 1 and seen[0].startswith("Basic ")


def test_wrong_credentials_fail_without_showing_the_password(
    guarded_alertmanager: tuple[int, list[str]],
) -> None:
    port, _seen = guarded_alertmanager
    result = run_cli("doctor", "--alertmanager", f"http://ops:wrong-pass@127.0.0.1:{port}")
    output = result.stdout + result.stderr
    assert result.code != 0
    assert "HTTP 401" in output and f"http://127.0.0.1:{port}/api/v2/alerts" in output
    assert "wrong-pass" not in output


def test_a_bad_url_is_named_without_its_password() -> None:
    result = run_cli("doctor", "--alertmanager", "ftp://ops:s3cret@127.0.0.1:1")
    assert result.code == 2
    (line,) = (result.stdout + result.stderr).splitlines()
    assert line == "error: --alertmanager 'ftp://127.0.0.1:1': not an http(s) URL " + (
        "(e.g. http://127.0.0.1:9090; ASCII, no query or fragment)"
    )


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("http://[::1", "'http://[::1'"),
        ("http://[zz]:1", "'http://[zz]:1'"),
        ("http://127.0.0.1:1?x=1", "'http://127.0.0.1:1?x=1'"),
        ("http://127.0.0.1:1/#top", "'http://127.0.0.1:1/#top'"),
        ("http://h\udcff\udcfe:1", "'http://h\\udcff\\udcfe:1'"),
        ("http://", "'http://'"),
    ],
)
def test_a_url_that_cannot_be_asked_is_one_line_and_exit_2(
    url: str, shown: str, capsys: pytest.CaptureFixture[str]
) -> None:
    for argv in (
        ("report", "gpu-hours", "--prometheus", url),
        ("doctor", "--prometheus", url),
        ("doctor", "--alertmanager", url),
    ):
        code, out, err = run_main(capsys, *argv)
        assert (code, out) == (2, ""), (argv, err)
        assert err.splitlines() == [
            f"error: {argv[-2]} {shown}: not an http(s) URL (e.g. http://127.0.0.1:9090; "
            "ASCII, no query or fragment)"
        ]


@pytest.fixture
def endless_server() -> Iterator[str]:
    """A server on loopback whose answers never end: /slow sends a byte a second, /large sends
    spaces as fast as it can."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            slow = self.path.startswith("/slow")
            try:
                while True:
                    self.wfile.write(b" " if slow else b" " * 65536)
                    self.wfile.flush()
                    if slow:
                        time.sleep(0.2)
            except OSError:
                return

        def log_message(self, format: str, *args: Any) -> None:
            del format, args

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_an_answer_that_never_ends_is_one_line_and_exit_3(
    endless_server: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(http, "ANSWER_S", 2.0)
    monkeypatch.setattr(http, "MAX_ANSWER_BYTES", 1 << 20)
    started = time.monotonic()
    code, out, err = run_main(capsys, "doctor", "--alertmanager", f"{endless_server}/slow")
    assert code == 3
    assert ("source", "alertmanager", "UNREAD") in doctor_rows(out)
    assert err.splitlines() == [
        f"error: Alertmanager at {endless_server}/slow/api/v2/alerts does not answer within 2 s"
    ]
    assert time.monotonic() - started < 10
    code, out, err = run_main(capsys, "report", "gpu-hours", "--prometheus", endless_server)
    assert (code, out) == (3, "")
    assert err.splitlines() == [
        f"error: Prometheus at {endless_server}/api/v1/query: the answer is larger than 1 MiB"
    ]


@pytest.mark.parametrize(
    "argv",
    [("doctor", "--prometheus"), ("doctor", "--alertmanager"), ("report", "gpu-hours", "--prometheus")],
)  # fmt: skip
def test_headers_that_come_a_byte_at_a_time_are_cut_at_the_bound(
    argv: tuple[str, ...], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(http, "ANSWER_S", 2.0)
    # Each byte within the read timeout. The answer ends after some 30 s: where only each read
    # and the body are bounded, the test fails on the time instead of waiting for good.
    answer = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n[]"
    with servers.trickle(answer, every=0.5) as url:
        started = time.monotonic()
        code, out, err = run_main(capsys, *argv, url)
        assert time.monotonic() - started < 10
    assert code == 3
    assert _nothing_read(argv, out), out
    (line,) = err.splitlines()
    assert line.startswith(f"error: {argv[-1].removeprefix('--').title()} at {url}/api/")
    assert line.endswith(" does not answer within 2 s")


_COMMANDS = {
    "/api/v1/query": (("report", "gpu-hours", "--prometheus"), "Prometheus at {url}: query: "),
    "/api/v1/targets": (("doctor", "--prometheus"), "Prometheus at {url}: targets: "),
    "/api/v2/alerts": (("doctor", "--alertmanager"), "Alertmanager at {url}/api/v2/alerts: "),
}


def _nothing_read(argv: tuple[str, ...], out: str) -> bool:
    """Whether ``out`` holds nothing from the one server ``argv`` asks: no report, or a doctor
    table whose one row for that server says it was not read."""
    if argv[0] != "doctor":
        return out == ""
    source = argv[1].removeprefix("--")
    return [row for row in doctor_rows(out) if row[2] != "skip"] == [("source", source, "UNREAD")]


@pytest.mark.parametrize(
    ("paths", "body"),
    [
        (tuple(_COMMANDS), "[1, 2, 3]"),
        (tuple(_COMMANDS), "null"),
        (tuple(_COMMANDS), '{"x": 1}'),
        (tuple(_COMMANDS), '"a page"'),
        (("/api/v1/query", "/api/v1/targets"), '{"status": "success"}'),
        (("/api/v1/query", "/api/v1/targets"), '{"status": "success", "data": []}'),
        (
            ("/api/v1/query",),
            '{"status": "success", "data": {"resultType": "vector", "result": [{"value": [1, "1"]}]}}',
        ),
        (
            ("/api/v1/query",),
            '{"status": "success", "data": {"resultType": "vector", "result": [{"metric": {}, '
            '"value": [1, "abc"]}]}}',
        ),
        (("/api/v1/targets",), '{"status": "success", "data": {"activeTargets": [{"labels": null}]}}'),
        (("/api/v1/targets",), '{"status": "success", "data": {"activeTargets": "none"}}'),
        (("/api/v2/alerts",), '[{"labels": null}]'),
        (("/api/v2/alerts",), '[{"labels": {"alertname": "X", "severity": "critical"}, "annotations": "x"}]'),
    ],
)  # fmt: skip
def test_json_that_is_not_the_apis_answer_is_one_line_and_exit_3(
    paths: tuple[str, ...], body: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with servers.static({path: ("application/json", body.encode()) for path in paths}) as url:
        for path in paths:
            argv, what = _COMMANDS[path]
            code, out, err = run_main(capsys, *argv, url)
            assert code == 3, (argv, err)
            assert _nothing_read(argv, out), out
            (line,) = err.splitlines()
            assert line.startswith(f"error: {what.format(url=url)}the answer is not "), line


@pytest.mark.parametrize("value", ["NaN", "+Inf"])
def test_gpu_hours_that_are_no_number_are_one_line_and_exit_3(
    value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # JSON has no NaN: the report would print a document no JSON reader takes.
    body = (
        '{"status": "success", "data": {"resultType": "vector", "result": [{"metric": '
        f'{{"team": "research"}}, "value": [1, "{value}"]}}]}}}}'
    ).encode()
    with servers.static({"/api/v1/query": ("application/json", body)}) as url:
        code, out, err = run_main(
            capsys, "report", "gpu-hours", "--prometheus", url, "--format", "json"
        )
    assert (code, out) == (3, "")
    (line,) = err.splitlines()
    assert line.startswith(f"error: Prometheus at {url}: namespace_team_project:gpu_allocated:")
    assert line.endswith(
        "for team=research, project=, namespace=: the recorded series hold no number"
    )


def test_a_prometheus_error_is_shown_as_prometheus_says_it(
    capsys: pytest.CaptureFixture[str],
) -> None:
    body = b'{"status": "error", "errorType": "bad_data", "error": "invalid parameter"}'
    with servers.static({"/api/v1/targets": ("application/json", body)}) as url:
        code, out, err = run_main(capsys, "doctor", "--prometheus", url)
    assert code == 3
    assert _nothing_read(("doctor", "--prometheus"), out)
    assert err.splitlines() == [f"error: Prometheus at {url}: targets: invalid parameter"]

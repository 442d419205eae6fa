"""Before a lab converge, the lab's apt proxy and stand-in repository must answer in time.

Loopback stand-ins: a proxy that serves any URL, a listener that accepts and never answers, a
port nothing listens on, and the stand-in repository's Release file.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from gpuinfra import lab
from gpuinfra.errors import ToolError
from gpuinfra.lab import aptrepo


class _AnyUrl(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = b"signature\n"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        del format, args


@pytest.fixture
def proxy() -> Iterator[int]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _AnyUrl)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield int(server.server_address[1])
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def silent() -> Iterator[int]:
    """A port that accepts connections (the kernel's backlog) and never answers."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(8)
        yield int(sock.getsockname()[1])


@pytest.fixture
def repo(tmp_path: Path) -> Iterator[str]:
    (tmp_path / "repo").mkdir()
    (tmp_path / "repo" / "Release").write_text("Origin: gpuinfra\n")
    with aptrepo.serving(tmp_path / "repo") as server:
        yield server.url


def lab_site(tmp_path: Path, repo_url: str) -> Path:
    site = tmp_path / "site"
    site.mkdir()
    settings = lab.Settings(prefix="gpuinfraunit", root=tmp_path)
    lab.write_inventory(settings, [lab.Host("gpuinfraunit-1", 2401, "running")], repo_url, "0" * 40)
    settings.hosts_file.rename(site / "hosts.yml")
    return site


def test_a_lab_whose_sources_answer_passes(tmp_path: Path, proxy: int, repo: str) -> None:
    lab.check_lab_sources(lab_site(tmp_path, repo), seconds=2, proxy_port=proxy)


def test_a_proxy_that_is_not_running_says_to_start_it(
    tmp_path: Path, closed_port: int, repo: str
) -> None:
    with pytest.raises(ToolError) as caught:
        lab.check_lab_sources(lab_site(tmp_path, repo), seconds=2, proxy_port=closed_port)
    assert caught.value.message == (
        f"the lab's apt proxy on 127.0.0.1:{closed_port} is not running; start it with `gpuinfra lab up`"
    )


def test_a_silent_proxy_fails_within_the_bound(tmp_path: Path, silent: int, repo: str) -> None:
    started = time.monotonic()
    with pytest.raises(ToolError) as caught:
        lab.check_lab_sources(lab_site(tmp_path, repo), seconds=1, proxy_port=silent)
    assert time.monotonic() - started < 5
    assert caught.value.message == (
        f"the lab's apt proxy on 127.0.0.1:{silent} did not serve "
        "http://deb.debian.org/debian/dists/bookworm/Release.gpg within 1 s (no answer); "
        "check the proxy and the network, then converge again"
    )


def test_a_silent_repository_is_named(tmp_path: Path, proxy: int, silent: int) -> None:
    with pytest.raises(ToolError) as caught:
        lab.check_lab_sources(
            lab_site(tmp_path, f"http://127.0.0.1:{silent}/"), seconds=1, proxy_port=proxy
        )
    assert caught.value.message == (
        "the lab's stand-in toolkit repository did not serve "
        f"http://127.0.0.1:{silent}/Release within 1 s (no answer); "
        "run `gpuinfra lab up` again to serve it"
    )


def test_an_inventory_lab_up_did_not_write_is_left_alone(tmp_path: Path, closed_port: int) -> None:
    (tmp_path / "hosts.yml").write_text("all:\n  hosts:\n    gpu-1: {}\n")
    lab.check_lab_sources(tmp_path, seconds=1, proxy_port=closed_port)


def test_converge_stops_before_any_host_when_the_lab_proxy_is_down(
    tmp_path: Path, closed_port: int, repo: str, cli: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GPUINFRA_APT_PROXY_PORT", str(closed_port))
    result = cli("converge", "--site", str(lab_site(tmp_path, repo)))
    assert result.code == 3
    assert result.stderr.strip().splitlines() == [
        f"error: the lab's apt proxy on 127.0.0.1:{closed_port} is not running; "
        "start it with `gpuinfra lab up`"
    ]
    assert "PLAY RECAP" not in result.stdout

"""Real Alertmanager, Prometheus and an HTTP sink on loopback, for the tests that need them.

Alertmanager comes from Debian 13's package, unpacked into .tools/ by scripts/setup.sh;
Prometheus and promtool from Debian's ``prometheus`` package. Each server listens on
127.0.0.1 on a free port of the range kept for these tests, and stops with its test.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import ipaddress
import json
import shutil
import socket
import ssl
import subprocess
import threading
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

ROOT = Path(__file__).resolve().parents[1]
AM_BIN = ROOT / ".tools" / "alertmanager" / "usr" / "bin"
AMTOOL = AM_BIN / "amtool"
ALERTMANAGER = AM_BIN / "prometheus-alertmanager"
PORTS = range(18500, 18600)


def tool(path: Path | str) -> str:
    """The tool's path; a test fails (it does not skip) when setup.sh has not installed it."""
    found = str(path) if Path(path).is_file() else shutil.which(str(path))
    if not found:
        pytest.fail(f"{path} not found: run `bash scripts/setup.sh`")
    return found


def free_port() -> int:
    for port in PORTS:
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port in {PORTS.start}-{PORTS.stop - 1}")


def wait_ready(url: str, process: subprocess.Popen[bytes], log: Path, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{url}: server exited: {log.read_text('utf-8')[-2000:]}")
        with contextlib.suppress(OSError), urllib.request.urlopen(url, timeout=2) as response:
            if response.status == 200:
                return
        time.sleep(0.2)
    raise RuntimeError(f"{url}: not ready after {timeout}s: {log.read_text('utf-8')[-2000:]}")


@contextlib.contextmanager
def serve(args: list[str], ready: str, workdir: Path) -> Iterator[None]:
    log = workdir / "server.log"
    with log.open("wb") as out:
        process = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, cwd=workdir)
    try:
        wait_ready(ready, process, log)
        yield
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@contextlib.contextmanager
def alertmanager(config: Path, workdir: Path) -> Iterator[str]:
    """A real Alertmanager on loopback with ``config``; yields its URL."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    args = [
        tool(ALERTMANAGER),
        f"--config.file={config}",
        f"--storage.path={workdir / 'am-data'}",
        f"--web.listen-address=127.0.0.1:{port}",
        "--cluster.listen-address=",
    ]
    with serve(args, f"{url}/-/ready", workdir):
        yield url


@contextlib.contextmanager
def prometheus(
    config: Path, data: Path, workdir: Path, *, retention: str = "3650d"
) -> Iterator[str]:
    """A real Prometheus on loopback reading ``data`` (a TSDB directory), keeping samples for
    ``retention``; yields its URL."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    args = [
        tool("prometheus"),
        f"--config.file={config}",
        f"--storage.tsdb.path={data}",
        f"--web.listen-address=127.0.0.1:{port}",
        f"--storage.tsdb.retention.time={retention}",
    ]
    with serve(args, f"{url}/-/ready", workdir):
        yield url


@dataclass
class Request:
    method: str
    path: str
    query: dict[str, list[str]]
    body: Any


@dataclass
class Sink:
    """An HTTP server that records every request and answers as the real services do."""

    url: str
    requests: list[Request] = field(default_factory=list)

    def to(self, prefix: str) -> list[Request]:
        return [r for r in self.requests if r.path.startswith(prefix)]

    def wait_for(self, prefix: str, count: int = 1, timeout: float = 30) -> list[Request]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            got = self.to(prefix)
            if len(got) >= count:
                return got
            time.sleep(0.1)
        raise AssertionError(
            f"{prefix}: {len(self.to(prefix))} of {count} notifications after {timeout}s; "
            f"received: {[r.path for r in self.requests]}"
        )


# What each service answers; Alertmanager checks these (WeCom's errcode, its access token).
_ANSWERS: dict[str, tuple[int, dict[str, Any]]] = {
    "/wecom/gettoken": (200, {"errcode": 0, "access_token": "token-1", "expires_in": 7200}),
    "/wecom/message/send": (200, {"errcode": 0, "errmsg": "ok"}),
    "/pagerduty": (202, {"status": "success", "message": "Event processed", "dedup_key": "k"}),
    "/opsgenie": (202, {"result": "Request will be processed", "requestId": "r"}),
}


@contextlib.contextmanager
def sink() -> Iterator[Sink]:
    port = free_port()
    recorder = Sink(f"http://127.0.0.1:{port}")

    class Handler(BaseHTTPRequestHandler):
        def _record(self) -> None:
            parts = urlsplit(self.path)
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            try:
                body: Any = json.loads(raw) if raw else None
            except ValueError:
                body = raw.decode("utf-8", "replace")
            recorder.requests.append(Request(self.command, parts.path, parse_qs(parts.query), body))
            status, answer = next(
                (v for k, v in _ANSWERS.items() if parts.path.startswith(k)), (200, {})
            )
            data = json.dumps(answer).encode() if answer else b"ok"
            self.send_response(status)
            self.send_header("Content-Type", "application/json" if answer else "text/plain")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = _record
        do_POST = _record

        def log_message(self, format: str, *args: Any) -> None:
            del format, args

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield recorder
    finally:
        server.shutdown()
        server.server_close()


@contextlib.contextmanager
def static(
    pages: dict[str, tuple[str, bytes]], status: int = 200, bearer: str | None = None
) -> Iterator[str]:
    """An HTTP server answering GET ``path`` with ``(content type, body)`` and ``status``, 404
    elsewhere; with ``bearer``, 401 to a request without that token."""
    port = free_port()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            page = pages.get(urlsplit(self.path).path)
            refused = bearer is not None and self.headers.get("Authorization") != f"Bearer {bearer}"
            if page is None or refused:
                self.send_response(401 if refused else 404)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            kind, body = page
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            del format, args

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.shutdown()
        server.server_close()


def self_signed(directory: Path) -> Path:
    """A PEM file in ``directory`` holding a key and a certificate for 127.0.0.1 that it signs
    itself: a server no client verifies."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = dt.datetime.now(dt.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(days=1))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .sign(key, hashes.SHA256())
    )
    path = directory / "server.pem"
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
        + certificate.public_bytes(serialization.Encoding.PEM)
    )
    return path


@contextlib.contextmanager
def trickle(
    answer: bytes, *, at_once: int = 0, every: float = 0.5, certificate: Path | None = None
) -> Iterator[str]:
    """A server on loopback that answers each request with ``answer``: its first ``at_once``
    bytes at once, then one byte every ``every`` seconds, then it closes the connection. Over
    TLS with ``certificate`` (a PEM file with its key, as ``self_signed`` writes)."""
    tls = None
    if certificate is not None:
        tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        tls.load_cert_chain(certificate)
    stopped = threading.Event()

    def answer_one(conn: socket.socket) -> None:
        with contextlib.suppress(OSError), conn:
            if tls is not None:
                conn = tls.wrap_socket(conn, server_side=True)
            conn.recv(65536)
            conn.sendall(answer[:at_once])
            for byte in answer[at_once:]:
                if stopped.wait(every):
                    return
                conn.sendall(bytes([byte]))

    def accept(listener: socket.socket) -> None:
        while not stopped.is_set():
            with contextlib.suppress(OSError):
                conn, _ = listener.accept()
                threading.Thread(target=answer_one, args=(conn,), daemon=True).start()

    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        listener.settimeout(0.2)
        threading.Thread(target=accept, args=(listener,), daemon=True).start()
        try:
            yield f"{'http' if tls is None else 'https'}://127.0.0.1:{listener.getsockname()[1]}"
        finally:
            stopped.set()

"""`gpuinfra triton repository` lists an S3 model repository (a local S3 server, moto, on
127.0.0.1) and says which version policy finds no version, before Triton would refuse the model."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import boto3
import pytest
from moto.server import ThreadedMotoServer

from gpuinfra.ops import http
from gpuinfra.ops import s3 as bounded
from tests.conftest import run_cli, run_main
from tests.unit.test_integrity import site_copy

BUCKET = "models-bucket"
MODELS = ("serving/resnet50/1/model.onnx", "serving/resnet50/1/labels.txt")


@pytest.fixture
def s3(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    for name, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
    }.items():
        monkeypatch.setenv(name, value)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    try:
        client = boto3.client("s3", endpoint_url=endpoint)
        client.create_bucket(Bucket=BUCKET)
        for key in MODELS:
            client.put_object(Bucket=BUCKET, Key=key, Body=b"model")
        yield endpoint
    finally:
        server.stop()


def s3_site(tmp_path: Path) -> Path:
    """The example site, its repository moved to S3 (resnet50 serves the latest version)."""
    site = site_copy(tmp_path, {})
    triton = site / "group_vars" / "all" / "triton.yml"
    triton.write_text(
        triton.read_text().replace(
            "triton_model_repository:\n  pvc: triton-models\n",
            f"triton_model_repository:\n  s3: s3://{BUCKET}/serving/\n  region: us-east-1\n",
        )
    )
    assert f"s3://{BUCKET}" in triton.read_text()
    return site


def test_a_repository_with_every_version_passes(s3: str, tmp_path: Path) -> None:
    result = run_cli("triton", "repository", "--site", str(s3_site(tmp_path)), "--endpoint-url", s3)
    assert result.code == 0, result.stderr
    assert "every version policy of" in result.stdout
    assert "resnet50: version_policy" in result.stdout


def test_a_model_without_a_version_directory_fails_naming_it(s3: str, tmp_path: Path) -> None:
    site = s3_site(tmp_path)
    client = boto3.client("s3", endpoint_url=s3)
    for key in MODELS:
        client.delete_object(Bucket=BUCKET, Key=key)
    client.put_object(Bucket=BUCKET, Key="serving/resnet50/config.pbtxt", Body=b"name: 'x'")
    result = run_cli("triton", "repository", "--site", str(site), "--endpoint-url", s3)
    assert result.code == 1
    (line,) = [x for x in result.stderr.splitlines() if "resnet50" in x]
    assert "no version directory" in line, result.stderr


def test_a_bucket_that_does_not_exist_is_one_line(s3: str, tmp_path: Path) -> None:
    site = s3_site(tmp_path)
    boto3.resource("s3", endpoint_url=s3).Bucket(BUCKET).objects.all().delete()
    boto3.client("s3", endpoint_url=s3).delete_bucket(Bucket=BUCKET)
    result = run_cli("triton", "repository", "--site", str(site), "--endpoint-url", s3)
    assert result.code == 1
    assert "NoSuchBucket" in result.stderr
    assert "Traceback" not in result.stderr


def test_an_endpoint_that_does_not_answer_ends_with_one_line(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.setenv(name, "testing")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    result = run_cli(
        "triton",
        "repository",
        "--site",
        str(s3_site(tmp_path)),
        "--endpoint-url",
        f"http://127.0.0.1:{port}",
    )
    # It could not look: the environment (3), not a failed check (1).
    assert result.code == 3
    (line,) = result.stderr.splitlines()
    assert line.startswith(f"error: s3://{BUCKET}/serving/: ")
    assert f"127.0.0.1:{port}" in line


def test_no_credentials_is_the_environment_not_a_failed_check(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.delenv("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", raising=False)
    monkeypatch.delenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", raising=False)
    result = run_cli("triton", "repository", "--site", str(s3_site(tmp_path)))
    assert result.code == 3
    (line,) = result.stderr.splitlines()
    assert line.startswith(f"error: s3://{BUCKET}/serving/: Unable to locate credentials; ")
    assert "AWS_PROFILE" in line


@pytest.mark.parametrize("url", ["minio:9000", "ftp://minio", "http://127.0.0.1:99999", "http://"])
def test_an_endpoint_that_is_not_a_url_is_the_argument(tmp_path: Path, url: str) -> None:
    site = s3_site(tmp_path)
    result = run_cli("triton", "repository", "--site", str(site), "--endpoint-url", url)
    assert result.code == 2
    (line,) = result.stderr.splitlines()
    assert line.startswith(f"error: --endpoint-url {url!r}: not an S3 endpoint")
    assert "allowed: an http:// or https:// URL" in line


def test_a_volume_repository_is_refused_with_where_it_is_checked() -> None:
    result = run_cli("triton", "repository", "--site", "inventory/example")
    assert result.code == 2
    assert "init container" in result.stderr


def test_a_stack_without_triton_has_no_repository_to_check() -> None:
    result = run_cli("triton", "repository", "--stack", "prod")
    assert result.code == 2
    (line,) = result.stderr.splitlines()
    assert line == "error: prod: Triton is not enabled there; no model repository to check"


@dataclass
class Endpoint:
    """A loopback endpoint that answers every connection with ``answer``: how many it took and
    how many bytes it sent on each before the client went."""

    url: str
    stop: threading.Event
    accepted: int = 0
    sent: list[int] = field(default_factory=list)


Answer = Callable[[socket.socket, threading.Event], int]


@pytest.fixture
def endpoint(request: pytest.FixtureRequest) -> Iterator[Endpoint]:
    answer: Answer = request.param
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        listener.settimeout(0.2)
        found = Endpoint(f"http://127.0.0.1:{listener.getsockname()[1]}", threading.Event())
        held: list[socket.socket] = []

        def serve(conn: socket.socket) -> None:
            sent = 0
            try:
                conn.recv(1 << 16)
                sent = answer(conn, found.stop)
            except OSError as gone:
                sent = getattr(gone, "sent", 0)
            found.sent.append(sent)

        def accept() -> None:
            while not found.stop.is_set():
                try:
                    conn, _ = listener.accept()
                except TimeoutError:
                    continue
                found.accepted += 1
                held.append(conn)
                threading.Thread(target=serve, args=(conn,), daemon=True).start()

        acceptor = threading.Thread(target=accept, daemon=True)
        acceptor.start()
        try:
            yield found
        finally:
            found.stop.set()
            acceptor.join()
            for conn in held:
                conn.close()


class Gone(OSError):
    """The client closed the connection after ``sent`` bytes."""

    def __init__(self, sent: int) -> None:
        super().__init__(sent)
        self.sent = sent


def _send_all(conn: socket.socket, data: bytes, sent: int) -> int:
    try:
        conn.sendall(data)
    except OSError:
        raise Gone(sent) from None
    return sent + len(data)


def silent(conn: socket.socket, stop: threading.Event) -> int:
    """Takes the request and never answers."""
    stop.wait()
    return 0


def dribbled_headers(conn: socket.socket, stop: threading.Event) -> int:
    """A status line a byte at a time, each well within the read timeout; about 20 s at most,
    so that a client without a deadline ends too."""
    sent = 0
    for byte in b"HTTP/1.1 200 OK\r\n" * 100:
        if stop.wait(0.3) or sent > 60:
            break
        sent = _send_all(conn, bytes([byte]), sent)
    return sent


def _endless(chunked: bool) -> Answer:
    def answer(conn: socket.socket, stop: threading.Event) -> int:
        """Headers, then a body without end as fast as it goes; 256 MiB at most, so that a
        client without a cap ends too."""
        framing = b"Transfer-Encoding: chunked" if chunked else b"Content-Length: 8589934592"
        sent = _send_all(conn, b"HTTP/1.1 200 OK\r\n" + framing + b"\r\n\r\n", 0)
        block = b" " * (1 << 16)
        if chunked:
            block = b"10000\r\n" + block + b"\r\n"
        while not stop.is_set() and sent < 256 << 20:
            sent = _send_all(conn, block, sent)
        return sent

    return answer


@pytest.fixture
def bounds(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """Small bounds (2 s and 1 MiB an answer, 1 s a read), fake credentials, and the site."""
    monkeypatch.setattr(http, "ANSWER_S", 2.0)
    monkeypatch.setattr(http, "MAX_ANSWER_BYTES", 1 << 20)
    monkeypatch.setattr(bounded, "READ_S", 1)
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.setenv(name, "testing")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    return s3_site(tmp_path)


def _one_line(capsys: pytest.CaptureFixture[str], site: Path, url: str) -> tuple[str, float]:
    started = time.monotonic()
    code, out, err = run_main(
        capsys, "triton", "repository", "--site", str(site), "--endpoint-url", url
    )
    took = time.monotonic() - started
    assert (code, out) == (3, ""), err
    (line,) = err.splitlines()
    return line, took


LISTED = f'/{BUCKET}?list-type=2&prefix=serving%2F&encoding-type=url"'


@pytest.mark.parametrize("endpoint", [dribbled_headers], indirect=True)
def test_headers_sent_a_byte_at_a_time_end_at_the_answer_deadline_after_two_attempts(
    endpoint: Endpoint, bounds: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    line, took = _one_line(capsys, bounds, endpoint.url)
    assert line == (
        f"error: s3://{BUCKET}/serving/: No whole answer within 2 s from endpoint URL: "
        f'"{endpoint.url}{LISTED}'
    )
    assert endpoint.accepted == 2
    # Two answers of 2 s and a backoff under 1 s; the endpoint dribbles for 20 s.
    assert took < 10


@pytest.mark.parametrize(
    "endpoint",
    [_endless(chunked=False), _endless(chunked=True)],
    ids=["content-length", "chunked"],
    indirect=True,
)
def test_a_body_without_end_is_read_up_to_the_cap_and_not_again(
    endpoint: Endpoint, bounds: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    line, _ = _one_line(capsys, bounds, endpoint.url)
    assert line == (
        f"error: s3://{BUCKET}/serving/: The answer is larger than 1 MiB from endpoint URL: "
        f'"{endpoint.url}{LISTED}'
    )
    deadline = time.monotonic() + 10
    while not endpoint.sent and time.monotonic() < deadline:
        time.sleep(0.05)
    assert endpoint.accepted == 1
    # The cap and what the sockets' buffers hold: the endpoint offers 256 MiB.
    (sent,) = endpoint.sent
    assert sent < 32 << 20


@pytest.mark.parametrize("endpoint", [silent], indirect=True)
def test_a_silent_endpoint_is_tried_twice(
    endpoint: Endpoint, bounds: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    line, took = _one_line(capsys, bounds, endpoint.url)
    assert line == (
        f'error: s3://{BUCKET}/serving/: Read timeout on endpoint URL: "{endpoint.url}{LISTED}'
    )
    assert endpoint.accepted == 2
    assert took < 10


def _endless_pages(pause: float) -> Answer:
    def answer(conn: socket.socket, stop: threading.Event) -> int:
        """A page of one key for every request, each with a new continuation token, ``pause``
        seconds apart; 2,000 pages at most, so that a client without a bound ends too."""
        sent = 0
        for n in range(2000):
            body = (
                '<?xml version="1.0" encoding="UTF-8"?>'
                '<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">'
                f"<Name>{BUCKET}</Name><Prefix>serving/</Prefix><KeyCount>1</KeyCount>"
                "<MaxKeys>1000</MaxKeys><IsTruncated>true</IsTruncated>"
                f"<Contents><Key>serving/resnet50/1/part-{n}</Key><Size>1</Size></Contents>"
                f"<NextContinuationToken>token-{n}</NextContinuationToken></ListBucketResult>"
            ).encode()
            head = f"HTTP/1.1 200 OK\r\nContent-Length: {len(body)}\r\n\r\n".encode()
            if stop.wait(pause):
                break
            sent = _send_all(conn, head + body, sent)
            if not conn.recv(1 << 16):
                break
        return sent

    return answer


@pytest.mark.parametrize("endpoint", [_endless_pages(0)], indirect=True)
def test_a_listing_that_never_ends_stops_at_the_most_keys(
    endpoint: Endpoint,
    bounds: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(bounded, "MAX_KEYS", 25)
    line, _ = _one_line(capsys, bounds, endpoint.url)
    assert line == (
        f"error: s3://{BUCKET}/serving/: The listing had not ended after 25 objects, far more "
        f'than a model repository holds; check the prefix (endpoint URL: "{endpoint.url}")'
    )


@pytest.mark.parametrize("endpoint", [_endless_pages(0.2)], indirect=True)
def test_a_listing_that_never_ends_stops_at_its_deadline(
    endpoint: Endpoint,
    bounds: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(bounded, "LISTING_S", 1.0)
    line, took = _one_line(capsys, bounds, endpoint.url)
    assert line.startswith(
        f"error: s3://{BUCKET}/serving/: The listing had not ended after 1 s ("
    ), line
    # One page past the deadline at most; the endpoint pages for 400 s.
    assert took < 5

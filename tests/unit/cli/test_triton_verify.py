"""``gpuinfra triton verify``: a server that does not answer is the environment (exit 3), an
address that is not HOST:PORT is the argument (exit 2); only a served version the policies do
not declare fails the check (exit 1, tested against a real Triton in tests/unit/lab)."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent import futures

import grpc
import pytest

from tests.conftest import run_cli

SITE = "inventory/example"


@pytest.fixture
def not_triton() -> Iterator[str]:
    """A gRPC server on 127.0.0.1 that serves nothing: every call is UNIMPLEMENTED."""
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=1))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield f"127.0.0.1:{port}"
    finally:
        server.stop(grace=None)


def test_a_server_that_does_not_answer_is_the_environment(closed_port: int) -> None:
    url = f"127.0.0.1:{closed_port}"
    result = run_cli("triton", "verify", "--url", url, "--site", SITE)
    assert result.code == 3, result.stderr
    (line,) = result.stderr.splitlines()
    assert line.startswith(f"error: Triton at {url} does not answer: StatusCode.UNAVAILABLE: ")
    assert result.stdout == ""


def test_a_server_that_is_not_triton_is_the_environment(not_triton: str) -> None:
    result = run_cli("triton", "verify", "--url", not_triton, "--site", SITE)
    assert result.code == 3, result.stderr
    (line,) = result.stderr.splitlines()
    assert line.startswith(
        f"error: Triton at {not_triton} gave no repository index: StatusCode.UNIMPLEMENTED"
    )


@pytest.mark.parametrize("url", ["http://127.0.0.1:8001", "127.0.0.1", "host:0", "", "a b:1"])
def test_an_address_that_is_not_host_port_is_the_argument(url: str) -> None:
    result = run_cli("triton", "verify", "--url", url, "--site", SITE)
    assert result.code == 2
    (line,) = result.stderr.splitlines()
    assert line.startswith(f"error: --url {url!r}: not a gRPC address (allowed: HOST:PORT")


@pytest.mark.parametrize("key", ["line\nbreak", " padded", "clé"])
def test_an_admin_key_that_is_no_header_value_is_the_input(
    key: str, monkeypatch: pytest.MonkeyPatch, closed_port: int
) -> None:
    monkeypatch.setenv("GPUINFRA_TRITON_ADMIN_KEY", key)
    result = run_cli("triton", "verify", "--url", f"127.0.0.1:{closed_port}", "--site", SITE)
    assert result.code == 2, result.stderr
    assert result.stderr.splitlines() == [
        "error: GPUINFRA_TRITON_ADMIN_KEY: not a header value (allowed: printable ASCII, no "
        "space at either end)"
    ]

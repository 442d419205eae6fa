"""What the tests on a real local Triton share: the installation, and ports to serve on."""

from __future__ import annotations

import itertools
import os

import pytest

from gpuinfra.errors import ToolError
from gpuinfra.lab import triton as local

# Three ports per server (HTTP, gRPC, metrics), from this project's range on loopback, each
# server its own: a stopped server's ports may linger in TIME_WAIT.
_PORTS = itertools.count(18420, 3)


@pytest.fixture(scope="module")
def inst() -> local.Installation:
    """The pinned local Triton (``scripts/setup-triton.sh``): without it the test skips, except
    under ``GPUINFRA_REQUIRE_TRITON=1`` (set by ``scripts/test.sh``), where it fails."""
    try:
        return local.installation()
    except ToolError as missing:
        if os.environ.get("GPUINFRA_REQUIRE_TRITON") == "1":
            pytest.fail(str(missing))
        pytest.skip(str(missing))


def ports() -> tuple[int, int, int]:
    """Three ports no other server of this test run has used."""
    first = next(_PORTS)
    return first, first + 1, first + 2

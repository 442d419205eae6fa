"""JSON over HTTP with a bound on every request, and one clear line when a server fails."""

from __future__ import annotations

import base64
import json
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from gpuinfra.errors import ToolError, UsageError, excerpt

TIMEOUT_S = 15.0
# A whole answer, however slowly it comes, and how large it may be: a server that sends a byte
# now and then, or never ends its body, would hold the command (and its memory) forever.
# Prometheus's targets of a large cluster are a few MiB.
ANSWER_S = 60.0
MAX_ANSWER_BYTES = 64 << 20


@dataclass(frozen=True)
class Server:
    """A server given on the command line. ``url`` carries no credentials, so messages may show
    it; a ``user:password@`` part of the URL as given becomes Basic authorization instead, which
    is what Prometheus and Alertmanager behind a proxy ask for."""

    url: str
    headers: Mapping[str, str] = field(default_factory=dict, repr=False)

    def get_json(self, path: str, params: Mapping[str, str] | None = None, *, what: str) -> Any:
        return get_json(f"{self.url}{path}", params, what=what, headers=self.headers)


def server(option: str, url: str) -> Server:
    """The server ``url`` names; UsageError when it is not an http(s) URL."""
    user, plain, shown, valid = "", url, url, False
    try:
        parts = urllib.parse.urlsplit(url)
        user, _, address = parts.netloc.rpartition("@")
        plain = urllib.parse.urlunsplit(parts._replace(netloc=address)).rstrip("/")
        # A message names the URL as given, less its credentials.
        shown = plain if user else url
        # The API's paths and parameters are added to it: a query or fragment would end up
        # in front of them.
        valid = (
            url.isascii()
            and url.isprintable()
            and parts.scheme in ("http", "https")
            and bool(parts.hostname)
            and parts.port != 0
            and not parts.query
            and not parts.fragment
        )
    except ValueError:  # a port that is no number or out of range, a broken [IPv6] host
        pass
    if not valid:
        raise UsageError(
            f"{option} {excerpt(repr(shown), 120)}: not an http(s) URL (e.g. "
            "http://127.0.0.1:9090; ASCII, no query or fragment)"
        )
    if not user:
        return Server(plain)
    name, _, password = user.partition(":")
    token = f"{urllib.parse.unquote(name)}:{urllib.parse.unquote(password)}"
    return Server(plain, {"Authorization": "Basic " + base64.b64encode(token.encode()).decode()})


def read_bounded(chunks: Iterable[bytes], source: str) -> bytes:
    """The body that ``chunks`` yields, within ANSWER_S and MAX_ANSWER_BYTES; ToolError naming
    ``source`` (e.g. "Prometheus at URL") when it takes longer or grows larger."""
    deadline = time.monotonic() + ANSWER_S
    body = bytearray()
    for chunk in chunks:
        body += chunk
        if len(body) > MAX_ANSWER_BYTES:
            raise ToolError(f"{source}: the answer is larger than {MAX_ANSWER_BYTES >> 20} MiB")
        if time.monotonic() > deadline:
            raise ToolError(f"{source} does not answer within {ANSWER_S:.0f} s")
    return bytes(body)


def get_json(
    url: str,
    params: Mapping[str, str] | None = None,
    *,
    what: str,
    headers: Mapping[str, str] | None = None,
) -> Any:
    """GET ``url`` and parse its JSON; ToolError naming ``what`` when it cannot be had."""
    full = f"{url}?{urllib.parse.urlencode(params)}" if params else url
    request = urllib.request.Request(
        full, headers={"Accept": "application/json", **(headers or {})}
    )
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:
            body = read_bounded(iter(lambda: response.read1(1 << 16), b""), f"{what} at {url}")
    except urllib.error.HTTPError as exc:
        detail = exc.read(300).decode("utf-8", "replace").strip()
        raise ToolError(f"{what} at {url}: HTTP {exc.code}: {detail or exc.reason}") from None
    except (urllib.error.URLError, TimeoutError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise ToolError(f"{what} at {url} does not answer: {reason}") from None
    try:
        return json.loads(body)
    except ValueError:
        raise ToolError(f"{what} at {url}: the answer is not JSON") from None

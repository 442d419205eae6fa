"""JSON over HTTP with a bound on every request, and one clear line when a server fails."""

from __future__ import annotations

import base64
import contextlib
import contextvars
import http.client
import json
import socket
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

from gpuinfra.errors import ToolError, UsageError, excerpt

# How long one read from a server may wait: the socket's timeout.
TIMEOUT_S = 15.0
# A whole request, however slowly its answer comes (connection, headers and body), and how large
# the answer may be: a server that sends a byte now and then, or never ends its body, would hold
# the command (and its memory) forever. Prometheus's targets of a large cluster are a few MiB.
ANSWER_S = 60.0
MAX_ANSWER_BYTES = 64 << 20


class Deadline:
    """One request's wall-clock bound (ANSWER_S unless told), ``with Deadline() as deadline:``.

    A socket's timeout bounds each read alone: a server that sends a byte every few seconds, in
    its headers or its body, never trips it. When ``seconds`` have passed, a timer thread shuts
    down every socket the request opened (``watch``), so that the read waiting on it returns at
    once; ``expired`` then says why the answer ended. The connection classes below watch each
    socket they open while a deadline is active in their thread."""

    def __init__(self, seconds: float | None = None) -> None:
        self.seconds = ANSWER_S if seconds is None else seconds
        self.expired = False
        self._lock = threading.Lock()
        self._twins: list[socket.socket] = []
        self._timer = threading.Timer(self.seconds, self._expire)
        self._timer.daemon = True
        self._token: contextvars.Token[Deadline | None] | None = None

    def __enter__(self) -> Deadline:
        self._token = _ACTIVE.set(self)
        self._timer.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._timer.cancel()
        if self._token is not None:
            _ACTIVE.reset(self._token)
        with self._lock:
            for twin in self._twins:
                twin.close()
            self._twins.clear()

    def watch(self, sock: socket.socket) -> None:
        """Shut ``sock`` down when the deadline passes (at once if it has)."""
        # A duplicate of its descriptor: shutting that down ends the connection for every
        # descriptor (a TLS socket's too), and its number is never another file's, as the
        # socket's own could be once it is closed.
        twin = socket.fromfd(sock.fileno(), sock.family, sock.type)
        with self._lock:
            self._twins.append(twin)
            if self.expired:
                _shut(twin)

    def _expire(self) -> None:
        with self._lock:
            self.expired = True
            for twin in self._twins:
                _shut(twin)


_ACTIVE: contextvars.ContextVar[Deadline | None] = contextvars.ContextVar("deadline", default=None)


def watch(sock: socket.socket) -> None:
    """Put ``sock`` under the deadline active in this thread, if any."""
    deadline = _ACTIVE.get()
    if deadline is not None:
        deadline.watch(sock)


def _shut(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):  # the server closed it already
        sock.shutdown(socket.SHUT_RDWR)


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
    """The body that ``chunks`` yields, within MAX_ANSWER_BYTES; ToolError naming ``source``
    (e.g. "Prometheus at URL") when it grows larger. Its time is the request's Deadline's,
    which started before the connection did."""
    body = bytearray()
    for chunk in chunks:
        body += chunk
        if len(body) > MAX_ANSWER_BYTES:
            raise ToolError(f"{source}: the answer is larger than {MAX_ANSWER_BYTES >> 20} MiB")
    return bytes(body)


def not_within(source: str) -> ToolError:
    """The error for a request that ANSWER_S ended."""
    return ToolError(f"{source} does not answer within {ANSWER_S:.0f} s")


class _Connection(http.client.HTTPConnection):
    def connect(self) -> None:
        super().connect()
        # For HTTPS this runs before the socket is wrapped: the TLS handshake is bounded too.
        watch(self.sock)


class _TLSConnection(http.client.HTTPSConnection, _Connection):
    pass


class _Handler(urllib.request.HTTPHandler):
    def http_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        return self.do_open(_Connection, req)


class _TLSHandler(urllib.request.HTTPSHandler):
    def https_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        return self.do_open(_TLSConnection, req)


def get_json(
    url: str,
    params: Mapping[str, str] | None = None,
    *,
    what: str,
    headers: Mapping[str, str] | None = None,
) -> Any:
    """GET ``url`` and parse its JSON, the whole request within ANSWER_S; ToolError naming
    ``what`` when it cannot be had."""
    full = f"{url}?{urllib.parse.urlencode(params)}" if params else url
    request = urllib.request.Request(
        full, headers={"Accept": "application/json", **(headers or {})}
    )
    source = f"{what} at {url}"
    with Deadline() as deadline:
        try:
            # urlopen's opener (proxies from the environment, redirects), on connections the
            # deadline watches.
            opener = urllib.request.build_opener(_Handler, _TLSHandler)
            with opener.open(request, timeout=TIMEOUT_S) as response:
                body = read_bounded(iter(lambda: response.read1(1 << 16), b""), source)
        except urllib.error.HTTPError as exc:
            # A refusal, however slowly its body comes: the deadline cuts the body short.
            detail = _error_detail(exc)
            raise ToolError(f"{source}: HTTP {exc.code}: {detail or exc.reason}") from None
        except (urllib.error.URLError, TimeoutError, OSError, http.client.HTTPException) as exc:
            if deadline.expired:
                raise not_within(source) from None
            reason = getattr(exc, "reason", exc)
            raise ToolError(f"{source} does not answer: {reason}") from None
    # An answer the deadline cut short ends as if complete.
    if deadline.expired:
        raise not_within(source)
    try:
        return json.loads(body)
    except ValueError:
        raise ToolError(f"{what} at {url}: the answer is not JSON") from None


def _error_detail(exc: urllib.error.HTTPError) -> str:
    """The start of a refusal's body, or nothing when it cannot be read."""
    try:
        return exc.read(300).decode("utf-8", "replace").strip()
    except (OSError, http.client.HTTPException):
        return ""

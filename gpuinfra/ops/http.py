"""JSON over HTTP with a bound on every request, and one clear line when a server fails."""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from typing import Any

from gpuinfra.errors import ToolError, UsageError

TIMEOUT_S = 15.0


def base_url(option: str, url: str) -> str:
    """A server's base URL as given on the command line; UsageError when it is not one."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise UsageError(f"{option} {url!r}: not an http(s) URL (e.g. http://127.0.0.1:9090)")
    return url.rstrip("/")


def get_json(
    url: str,
    params: Mapping[str, str] | None = None,
    *,
    what: str,
    headers: Mapping[str, str] | None = None,
    timeout: float = TIMEOUT_S,
) -> Any:
    """GET ``url`` and parse its JSON; ToolError naming ``what`` when it cannot be had."""
    full = f"{url}?{urllib.parse.urlencode(params)}" if params else url
    request = urllib.request.Request(
        full, headers={"Accept": "application/json", **(headers or {})}
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            body = response.read()
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

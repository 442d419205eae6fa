#!/usr/bin/python3
"""Why the package transaction did not finish, in one line a person can act on.

Runs on the host (python3, standard library only) after the transaction of roles/node_packages
was killed at its deadline or ended with an error. It reads what the transaction left in its run
directory:

- ``acquire.log``: apt's stderr with ``Debug::pkgAcquire::Worker``, one message between apt and
  its fetch methods per line (`` -> http:600%20URI%20Acquire%0aURI:%20...``), URL-encoded;
- ``status``: apt's ``APT::Status-Fd`` lines (``dlstatus:``, ``pmstatus:``);

and apt's proxy settings (``apt-config dump``), so the line names the repository that did not
answer and the proxy in between.

usage: fetch_report.py RUN_DIR DEADLINE_SECONDS timeout|failed
"""

from __future__ import annotations

import subprocess
import sys
import urllib.parse
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import NamedTuple

ADVICE = "check the mirror or proxy, then converge again"
# The fetch methods that go to the network; gpgv, store, rred and file work on local files.
NETWORK_METHODS = ("http", "https", "ftp", "tor", "mirror")


class Message(NamedTuple):
    """One message between apt and a fetch method: its method, status code and fields."""

    outgoing: bool
    method: str
    code: int
    fields: dict[str, str]


class Fetch(NamedTuple):
    uri: str
    repository: str
    state: str  # asked, started, done or failed
    reason: str


def messages(lines: Iterable[str]) -> Iterator[Message]:
    """The worker messages in apt's acquire log; other stderr lines (E:, W:) are skipped."""
    for line in lines:
        text = line.strip()
        if text[:3] not in ("-> ", "<- "):
            continue
        method, sep, encoded = text[3:].partition(":")
        if not sep:
            continue
        head, *rest = urllib.parse.unquote(encoded).split("\n")
        try:
            code = int(head.split(" ", 1)[0])
        except ValueError:
            continue
        fields = {}
        for item in rest:
            key, sep, value = item.partition(": ")
            if sep:
                fields[key] = value
        yield Message(text.startswith("->"), method, code, fields)


def fetches(lines: Iterable[str]) -> dict[str, Fetch]:
    """Every network fetch apt asked for, by URI, in the state its last message left it."""
    found: dict[str, Fetch] = {}
    for msg in messages(lines):
        if msg.method.split("+")[0] not in NETWORK_METHODS:
            continue
        uri = msg.fields.get("URI", "")
        if not uri:
            continue
        before = found.get(uri)
        repository = msg.fields.get("Target-Repo-URI") or (before.repository if before else "")
        if msg.outgoing and msg.code == 600:
            found[uri] = Fetch(uri, repository, "asked", "")
        elif before is None:
            continue
        elif msg.code == 200:
            found[uri] = before._replace(state="started")
        elif msg.code in (201, 103):
            found[uri] = before._replace(state="done")
        elif msg.code == 400:
            found[uri] = before._replace(state="failed", reason=msg.fields.get("Message", ""))
    return found


def proxies(dump: str) -> dict[str, str]:
    """apt's proxy settings from ``apt-config dump``: 'http' -> URL, 'http::HOST' -> URL or DIRECT."""
    found = {}
    for line in dump.splitlines():
        key, _, value = line.partition(" ")
        parts = key.split("::")
        if len(parts) >= 3 and parts[0] == "Acquire" and parts[2] == "Proxy":
            scope = "::".join([parts[1], *parts[3:]])
            found[scope] = value.strip().rstrip(";").strip('"')
    return found


def _without_credentials(url: str) -> str:
    parts = urllib.parse.urlsplit(url)
    if parts.username is None and parts.password is None:
        return url
    host = parts.hostname or ""
    netloc = f"{host}:{parts.port}" if parts.port else host
    return urllib.parse.urlunsplit(parts._replace(netloc=netloc))


def proxy_for(uri: str, settings: dict[str, str]) -> str:
    """The proxy apt uses for ``uri``, or '' when it connects directly."""
    parts = urllib.parse.urlsplit(uri)
    scheme = parts.scheme.split("+")[-1]
    chosen = settings.get(f"{scheme}::{parts.hostname}", settings.get(scheme, ""))
    if scheme == "https" and not chosen:
        # apt's https method falls back to the http proxy settings.
        chosen = settings.get(f"http::{parts.hostname}", settings.get("http", ""))
    return "" if chosen in ("", "DIRECT") else _without_credentials(chosen)


def _repository(fetch: Fetch) -> str:
    if fetch.repository:
        return fetch.repository
    parts = urllib.parse.urlsplit(fetch.uri)
    return f"{parts.scheme}://{parts.netloc}/"


def _last_status(status: Iterable[str]) -> str:
    lines = [line.strip() for line in status if line.strip()]
    if not lines:
        return "apt had reported no progress"
    kind, _, rest = lines[-1].partition(":")
    description = rest.split(":", 2)[-1]
    return f"the last step was {description!r}" if kind else lines[-1]


def timeout_line(
    acquire: Iterable[str],
    status: Iterable[str],
    settings: dict[str, str],
    deadline: int,
    run_dir: str = "/var/log/gpuinfra/node_packages",
) -> str:
    """The transaction was killed at its deadline: which repositories were still awaited, or,
    when every download had finished, where dpkg was."""
    head = f"apt did not finish within {deadline} s"
    waiting: dict[str, str] = {}
    for fetch in fetches(acquire).values():
        if fetch.state == "asked":
            waiting.setdefault(_repository(fetch), "did not answer")
        elif fetch.state == "started":
            waiting[_repository(fetch)] = "stopped sending"
    if not waiting:
        return (
            f"{head}; every download had finished and {_last_status(status)}; see "
            f"{run_dir}/output.log on the host, raise node_packages_deadline if the install "
            "needs longer, then converge again"
        )
    # Repositories behind the same proxy stall together when the proxy does.
    groups: dict[tuple[str, str], list[str]] = {}
    for repository, what in waiting.items():
        groups.setdefault((proxy_for(repository, settings), what), []).append(repository)
    stalled = []
    for (proxy, what), repositories in groups.items():
        through = f" through the proxy {proxy}" if proxy else ""
        stalled.append(f"{' and '.join(repositories)} {what}{through}")
    return f"{head}; {', '.join(stalled)}; {ADVICE}"


def failure_line(acquire: list[str], settings: dict[str, str]) -> str:
    """apt ended with an error of its own: the fetch that failed last, else apt's first error."""
    failed = [f for f in fetches(acquire).values() if f.state == "failed"]
    if failed:
        first = failed[0]
        more = f" (and {len(failed) - 1} more)" if len(failed) > 1 else ""
        proxy = proxy_for(first.uri, settings)
        through = f" through the proxy {proxy}" if proxy else ""
        return f"apt could not fetch {first.uri}{through}: {first.reason}{more}; {ADVICE}"
    errors = [line.strip() for line in acquire if line.startswith("E: ")]
    return f"apt failed: {errors[0][3:]}" if errors else "apt failed without an error message"


def _read(path: Path) -> list[str]:
    try:
        return path.read_text(errors="replace").splitlines()
    except OSError:
        return []


def main(argv: list[str]) -> int:
    run_dir, deadline, how = Path(argv[1]), int(argv[2]), argv[3]
    dump = subprocess.run(
        ["apt-config", "dump"], capture_output=True, text=True, check=False, timeout=30
    ).stdout
    acquire = _read(run_dir / "acquire.log")
    if how == "timeout":
        status = _read(run_dir / "status")
        print(timeout_line(acquire, status, proxies(dump), deadline, str(run_dir)))
    else:
        print(failure_line(acquire, proxies(dump)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

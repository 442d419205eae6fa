"""A host's package transaction as one short line, from what roles/node_packages reports.

While its apt transaction runs, ``node_packages`` polls the host; each poll (a retry of the task
``Packages | wait for the transaction, reading its progress``) returns lines such as::

    phase=install
    status=pmstatus:nvidia-driver:45.4545:Unpacking nvidia-driver (amd64)
    waiting= <- http:102%20Status%0aMessage:%20Waiting%20for%20headers%0aURI:%20http://...
    finished=0

``status`` is apt's last ``APT::Status-Fd`` line, ``waiting`` its last status message from a
fetch method (``Debug::pkgAcquire::Worker``, URL-encoded). ``describe`` turns them into
"downloading, file 3 of 37 (42%)" or "installing: Unpacking nvidia-driver (amd64) (45%)".
"""

from __future__ import annotations

import re
import urllib.parse

_KEYS = ("phase", "status", "waiting", "finished")
_FILE = re.compile(r"Retrieving file (\d+) of (\d+)")


def fields(stdout: str) -> dict[str, str]:
    """The KEY=VALUE lines of one poll; empty when the output is not a poll's."""
    found = {}
    for line in stdout.splitlines():
        key, sep, value = line.strip().partition("=")
        if sep and key in _KEYS:
            found[key] = value.strip()
    return found if {"phase", "status"} <= found.keys() else {}


def waiting_for(message: str) -> str:
    """'Waiting for headers: http://…' from a method's 102 Status message, or ''."""
    _, sep, encoded = message.strip().partition(":")
    if not sep:
        return ""
    lines = urllib.parse.unquote(encoded).split("\n")
    values = dict(line.split(": ", 1) for line in lines[1:] if ": " in line)
    what, uri = values.get("Message", ""), values.get("URI", "")
    return f"{what}: {uri}" if what and uri else what


def _percent(text: str) -> str:
    try:
        return f"{float(text):.0f}%"
    except ValueError:
        return ""


def describe(stdout: str) -> str | None:
    """One line for the live view, or None when ``stdout`` is not a package transaction poll."""
    found = fields(stdout)
    if not found:
        return None
    phase, status = found["phase"], found["status"]
    kind, _, rest = status.partition(":")
    parts = rest.split(":", 2)
    if kind == "dlstatus" and len(parts) == 3:
        _, percent, description = parts
        match = _FILE.search(description)
        where = f"file {match[1]} of {match[2]}" if match else description
        if phase == "update":
            text = f"reading the indexes, {where}"
        else:
            text = f"downloading, {where} ({_percent(percent)})"
        waiting = waiting_for(found.get("waiting", ""))
        return f"{text}; {waiting}" if waiting else text
    if kind == "pmstatus" and len(parts) == 3:
        _, percent, description = parts
        return f"installing: {description} ({_percent(percent)})"
    if kind in ("pmerror", "pmconffile") and len(parts) == 3:
        return f"dpkg: {parts[2]}"
    return "reading the indexes" if phase == "update" else "resolving the packages"

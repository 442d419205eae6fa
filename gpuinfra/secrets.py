"""Secrets out of everything gpuinfra shows: plans, diffs, the CLI's lines and error lines.

A plan is posted to pull requests (``diff --format markdown``) and kept as a CI artifact, and
CI logs keep what every command prints, so what gpuinfra shows must be safe to publish. Three
kinds of value are replaced by ``<redacted>``:

- the userinfo of a URL (``https://deploy:S3cr3t@mirror.example/``), wherever it sits in a
  string (an apt source line, a Helm value);
- the string values of keys whose name says they hold a secret: a word ``password``,
  ``passwd``, ``passphrase``, ``secret``, ``token`` or ``credentials``, or a last word ``key``
  (``api_key``, ``accessKey``). A key that names or points at a secret rather than holding it
  keeps its value: a last word such as ``name``, ``ref``, ``file``, ``path``, ``url``, ``arn``,
  ``id`` or ``fingerprint`` (``secretName``, ``password_file``, ``repo_key_url``), a first word
  ``existing`` (``existingSecret``), the key of a Secret that holds a password or a user name
  (``passwordKey``, ``userKey``) and a bare ``key`` (a label's, a taint's);
- every value of a Kubernetes Secret's ``data`` and ``stringData``.

Documents pass through ``redact``; every line the CLI writes through ``redact_text`` (URL
userinfo); an error line about a key with a secret's name shows no quoted value
(``redact_message``).

Pulumi secrets are already ``[secret]`` in what the stack runner records
(``gpuinfra.review.stackrun``). The function is idempotent, so ``diff`` applies it again to
the base revision's plan, which older code wrote without it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

REDACTED = "<redacted>"

_USERINFO = re.compile(r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.-]*://)(?P<userinfo>[^\s/@?#]+)@")
_WORD = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|\d+")
SECRET_WORDS = frozenset(
    {"password", "passwd", "passphrase", "secret", "token", "credentials", "apikey"}
)
REFERENCE_WORDS = frozenset(
    {
        "name",
        "names",
        "ref",
        "refs",
        "file",
        "path",
        "dir",
        "url",
        "uri",
        "arn",
        "id",
        "ids",
        "fingerprint",
        "type",
        "length",
        "selector",
        "namespace",
        "prefix",
        "rotation",
        "source",
    }
)
# ``passwordKey: admin-password`` names the key of a Secret that holds the password (Helm
# charts' convention for existing Secrets), as does ``userKey``.
_SECRET_KEY_NAMES = frozenset({"user", "username", "password"})
# Values that are markers, not secrets: what the stack runner writes for unknowns and secrets.
_MARKERS = frozenset({"<computed>", "[secret]", REDACTED, ""})


def words(name: str) -> list[str]:
    """``secretAccessKey`` and ``secret_access_key`` both give secret, access, key."""
    return [w.lower() for w in _WORD.findall(name)]


def secret_name(name: str) -> bool:
    """Whether a key called ``name`` holds a secret (not a reference to one)."""
    parts = words(name)
    if len(parts) < 1 or parts[-1] in REFERENCE_WORDS or parts[0] == "existing":
        return False
    if len(parts) == 2 and parts[-1] == "key" and parts[0] in _SECRET_KEY_NAMES:
        return False
    if any(p in SECRET_WORDS for p in parts):
        return True
    return len(parts) > 1 and parts[-1] == "key"


def redact_text(text: str) -> str:
    """``text`` with every URL's userinfo replaced."""
    return _USERINFO.sub(lambda m: f"{m.group('scheme')}{REDACTED}@", text)


# A quoted string: a value as Python's repr writes it (an escaped quote inside stays inside), or
# a name a message quotes. It opens after a space or a sign, never after a letter: the
# apostrophe in "Kueue's" is prose.
_QUOTED = re.compile(r"(?<![A-Za-z0-9])(?:'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\")")
_PATH_PART = re.compile(r"[^.\[\]:]+")
# Quoted text that a message takes from the program, never from the value: a schema's pattern
# and a suggestion (always one of the allowed names).
_PROGRAM_QUOTES = ("pattern ", "did you mean ")
# What a message lists as allowed: from here to its end, the program's words.
_ALLOWED = "(allowed"
# A value written without quotes after "got" (a number, a list), up to "; " or " (": a boolean
# or None says no more than the key's type.
_BARE = re.compile(r"\bgot (?![\s'\"]|(?:True|False|None)\b).+?(?=; | \(|\s*$)")


def secret_path(path: str) -> bool:
    """Whether a key path (``a.b[0].db_password``) passes through a key with a secret's name."""
    return any(secret_name(part) for part in _PATH_PART.findall(path))


def redact_message(path: str, message: str) -> str:
    """An error line's message about the key at ``path``: no URL login, and, when the path
    names a secret, no value (``got 'hunter2'`` says ``got '<redacted>'``).

    What the program wrote stays: the key names the path holds, a pattern the value must match,
    a did-you-mean suggestion and what the message lists as allowed (``(allowed: ...)``), such
    as the names of secret config entries. Every other quoted string, and a number after
    ``got``, is the value or may be: it is replaced.
    """
    message = redact_text(message)
    if not secret_path(path):
        return message
    keys = set(_PATH_PART.findall(path))
    shown: list[str] = []
    at = 0
    for match in [*_QUOTED.finditer(message), None]:
        end = match.start() if match else len(message)
        gap = message[at:end]
        if _ALLOWED in gap:
            head, _, _ = gap.partition(_ALLOWED)
            return "".join([*shown, _bare(head), message[at + len(head) :]])
        shown.append(_bare(gap))
        if match is None:
            break
        quoted = match.group(0)
        kept = quoted[1:-1] in keys or gap.endswith(_PROGRAM_QUOTES)
        shown.append(quoted if kept else f"'{REDACTED}'")
        at = match.end()
    return "".join(shown)


def _bare(text: str) -> str:
    """``text`` (outside quotes) with a value written bare after "got" replaced."""
    # A quote that opens and never closes: the value may run on to the end.
    opened = re.search(r"(?<![A-Za-z0-9])['\"]", text)
    if opened:
        text = text[: opened.start()] + f"'{REDACTED}'"
    return _BARE.sub(f"got '{REDACTED}'", text)


def redact(value: Any, *, hide: bool = False) -> Any:
    """A copy of a JSON-like ``value`` without the secrets it carries."""
    if isinstance(value, Mapping):
        secret_object = value.get("kind") == "Secret" and str(value.get("apiVersion")) == "v1"
        out: dict[str, Any] = {}
        for key, item in value.items():
            name = str(key)
            hidden = hide or secret_name(name) or (secret_object and name in ("data", "stringData"))
            out[name] = redact(item, hide=hidden)
        return out
    if isinstance(value, list | tuple):
        return [redact(item, hide=hide) for item in value]
    if isinstance(value, str):
        if hide and value not in _MARKERS:
            return REDACTED
        return redact_text(value)
    if hide and isinstance(value, int | float) and not isinstance(value, bool):
        return REDACTED
    return value

"""What the node roles' URL, key, path and label inputs may look like.

These values end up in apt source files, in a signed-by option and on a command line on the host.
A newline or a space in a repository URL adds an option (``[trusted=yes]``) or a whole source
line; a ``$(...)`` in a search path would run where the role looks for a binary. One rule set,
read by ``gpuinfra config check`` (gpuinfra/site.py), by versions.yaml's check and, through the
``gpuinfra_input_problems`` filter (plugins/filter/), by the roles' preflight: a site that passes
the check passes the preflight, and a value that reaches the role without the check is refused
there too.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import urlsplit

from gpuinfra import labels, secrets

# Characters a URL keeps as they are (RFC 3986 unreserved, reserved and '%'), minus those that
# an apt source line or a shell reads: space, quotes, brackets, backslash, '`', '$', ';', '|'.
_URL_CHARS = re.compile(r"[A-Za-z0-9\-._~:/?#@!&'()*+,=%]+")
_URL_UNSAFE = set("'()!*;")
_FINGERPRINT = re.compile(r"[0-9A-F]{40}|[0-9A-F]{64}")
# An absolute path of plain characters: no shell expansion, no separator of a PATH list.
_PATH = re.compile(r"/[A-Za-z0-9._+@/-]*")
# A suite name as apt reads it (bookworm, noble-updates, stable/updates).
_WORD = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/-]*")


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def repo_url_problem(value: Any) -> str:
    """Why ``value`` is not a repository URL apt can be given safely ('' when it is)."""
    if not isinstance(value, str) or not value:
        return "expected a URL, e.g. https://mirror.example.internal/debian"
    if not _URL_CHARS.fullmatch(value) or _URL_UNSAFE & set(value):
        bad = next(c for c in value if not _URL_CHARS.fullmatch(c) or c in _URL_UNSAFE)
        return f"{value!r} holds {bad!r}; a repository URL is one plain http(s) URL"
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return f"{value!r} is not an http(s) URL with a host"
    if parts.username or parts.password:
        # The message names the URL without the login it refuses.
        shown = value.replace(
            parts.netloc, f"{secrets.REDACTED}@{parts.netloc.rpartition('@')[2]}", 1
        )
        return (
            f"{shown!r} carries credentials; give apt its login in /etc/apt/auth.conf.d/ "
            "instead, where it stays out of source files and logs"
        )
    return ""


def key_url_problem(value: Any) -> str:
    """Why ``value`` is not a URL a signing key may be fetched from ('' when it is)."""
    problem = repo_url_problem(value)
    if problem:
        return problem.replace("repository URL", "key URL")
    parts = urlsplit(value)
    # Over http anyone in the network path hands out their own key; loopback has no such path
    # (the lab serves its stand-in repository there).
    if parts.scheme != "https" and not _loopback(parts.hostname or ""):
        return f"{value!r} is fetched over http; serve the key over https"
    return ""


def fingerprint_problem(value: Any) -> str:
    """Why ``value`` is not a full OpenPGP fingerprint ('' when it is)."""
    text = normal_fingerprint(value) if isinstance(value, str) else ""
    if not _FINGERPRINT.fullmatch(text):
        return (
            f"{value!r} is not a full key fingerprint (40 hexadecimal digits, as "
            "`gpg --show-keys` prints it; a short key id can be forged)"
        )
    return ""


def normal_fingerprint(value: str) -> str:
    """A fingerprint as the roles compare it: upper case, without spaces."""
    return "".join(value.split()).upper()


def path_problem(value: Any) -> str:
    """Why ``value`` is not a plain absolute path ('' when it is)."""
    if not isinstance(value, str) or not _PATH.fullmatch(value):
        return (
            f"{value!r} is not a plain absolute path (letters, digits and . _ + @ / - only; "
            "no $, quotes, spaces or ':')"
        )
    return ""


def paths_problem(value: Any) -> str:
    """Why ``value`` is not a list of plain absolute paths ('' when it is)."""
    if not isinstance(value, list):
        return "expected a list of absolute paths"
    return next((path_problem(item) for item in value if path_problem(item)), "")


def word_problem(value: Any) -> str:
    if not isinstance(value, str) or not _WORD.fullmatch(value):
        return f"{value!r} is not a plain apt suite name (letters, digits and . _ / -)"
    return ""


KINDS: dict[str, Callable[[Any], str]] = {
    "repo_url": repo_url_problem,
    "key_url": key_url_problem,
    "fingerprint": fingerprint_problem,
    "path": path_problem,
    "paths": paths_problem,
    "word": word_problem,
    "node_labels": labels.host_labels_problem,
}

# The role variables these rules apply to.
VARIABLES: dict[str, str] = {
    "nvidia_driver_distro_repo_url": "repo_url",
    "nvidia_driver_distro_suite": "word",
    "nvidia_driver_cuda_repo_url": "repo_url",
    "nvidia_driver_cuda_repo_key_url": "key_url",
    "nvidia_driver_cuda_repo_key_fingerprint": "fingerprint",
    "nvidia_driver_rhel_cuda_repo_url": "repo_url",
    "nvidia_driver_preinstalled_paths": "paths",
    "nvidia_container_toolkit_repo_url": "repo_url",
    "nvidia_container_toolkit_repo_key_url": "key_url",
    "nvidia_container_toolkit_repo_key_fingerprint": "fingerprint",
    "nvidia_container_toolkit_containerd_repo_url": "repo_url",
    "nvidia_container_toolkit_containerd_repo_key_url": "key_url",
    "nvidia_container_toolkit_containerd_repo_key_fingerprint": "fingerprint",
    "nvidia_container_toolkit_containerd_dropin": "path",
    "nvidia_container_toolkit_docker_daemon_json": "path",
    "nvidia_container_toolkit_runtime_path": "path",
    "nvidia_container_toolkit_cdi_spec": "path",
    "gpu_node_registration_labels": "node_labels",
}


def problem(name: str, value: Any) -> str:
    """Why role variable ``name`` may not hold ``value`` ('' when it may, or no rule covers it)."""
    kind = VARIABLES.get(name)
    return KINDS[kind](value) if kind else ""


def problems(variables: Mapping[str, Any]) -> list[str]:
    """``name: why`` for each variable of ``variables`` that breaks its rule."""
    return [f"{name}: {why}" for name, value in variables.items() if (why := problem(name, value))]

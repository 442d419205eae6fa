"""What gpuinfra's node roles read on a host, shared by their facts modules.

Each node role works on its own, outside this repository too, so each carries this file; the
copies are identical (tests/unit/roles/test_node_facts_modules.py).

The stamp lets a role skip its file tasks on a converged host: it records the state of every path
those tasks write, and a fingerprint of every input they read, as both were when the tasks last
ran to the end. While both still match, the tasks would find nothing to do; each template or copy
task costs two module runs per host to find that out.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import tempfile


def dpkg_packages(module, names):
    """name -> {version, status} for the packages dpkg knows; unknown names are left out."""
    if not names or not shutil.which("dpkg-query"):
        return {}
    _rc, out, _err = module.run_command(
        ["dpkg-query", "-W", "-f=${Package}\t${Version}\t${Status}\n", "--", *names]
    )
    packages = {}
    for line in out.splitlines():
        parts = line.split("\t")
        if len(parts) == 3:
            packages[parts[0]] = {"version": parts[1], "status": parts[2]}
    return packages


def path_state(path):
    """'absent', 'dir UID:GID:MODE' or 'file SHA1 UID:GID:MODE': what the file tasks compare."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return "absent"
    owner = f"{info.st_uid}:{info.st_gid}:{stat.S_IMODE(info.st_mode):o}"
    if stat.S_ISDIR(info.st_mode):
        return "dir " + owner
    if not stat.S_ISREG(info.st_mode):
        return "other " + owner
    digest = hashlib.sha1()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(65536), b""):
            digest.update(block)
    return f"file {digest.hexdigest()} {owner}"


def stamp_drift(stamp, paths, fingerprint):
    """Why the file tasks must run ('' when the stamp matches the paths and the fingerprint)."""
    try:
        with open(stamp, encoding="utf-8") as handle:
            recorded = json.load(handle)
    except (OSError, ValueError):
        return f"no readable stamp at {stamp}"
    if not isinstance(recorded, dict) or recorded.get("fingerprint") != fingerprint:
        return "the role's inputs changed since the stamp"
    states = recorded.get("paths")
    if not isinstance(states, dict) or sorted(states) != sorted(paths):
        return "the role writes other paths than the stamp records"
    for path in paths:
        if states[path] != path_state(path):
            return f"{path} changed since the stamp"
    return ""


def write_stamp(stamp, paths, fingerprint):
    """Record the paths' states and the fingerprint, atomically."""
    directory = os.path.dirname(stamp)
    os.makedirs(directory, mode=0o755, exist_ok=True)
    document = {"fingerprint": fingerprint, "paths": {path: path_state(path) for path in paths}}
    handle, temporary = tempfile.mkstemp(dir=directory, prefix=".stamp-")
    with os.fdopen(handle, "w", encoding="utf-8") as out:
        json.dump(document, out, indent=2, sort_keys=True)
    os.chmod(temporary, 0o644)
    os.replace(temporary, stamp)


def unit_states(module, units):
    states = {}
    tool = shutil.which("systemctl")
    for unit in units:
        state = {"enabled": "", "active": ""}
        if tool:
            for key, verb in (("enabled", "is-enabled"), ("active", "is-active")):
                _rc, out, _err = module.run_command([tool, verb, unit])
                state[key] = out.strip()
        states[unit] = state
    return states

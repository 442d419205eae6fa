"""Which repository gpuinfra acts on: the one the user stands in.

Like git with ``.git``, the CLI walks up from the working directory to the first directory that
holds both ``versions.yaml`` and ``Pulumi.yaml``. ``GPUINFRA_ROOT`` overrides the walk (the diff
plans a base revision that way). The installed package's own location is never used: a venv in
one checkout serves every worktree of it.
"""

from __future__ import annotations

import os
from pathlib import Path

from gpuinfra.errors import UsageError

# The two files that make a directory a gpuinfra repository: the pins and the Pulumi project.
MARKERS = ("versions.yaml", "Pulumi.yaml")


def is_repository(path: Path) -> bool:
    return all((path / marker).is_file() for marker in MARKERS)


def find_root(start: Path) -> Path | None:
    """The first directory from ``start`` upwards that holds every marker, or None."""
    for candidate in (start, *start.parents):
        if is_repository(candidate):
            return candidate
    return None


def repo_root() -> Path:
    """The repository root: ``GPUINFRA_ROOT`` when set, else found from the working directory."""
    env = os.environ.get("GPUINFRA_ROOT")
    if env:
        # An explicit root is taken as it is: a file missing there is reported by its reader.
        root = Path(env).resolve()
        if not root.is_dir():
            raise UsageError(f"GPUINFRA_ROOT={env}: no such directory; unset it or point it at one")
        return root
    try:
        here = Path.cwd().resolve()
    except FileNotFoundError:
        raise UsageError(
            "the working directory no longer exists; cd into a gpuinfra repository"
        ) from None
    found = find_root(here)
    if found is None:
        raise UsageError(
            f"{here}: not inside a gpuinfra repository (no {' and '.join(MARKERS)} here "
            "or in any parent); cd into one or set GPUINFRA_ROOT"
        )
    return found

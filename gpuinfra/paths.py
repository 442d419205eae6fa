"""Where the repository is: the CLI and the library read versions.yaml, stacks/ and roles/."""

from __future__ import annotations

import os
from pathlib import Path

_PACKAGE_ROOT = Path(__file__).resolve().parent.parent


def repo_root() -> Path:
    """The repository root: ``GPUINFRA_ROOT`` when set, else the checkout holding this package."""
    env = os.environ.get("GPUINFRA_ROOT")
    return Path(env).resolve() if env else _PACKAGE_ROOT


def shared_dir() -> Path:
    """``../shared`` beside the repository: upstream chart data, facts and fixtures."""
    env = os.environ.get("GPUINFRA_SHARED")
    return Path(env).resolve() if env else repo_root().parent / "shared"

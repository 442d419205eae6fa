"""The node check's parsing library, loaded from the role, and the real H200 outputs."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROLES = Path(__file__).resolve().parents[3] / "roles"
MODULE_UTILS = ROLES / "gpu_node_check" / "module_utils" / "nvidia_node_check.py"


@pytest.fixture(scope="session")
def nnc() -> ModuleType:
    """roles/gpu_node_check/module_utils/nvidia_node_check.py as a plain module."""
    spec = importlib.util.spec_from_file_location("nvidia_node_check", MODULE_UTILS)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def h200(shared: Path) -> Path:
    folder = shared / "fixtures" / "nvidia-h200"
    if not folder.is_dir():
        pytest.fail(f"the real H200 outputs are required at {folder}")
    return folder

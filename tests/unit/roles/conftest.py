"""The node check's parsing library, loaded from the role, the real H200 outputs, and
ansible-playbook run against this machine."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[3]
ROLES = ROOT / "roles"
MODULE_UTILS = ROLES / "gpu_node_check" / "module_utils" / "nvidia_node_check.py"
H200 = ROOT / "tests" / "fixtures" / "nvidia-h200"


def load_module(name: str, path: Path) -> ModuleType:
    """A Python file that a role ships (module_utils, files/) as a plain module."""
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def nnc() -> ModuleType:
    """roles/gpu_node_check/module_utils/nvidia_node_check.py as a plain module."""
    return load_module("nvidia_node_check", MODULE_UTILS)


@pytest.fixture(scope="session")
def h200() -> Path:
    """Real outputs of nvidia-smi and the driver on an H200 host (tests/fixtures/nvidia-h200)."""
    return H200


def run_playbook_here(
    tmp_path: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """ansible-playbook from this environment, run from the repository against this machine.

    Facts stay in memory and temporary files under tmp_path, so nothing is left in .lab/; the host
    is reached with this interpreter.
    """
    return subprocess.run(
        [
            str(Path(sys.executable).parent / "ansible-playbook"),
            "-e",
            f"ansible_python_interpreter={sys.executable}",
            *args,
        ],
        capture_output=True,
        text=True,
        env={
            **os.environ,
            "ANSIBLE_LOCAL_TEMP": str(tmp_path / "ansible"),
            "ANSIBLE_NOCOLOR": "1",
            **(env or {}),
        },
        cwd=ROOT,
        timeout=300,
        check=False,
    )

"""Golden plan files and a scratch git repository holding a copy of the working tree.

Golden files in ``tests/golden/`` are compared byte for byte. Rewriting them is a deliberate act:

    GPUINFRA_UPDATE_GOLDEN=1 .venv/bin/pytest tests/unit/review

then read the change in ``git diff tests/golden`` before committing it.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import ROOT

GOLDEN = ROOT / "tests" / "golden"


@pytest.fixture(scope="session")
def update_golden() -> bool:
    return os.environ.get("GPUINFRA_UPDATE_GOLDEN") == "1"


def git(repo: Path, *args: str) -> str:
    proc = subprocess.run(
        ["git", "-c", "user.name=gpuinfra-test", "-c", "user.email=test@gpuinfra.invalid", *args],
        cwd=repo,
        capture_output=True,
        text=True,
        check=True,
    )
    return proc.stdout.strip()


def stand_in_repo(root: Path, planner: str, envs: tuple[str, ...] = ("dev",)) -> Path:
    """A repository of one commit whose ``gpuinfra.review`` is ``planner``, with the stacks
    ``envs`` and no more: diff plans each side with that side's own stand-in."""
    (root / "stacks").mkdir(parents=True)
    for name in ("versions.yaml", "Pulumi.yaml", *(f"stacks/Pulumi.{env}.yaml" for env in envs)):
        (root / name).write_text((ROOT / name).read_text())
    (root / "gpuinfra" / "review").mkdir(parents=True)
    for name in ("__init__.py", "review/__init__.py", "review/plan.py"):
        (root / "gpuinfra" / name).write_text("")
    (root / "gpuinfra" / "review" / "__main__.py").write_text(planner)
    git(root, "init", "--quiet", "--initial-branch=main")
    git(root, "add", "--all")
    git(root, "commit", "--quiet", "--message", "base")
    return root


def worktrees(repo: Path) -> list[str]:
    """The paths of ``repo``'s worktrees, its own first."""
    listed = git(repo, "worktree", "list", "--porcelain")
    return [
        line.removeprefix("worktree ")
        for line in listed.splitlines()
        if line.startswith("worktree ")
    ]


@pytest.fixture(scope="session")
def base_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A git repository whose one commit is the working tree as it is now (tracked and new files)."""
    repo = tmp_path_factory.mktemp("base") / "repo"
    listed = git(ROOT, "ls-files", "--cached", "--others", "--exclude-standard", "-z")
    for name in filter(None, listed.split("\0")):
        target = repo / name
        target.parent.mkdir(parents=True, exist_ok=True)
        # A file listed a moment ago may be gone (an editor's temporary file): skip it.
        with contextlib.suppress(FileNotFoundError, IsADirectoryError):
            shutil.copy2(ROOT / name, target)
    git(repo, "init", "--quiet", "--initial-branch=main")
    git(repo, "add", "--all")
    git(repo, "commit", "--quiet", "--message", "base")
    return repo


@pytest.fixture
def clone(base_repo: Path, tmp_path: Path) -> Callable[[str, Callable[[Path], None]], Path]:
    """A clone of the base repository with one more commit made by ``change(root)``."""

    def make(message: str, change: Callable[[Path], None]) -> Path:
        repo = tmp_path / "clone"
        subprocess.run(
            ["git", "clone", "--quiet", str(base_repo), str(repo)], check=True, capture_output=True
        )
        change(repo)
        git(repo, "add", "--all")
        git(repo, "commit", "--quiet", "--message", message)
        return repo

    return make


# Triton on the staging stack with a serving group behind a gateway, its canary at 10%.
STAGING_TRITON = """\
    triton:
      enabled: true
      modelRepository: {s3: "s3://models/repo"}
      gpuType: l40s
      gateway: {name: inference, namespace: gateways}
      models:
        - {name: resnet50, backend: onnxruntime}
      servingGroups:
        - name: vision
          models: [resnet50]
          cpu: "2"
          memory: 8Gi
          canary: {weight: 10}
"""


def staging_serves_behind_a_gateway(root: Path) -> None:
    """Add Triton's serving group to ``root``'s staging stack. Its pods and the canary's hold two
    GPUs outside Kueue: the L40S pool grows to three nodes and Kueue grants the third."""
    stack = root / "stacks" / "Pulumi.staging.yaml"
    text = stack.read_text()
    edits = (
        ("      maxSize: 2\n", "      maxSize: 3\n"),
        ("{gpuType: l40s, gpus: 2,", "{gpuType: l40s, gpus: 1,"),
    )
    for old, new in edits:
        assert text.count(old) == 1, "staging's L40S pool or flavor changed: update this helper"
        text = text.replace(old, new)
    stack.write_text(text + STAGING_TRITON)

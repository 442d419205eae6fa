"""The CLI acts on the repository the user stands in, found as git finds ``.git``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import ROOT

COMMAND = Path(sys.executable).parent / "gpuinfra"


def run_in(cwd: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """The console script, as installed, run from ``cwd`` without GPUINFRA_ROOT."""
    clean = {k: v for k, v in os.environ.items() if k != "GPUINFRA_ROOT"}
    return subprocess.run(
        [str(COMMAND), *args],
        cwd=cwd,
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_a_subdirectory_of_the_repository_finds_its_root() -> None:
    result = run_in(ROOT / "roles" / "nvidia_driver", "versions", "check")
    assert result.returncode == 0, result.stderr
    assert "all compatibility rules pass" in result.stdout


def test_another_repository_is_read_not_the_installed_one(tmp_path: Path) -> None:
    repo = tmp_path / "other"
    repo.mkdir()
    (repo / "Pulumi.yaml").write_text((ROOT / "Pulumi.yaml").read_text())
    text = (ROOT / "versions.yaml").read_text()
    text = text.replace('"580.159.04"', '"580.172.01"').replace('"580.159.04-1"', '"580.172.01-1"')
    (repo / "versions.yaml").write_text(text)
    (repo / "deep" / "er").mkdir(parents=True)
    result = run_in(repo / "deep" / "er", "versions", "show", "--format", "json")
    assert result.returncode == 0, result.stderr
    assert "580.172.01" in result.stdout
    assert "580.159.04" not in result.stdout


def test_outside_any_repository_is_one_line_and_exit_2(tmp_path: Path) -> None:
    result = run_in(tmp_path, "versions", "check")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f"error: {tmp_path.resolve()}: not inside a gpuinfra repository (no versions.yaml and "
        "Pulumi.yaml here or in any parent); cd into one or set GPUINFRA_ROOT"
    ]
    assert result.stdout == ""


def test_help_needs_no_repository(tmp_path: Path) -> None:
    result = run_in(tmp_path, "--help")
    assert result.returncode == 0, result.stderr
    assert "versions" in result.stdout


def test_gpuinfra_root_overrides_the_walk(tmp_path: Path) -> None:
    result = run_in(tmp_path, "versions", "check", GPUINFRA_ROOT=str(ROOT))
    assert result.returncode == 0, result.stderr
    missing = run_in(ROOT, "versions", "check", GPUINFRA_ROOT=str(tmp_path / "nope"))
    assert missing.returncode == 2
    assert "GPUINFRA_ROOT=" in missing.stderr and "no such directory" in missing.stderr

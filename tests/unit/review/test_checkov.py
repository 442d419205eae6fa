"""checkov, a second opinion: the Kubernetes objects of every stack and site pass its checks,
except the failures ``policies/checkov-skips.yaml`` lists with their reasons.

checkov runs from its own environment (``.tools/checkov``, installed by scripts/setup.sh from
the hashed lock in scripts/checkov/), offline: no download of Prisma Cloud's mappings, no check
for a newer release.
"""

from __future__ import annotations

import fnmatch
import json
import os
import subprocess
from typing import Any

import pytest
import yaml

from gpuinfra.review import diff, manifests
from tests.conftest import ROOT

CHECKOV = ROOT / ".tools" / "checkov" / "bin" / "checkov"
SKIPS = ROOT / "policies" / "checkov-skips.yaml"


def skips() -> list[dict[str, str]]:
    entries: list[dict[str, str]] = yaml.safe_load(SKIPS.read_text())["skips"]
    return entries


@pytest.fixture(scope="module")
def scanned(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """checkov's JSON report over every target's objects, one directory per target."""
    if not CHECKOV.exists():
        pytest.fail("checkov is not installed: run bash scripts/setup.sh")
    out = tmp_path_factory.mktemp("manifests")
    targets = diff.targets(ROOT)
    assert {t.kind for t in targets} == {"stack", "site"}
    for target in targets:
        objects = (
            manifests.stack_manifests(target.name)
            if target.kind == "stack"
            else manifests.site_manifests(ROOT / target.argument)
        )
        assert objects, target.label
        folder = out / target.label.replace(" ", "-")
        folder.mkdir()
        (folder / "objects.yaml").write_text(yaml.safe_dump_all(objects, sort_keys=True))
    env = {**os.environ, "CKV_SKIP_PACKAGE_UPDATE_CHECK": "true", "LOG_LEVEL": "WARNING"}
    proc = subprocess.run(
        [
            str(CHECKOV),
            "--directory",
            str(out),
            "--framework",
            "kubernetes",
            "--skip-download",
            "--compact",
            "--output",
            "json",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        check=False,
    )
    # checkov exits 1 when a check fails; anything else is checkov not working.
    assert proc.returncode in (0, 1), proc.stderr[-3000:]
    report = json.loads(proc.stdout)
    reports: list[dict[str, Any]] = report if isinstance(report, list) else [report]
    (kubernetes,) = [r for r in reports if r.get("check_type") == "kubernetes"]
    return kubernetes


def test_every_skip_gives_a_reason() -> None:
    for entry in skips():
        assert set(entry) == {"check", "resource", "reason"}, entry
        assert len(entry["reason"].split()) >= 8, entry


def test_checkov_scanned_the_objects_of_every_target(scanned: dict[str, Any]) -> None:
    summary = scanned["summary"]
    assert summary["parsing_errors"] == 0
    assert summary["resource_count"] >= 40
    files = {c["file_path"].split("/")[1] for c in scanned["results"]["passed_checks"]}
    assert files == {t.label.replace(" ", "-") for t in diff.targets(ROOT)}


def test_no_failed_check_but_the_listed_skips(scanned: dict[str, Any]) -> None:
    failed = {
        (c["check_id"], c["resource"]): c["file_path"] for c in scanned["results"]["failed_checks"]
    }
    # A skip's resource may end in '*' (the smoke test Job's name carries a digest).
    listed = {(e["check"], e["resource"]) for e in skips()}

    def covered(check: str, resource: str) -> bool:
        return any(c == check and fnmatch.fnmatchcase(resource, r) for c, r in listed)

    unlisted = sorted(key for key in failed if not covered(*key))
    assert unlisted == [], "checkov failures not in policies/checkov-skips.yaml: " + ", ".join(
        f"{check} on {resource} ({failed[(check, resource)]})" for check, resource in unlisted
    )
    stale = sorted(
        (c, r)
        for c, r in listed
        if not any(c == f and fnmatch.fnmatchcase(x, r) for f, x in failed)
    )
    assert stale == [], f"skips that no longer fail, to remove from {SKIPS.name}: {stale}"

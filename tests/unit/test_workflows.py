"""The CI workflows: valid for GitHub, and no pull request's code near a credential.

The test job runs a pull request's code, so it holds a read-only token and no checkout
credential; the comment job that may write to pull requests runs none of it; the preview job
gets AWS through OIDC and the Pulumi secrets in one step, behind an environment.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from tests.conftest import ROOT

WORKFLOWS = ROOT / ".github" / "workflows"
PINNED = re.compile(r"^[\w.-]+/[\w.-]+(/[\w./-]+)?@[0-9a-f]{40}$")


def _load(name: str) -> dict[Any, Any]:
    document: dict[Any, Any] = yaml.safe_load((WORKFLOWS / name).read_text())
    # YAML 1.1 reads the key `on` as True.
    document["on"] = document.pop(True, document.get("on"))
    return document


def _steps(workflow: dict[Any, Any]) -> list[tuple[str, dict[str, Any]]]:
    return [(job, step) for job, body in workflow["jobs"].items() for step in body.get("steps", [])]


def test_workflows_validate_against_githubs_schema() -> None:
    files = sorted(str(p) for p in WORKFLOWS.glob("*.yml"))
    checked = subprocess.run(
        [str(Path(sys.executable).parent / "check-jsonschema"), "--builtin-schema",
         "vendor.github-workflows", *files],
        capture_output=True, text=True,
    )  # fmt: skip
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_every_action_is_pinned_by_commit() -> None:
    for path in WORKFLOWS.glob("*.yml"):
        for job, step in _steps(_load(path.name)):
            if "uses" in step:
                assert PINNED.match(step["uses"]), f"{path.name} {job}: {step['uses']}"


def test_checkouts_keep_no_credential() -> None:
    for path in WORKFLOWS.glob("*.yml"):
        for job, step in _steps(_load(path.name)):
            if str(step.get("uses", "")).startswith("actions/checkout@"):
                assert step["with"]["persist-credentials"] is False, f"{path.name} {job}"


def test_the_job_that_runs_pull_request_code_cannot_write() -> None:
    ci = _load("ci.yml")
    assert ci["permissions"] == {"contents": "read"}
    assert ci["jobs"]["test"]["permissions"] == {"contents": "read"}
    text = (WORKFLOWS / "ci.yml").read_text()
    assert "gh pr comment" not in text
    assert "pull-requests: write" not in text


def test_comments_come_from_a_workflow_run_job_that_runs_no_pull_request_code() -> None:
    comment = _load("ci-comment.yml")
    assert comment["on"] == {"workflow_run": {"workflows": ["ci"], "types": ["completed"]}}
    uses = [step.get("uses", "") for _job, step in _steps(comment)]
    assert not any(u.startswith("actions/checkout@") for u in uses)
    assert comment["jobs"]["comment"]["permissions"] == {
        "actions": "read",
        "pull-requests": "write",
    }


def test_preview_assumes_a_role_through_oidc_behind_an_environment() -> None:
    preview = _load("ci.yml")["jobs"]["preview"]
    assert preview["permissions"] == {"contents": "read", "id-token": "write"}
    assert preview["environment"] == "preview"
    text = (WORKFLOWS / "ci.yml").read_text()
    assert "AWS_ACCESS_KEY_ID" not in text and "AWS_SECRET_ACCESS_KEY" not in text
    (assume,) = [s for s in preview["steps"] if "configure-aws-credentials" in s.get("uses", "")]
    assert "role-to-assume" in assume["with"]
    # Secrets only in the step that needs them, never job-wide.
    assert "secrets." not in yaml.safe_dump(preview.get("env", {}))
    with_secrets = [s["name"] for s in preview["steps"] if "secrets." in yaml.safe_dump(s)]
    assert with_secrets == ["pulumi preview -s ${{ matrix.stack }} with the policy pack"]


def test_the_pulumi_cli_is_a_pinned_release_checked_by_its_checksum() -> None:
    text = (WORKFLOWS / "ci.yml").read_text()
    assert "get.pulumi.com" not in text
    assert not re.search(r"\| *(ba)?sh\b", text), "a download piped into a shell"
    (install,) = [
        s for s in _load("ci.yml")["jobs"]["preview"]["steps"] if "Pulumi CLI" in s.get("name", "")
    ]
    assert "sha256sum --check --strict" in install["run"]
    assert ".github/pulumi-cli.sha256" in install["run"]
    # The checksum comes before the archive is unpacked.
    assert install["run"].index("sha256sum --check") < install["run"].index("tar -x")


def test_without_a_pinned_checksum_the_cli_step_says_which_line_to_add(tmp_path: Path) -> None:
    job = _load("ci.yml")["jobs"]["preview"]
    (install,) = [s for s in job["steps"] if "Pulumi CLI" in s.get("name", "")]
    version = job["env"]["PULUMI_VERSION"]
    archive = f"pulumi-v{version}-linux-x64.tar.gz"
    pins = (ROOT / ".github" / "pulumi-cli.sha256").read_text()
    lines = [line.split() for line in pins.splitlines() if line and not line.startswith("#")]
    if any(name == archive for _, name in lines):
        # Pinned: the line is what sha256sum --check reads.
        assert all(re.fullmatch(r"[0-9a-f]{64}", digest) for digest, _ in lines)
        return
    proc = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", install["run"]],
        cwd=ROOT,
        env={"PATH": "/usr/bin:/bin", "PULUMI_VERSION": version, "RUNNER_TEMP": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 1
    assert proc.stderr.splitlines() == [
        f"no sha256 for {archive} in .github/pulumi-cli.sha256; add this line:",
        f"<sha256>  {archive}",
        f"with <sha256> the one https://github.com/pulumi/pulumi/releases/download/v{version}/"
        f"pulumi-{version}-checksums.txt gives for {archive}",
    ]
    assert not list(tmp_path.iterdir()), "nothing was downloaded"

"""Opt-in: ``pulumi preview`` of the dev stack with the policy pack, through the Automation API.

Runs when a ``pulumi`` CLI is on the PATH and AWS credentials are configured; skipped
otherwise, saying which is missing. The state lives in a local file backend under the test's
temporary directory and the project is copied there first, so the repository's stack file is
not touched (a local backend writes its encryption salt into the stack file). Nothing is created
in AWS: a preview only reads.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


def _missing() -> str | None:
    if shutil.which("pulumi") is None:
        return "no pulumi CLI on the PATH (install it from pulumi.com to run this preview)"
    profile = os.environ.get("AWS_PROFILE")
    keys = os.environ.get("AWS_ACCESS_KEY_ID") and os.environ.get("AWS_SECRET_ACCESS_KEY")
    shared = Path(os.environ.get("AWS_SHARED_CREDENTIALS_FILE", Path.home() / ".aws/credentials"))
    if not (profile or keys or shared.is_file()):
        return "no AWS credentials (AWS_PROFILE, AWS_ACCESS_KEY_ID or ~/.aws/credentials)"
    return None


def _copy_project(dest: Path) -> Path:
    """The project files Pulumi reads, with the virtualenv pointed at the repository's."""
    venv = str(ROOT / ".venv")
    shutil.copytree(ROOT / "stacks", dest / "stacks")
    shutil.copytree(ROOT / "policies", dest / "policies")
    shutil.copy(ROOT / "versions.yaml", dest / "versions.yaml")
    project = yaml.safe_load((ROOT / "Pulumi.yaml").read_text())
    project["runtime"]["options"] = {"virtualenv": venv}
    (dest / "Pulumi.yaml").write_text(yaml.safe_dump(project, sort_keys=False))
    pack = yaml.safe_load((ROOT / "policies" / "PulumiPolicy.yaml").read_text())
    pack["runtime"]["options"] = {"virtualenv": venv}
    (dest / "policies" / "PulumiPolicy.yaml").write_text(yaml.safe_dump(pack, sort_keys=False))
    return dest


@pytest.mark.skipif(_missing() is not None, reason=_missing() or "")
def test_preview_of_the_dev_stack_passes_the_policy_pack(tmp_path: Path) -> None:
    from pulumi import automation as auto

    project = _copy_project(tmp_path / "project")
    backend = tmp_path / "state"
    backend.mkdir()
    env = {
        "PULUMI_BACKEND_URL": f"file://{backend}",
        "PULUMI_CONFIG_PASSPHRASE": "preview-only",
        "GPUINFRA_ROOT": str(project),
    }
    stack = auto.create_or_select_stack(
        stack_name="dev",
        work_dir=str(project),
        opts=auto.LocalWorkspaceOptions(work_dir=str(project), env_vars=env),
    )
    result = stack.preview(policy_packs=[str(project / "policies")], color="never")
    creates = result.change_summary.get(auto.OpType.CREATE, 0)
    # A mandatory policy violation would have failed the preview itself.
    assert creates > 40, result.stdout

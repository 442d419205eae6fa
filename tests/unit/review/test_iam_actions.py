"""The IAM action lists the pack judges policies by are those of the checkov it is compared
with: read again from cloudsplaining and policy_sentry as ``.tools/checkov`` installs them."""

from __future__ import annotations

import json
import subprocess

import pytest

from gpuinfra.review import iam_actions
from tests.conftest import ROOT

PYTHON = ROOT / ".tools" / "checkov" / "bin" / "python"
READ = """
import json
from checkov.terraform.checks.resource.aws.IAMCredentialsExposure import (
    CloudSplainingCredentialsExposure as exposure,
)
from cloudsplaining.shared import constants as c
from cloudsplaining.shared.utils import remove_wildcard_only_actions
from policy_sentry.querying.actions import get_action_data

escalation = {k: [a.lower() for a in v] for k, v in c.PRIVILEGE_ESCALATION_METHODS.items()}
credentials = [a.lower() for a in c.ACTIONS_THAT_RETURN_CREDENTIALS]
excluded = [a.lower() for a in exposure.excluded_actions]
exfiltration = [a.lower() for a in c.READ_ONLY_DATA_EXFILTRATION_ACTIONS]
every = sorted({a for v in escalation.values() for a in v} | set(credentials) | set(exfiltration))
scoped = {a.lower() for a in remove_wildcard_only_actions(every)}


def known(action):
    service, name = action.split(":")
    try:
        return bool((get_action_data(service, name) or {}).get(service))
    except Exception:
        return False


print(json.dumps({
    "escalation": escalation,
    "credentials": [a for a in credentials if a not in excluded],
    "exfiltration": exfiltration,
    "wildcard_only": sorted(a for a in every if a not in scoped and known(a)),
}))
"""


@pytest.fixture(scope="module")
def checkovs() -> dict[str, object]:
    if not PYTHON.exists():
        pytest.fail("checkov is not installed: run bash scripts/setup.sh")
    out = subprocess.run([str(PYTHON), "-c", READ], capture_output=True, text=True, check=True)
    facts: dict[str, object] = json.loads(out.stdout)
    return facts


def test_privilege_escalation_methods_are_checkovs(checkovs: dict[str, object]) -> None:
    ours = {k: list(v) for k, v in iam_actions.PRIVILEGE_ESCALATION.items()}
    assert ours == checkovs["escalation"]


def test_credential_and_data_actions_are_checkovs(checkovs: dict[str, object]) -> None:
    assert list(iam_actions.CREDENTIALS_EXPOSURE) == checkovs["credentials"]
    assert list(iam_actions.DATA_EXFILTRATION) == checkovs["exfiltration"]


def test_the_unscopable_actions_are_policy_sentrys(checkovs: dict[str, object]) -> None:
    assert sorted(iam_actions.WILDCARD_ONLY) == checkovs["wildcard_only"]

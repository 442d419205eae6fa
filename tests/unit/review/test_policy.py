"""The policy rules one by one, and the limits file: what the corpus of prod variations
(test_policy_corpus.py) does not reach."""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from gpuinfra.config import parse_stack, world_cidr
from gpuinfra.errors import ConfigError
from gpuinfra.loading import load_yaml
from gpuinfra.review import policy as v
from tests.conftest import ROOT, run_cli

DEV = v.Limits("dev", ("g6.xlarge",), max_nodes=4, monthly_budget_usd=1500)
PROD = v.Limits("prod", ("p5.48xlarge", "p5e.48xlarge"), max_nodes=4, monthly_budget_usd=100_000)
TAGS = {"team": "ml", "project": "gpuinfra", "cost-center": "cc-1"}


@dataclass(frozen=True)
class Res:
    type_: str
    inputs: dict[str, Any]
    name: str = "r"
    parent: str | None = "component"
    property_dependencies: dict[str, tuple[str, ...]] = field(default_factory=dict)

    @property
    def urn(self) -> str:
        return f"urn:pulumi:dev::gpuinfra::{self.type_}::{self.name}"


NG = v.NODE_GROUP


def node_group(instance_type: str = "g6.xlarge", max_size: int = 2, **inputs: object) -> Res:
    base = {
        "instanceTypes": [instance_type],
        "scalingConfig": {"minSize": 0, "maxSize": max_size, "desiredSize": 0},
        "launchTemplate": {"id": "lt-1", "version": "1"},
        "releaseVersion": "1.34.2-20261110",
        "tags": TAGS,
    }
    return Res(NG, {**base, **inputs}, name=f"ng-{instance_type}-{max_size}")


@pytest.mark.parametrize(
    ("blocks", "world"),
    [
        (["0.0.0.0/0"], "0.0.0.0/0"),
        (["0.0.0.0/1", "128.0.0.0/1"], "0.0.0.0/0"),
        (["0.0.0.0/2", "64.0.0.0/2", "128.0.0.0/1"], "0.0.0.0/0"),
        (["::/1", "8000::/1"], "::/0"),
        (["10.0.0.0/8", "192.168.0.0/16", "::/0"], "::/0"),
        (["0.0.0.0/1"], None),
        (["0.0.0.0/1", "::/1", "<computed>"], None),
        ([], None),
    ],
)
def test_world_cidr_sees_sets_that_cover_the_internet(blocks: list[str], world: str | None) -> None:
    assert world_cidr(blocks) == world


def test_metadata_service_turned_off_needs_no_tokens() -> None:
    template = Res(v.LAUNCH_TEMPLATE, {"metadataOptions": {"httpEndpoint": "disabled"}})
    assert v.imdsv2_required(template, DEV) == []


def test_ebs_encryption_by_default_covers_every_volume() -> None:
    volume = Res(v.EBS_VOLUME, {"size": 10})
    assert v.ebs_encrypted([volume], DEV)
    assert v.ebs_encrypted([volume, Res(v.EBS_DEFAULT_ENCRYPTION, {})], DEV) == []


def test_encrypted_storage_classes_and_s3_rules_pass() -> None:
    sse = v.BUCKET_ENCRYPTION[0]
    good = Res(
        sse, {"rules": [{"applyServerSideEncryptionByDefault": {"sseAlgorithm": "aws:kms"}}]}
    )
    assert v.encryption_at_rest(good, DEV) == []
    assert v.encryption_at_rest(Res(sse, {"rules": []}), DEV)
    sc = "kubernetes:storage.k8s.io/v1:StorageClass"
    assert v.encryption_at_rest(
        Res(sc, {"provisioner": "ebs.csi.aws.com", "parameters": {"type": "gp3"}}), DEV
    )
    assert (
        v.encryption_at_rest(
            Res(sc, {"provisioner": "ebs.csi.aws.com", "parameters": {"encrypted": "true"}}), DEV
        )
        == []
    )


def test_an_account_public_access_block_covers_every_bucket() -> None:
    bucket = Res(v.BUCKET_TYPES[0], {}, name="b")
    sse = Res(
        v.BUCKET_ENCRYPTION[0], {"bucket": "x"}, property_dependencies={"bucket": (bucket.urn,)}
    )
    (missing,) = v.buckets_protected([bucket, sse], DEV)
    assert missing == "Bucket 'b': no BucketPublicAccessBlock names this bucket in its bucket input"
    account = Res(v.ACCOUNT_PUBLIC_ACCESS_BLOCK, {})
    assert v.buckets_protected([bucket, sse, account], DEV) == []


def test_a_companion_may_name_its_bucket_literally() -> None:
    bucket = Res(v.BUCKET_TYPES[0], {"bucket": "models-prod"}, name="b")
    block = Res(v.PUBLIC_ACCESS_BLOCK, {"bucket": "models-prod"})
    sse = Res(v.BUCKET_ENCRYPTION[0], {"bucket": "models-prod"})
    assert v.buckets_protected([bucket, block, sse], DEV) == []
    elsewhere = Res(v.PUBLIC_ACCESS_BLOCK, {"bucket": "other"})
    assert v.buckets_protected([bucket, elsewhere, sse], DEV)


def test_pinned_ami_and_charts_outside_dev() -> None:
    floating = node_group(releaseVersion=None)
    assert v.pinned_versions(floating, PROD)
    assert v.pinned_versions(floating, DEV) == [], "dev may follow the newest AMI"
    release = v.HELM_RELEASE
    assert v.pinned_versions(Res(release, {"chart": "kueue", "version": "0.x"}), PROD)
    assert v.pinned_versions(Res(release, {"chart": "kueue", "version": "0.19.2"}), PROD) == []


def test_cost_tags_required_on_taggable_resources() -> None:
    vpc = "aws:ec2/vpc:Vpc"
    (message,) = v.required_cost_tags(Res(vpc, {"tags": {"team": "ml"}}), DEV)
    assert message.endswith("missing cost tags project, cost-center")
    untaggable = "aws:iam/rolePolicyAttachment:RolePolicyAttachment"
    assert v.required_cost_tags(Res(untaggable, {}), DEV) == []


def test_node_cap_and_ceiling_messages() -> None:
    (message,) = v.node_cap([node_group(max_size=3), node_group(max_size=2)], DEV)
    assert message == "GPU node groups may grow to 5 nodes; dev allows 4"
    # g6.xlarge at 0.8048 USD/h: 2 nodes = 1175.01 a month, 3 nodes = 1762.51.
    assert v.monthly_cost_ceiling([node_group(max_size=2)], DEV) == []
    (message,) = v.monthly_cost_ceiling([node_group(max_size=3)], DEV)
    assert "$1,763/month" in message and "dev allows $1,500" in message


def test_a_type_without_a_price_cannot_pass_the_ceiling() -> None:
    (message,) = v.monthly_cost_ceiling([node_group("p5e.48xlarge", max_size=1)], PROD)
    assert "no on-demand price for p5e.48xlarge" in message


def test_a_stack_outside_the_priced_region_cannot_pass_the_ceiling() -> None:
    subnet = Res(v.SUBNET, {"availabilityZone": "us-west-2a"})
    (message,) = v.monthly_cost_ceiling([subnet, node_group(max_size=1)], DEV)
    assert message.startswith("no on-demand prices for us-west-2 in the catalog")
    assert message.endswith("the cost ceiling cannot be checked")
    provider = Res(v.AWS_PROVIDER, {"region": "eu-west-1"})
    (message,) = v.monthly_cost_ceiling([provider, node_group(max_size=1)], DEV)
    assert "no on-demand prices for eu-west-1" in message
    # In the priced region the ceiling is checked as before; without GPU nodes nothing to price.
    here = Res(v.SUBNET, {"availabilityZone": "us-east-1a"})
    assert v.monthly_cost_ceiling([here, node_group(max_size=2)], DEV) == []
    assert v.monthly_cost_ceiling([subnet, node_group(max_size=0)], DEV) == []


def test_a_group_without_any_instance_type_runs_the_eks_default() -> None:
    group = node_group(instanceTypes=None)
    (message,) = v.allowed_instance_types([group], DEV)
    assert f"{v.EKS_DEFAULT_INSTANCE_TYPE} not allowed in dev" in message


def test_the_system_node_group_takes_a_cpu_type_and_counts_toward_no_gpu_limit() -> None:
    system = {"gpuinfra.dev/pool": "system"}
    cpu = node_group("m7i.large", max_size=3, labels=system)
    assert v.allowed_instance_types([cpu], DEV) == []
    assert v.allowed_instance_types([node_group("p5.48xlarge", labels=system)], DEV), "no GPUs"
    assert v.node_cap([cpu, node_group(max_size=4)], DEV) == []
    assert v.monthly_cost_ceiling([cpu, node_group(max_size=1)], DEV) == []


def test_evaluate_reports_by_rule() -> None:
    verdicts = v.evaluate([node_group("p5.48xlarge", max_size=5)], DEV)
    assert set(verdicts) == set(v.RESOURCE_RULES) | set(v.STACK_RULES)
    failing = sorted(name for name, found in verdicts.items() if found)
    assert failing == ["allowed-instance-types", "monthly-cost-ceiling", "node-cap"]


def test_every_rule_names_its_checkov_checks_or_says_it_has_none() -> None:
    own = {"pinned-versions", "required-cost-tags", "allowed-instance-types", "node-cap"}
    own |= {"monthly-cost-ceiling", "node-role-no-cni-policy", "no-idle-reclaim-in-prod"}
    for name, (description, rule) in {**v.RESOURCE_RULES, **v.STACK_RULES}.items():
        if name in own:
            continue
        assert "CKV" in (rule.__doc__ or ""), name
        assert "CKV" in description, name


# --- limits: policies/limits.yaml, by the stack's name -----------------------------------------


def test_the_environment_comes_from_the_stack_name() -> None:
    assert v.Limits.for_stack("prod").environment == "prod"
    assert v.Limits.for_stack("prod-eu").environment == "prod"
    assert v.Limits.for_stack("dev").max_nodes == 4
    assert v.environment_of("production", ["dev", "prod"]) is None


def test_a_stack_named_after_no_environment_is_refused() -> None:
    with pytest.raises(ConfigError) as caught:
        v.Limits.for_stack("qa")
    (line,) = caught.value.lines()
    assert line == (
        "policies/limits.yaml: environments: no environment for stack 'qa' (a stack named after "
        "one, or '<environment>-<suffix>'; environments: 'dev', 'prod' or 'staging')"
    )


def test_limits_file_problems_name_the_key(tmp_path: Path) -> None:
    (tmp_path / "policies").mkdir()
    (tmp_path / "policies" / "limits.yaml").write_text(
        "environments:\n  dev: {maxNodes: -1, monthlyBudgetUsd: 10, allowedInstanceTypes: [g6.xlarg]}\n"
    )
    with pytest.raises(ConfigError) as caught:
        v.Limits.for_stack("dev", tmp_path)
    assert any("environments.dev.maxNodes" in line for line in caught.value.lines())


def test_limits_do_not_come_from_the_stack_file(tmp_path: Path) -> None:
    """A prod stack file that calls itself dev, or carries its own limits, is refused."""
    text = (ROOT / "stacks" / "Pulumi.prod.yaml").read_text()
    stack = tmp_path / "Pulumi.prod.yaml"
    stack.write_text(text + "  gpuinfra:policy:\n    maxNodes: 1000\n")
    with pytest.raises(ConfigError) as caught:
        parse_stack(load_yaml(stack), "stacks/Pulumi.prod.yaml")
    assert caught.value.lines() == [
        "stacks/Pulumi.prod.yaml: config.gpuinfra:policy: the policy pack's limits live in "
        "policies/limits.yaml, not in the stack file they police"
    ]


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """A repository of the pins, the stacks and the policy pack, for `config check` to read."""
    root = tmp_path / "repo"
    root.mkdir()
    for name in ("versions.yaml", "Pulumi.yaml"):
        shutil.copy(ROOT / name, root / name)
    for name in ("stacks", "policies"):
        shutil.copytree(ROOT / name, root / name, ignore=shutil.ignore_patterns("__pycache__"))
    return root


def test_config_check_refuses_a_pool_type_its_environment_does_not_allow(root: Path) -> None:
    stack = root / "stacks" / "Pulumi.staging.yaml"
    stack.write_text(
        stack.read_text().replace("instanceType: g6e.xlarge", "instanceType: g6e.4xlarge")
    )
    result = run_cli("config", "check", "--stack", "staging", root=root)
    assert result.code == 2, result.stderr
    assert result.stderr.strip() == (
        "error: stacks/Pulumi.staging.yaml: config.gpuinfra:nodePools[0].instanceType: g6e.4xlarge "
        "is not allowed in staging by policies/limits.yaml (allowed: 'g6e.2xlarge' or "
        "'g6e.xlarge')"
    )


def test_config_check_refuses_an_environment_other_than_the_stack_names(root: Path) -> None:
    stack = root / "stacks" / "Pulumi.staging.yaml"
    stack.write_text(stack.read_text().replace("environment: staging", "environment: dev"))
    result = run_cli("config", "check", "--stack", "staging", root=root)
    assert result.code == 2, result.stderr
    # The stack file's own check refuses it before the policy pack's limits are read.
    assert result.stderr.strip() == (
        "error: stacks/Pulumi.staging.yaml: config.gpuinfra:environment: 'dev' does not match "
        "stack 'staging': resources would be named for dev (allowed: 'staging'; a stack is named "
        "for its environment, or <environment>-<suffix>)"
    )

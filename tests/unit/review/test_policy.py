"""Each policy rule rejects a bad resource and passes a good one."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from gpuinfra.review import policy as v

DEV = v.Limits("dev", ("g6.xlarge",), max_nodes=4, monthly_budget_usd=1500)
PROD = v.Limits("prod", ("p5.48xlarge", "p5e.48xlarge"), max_nodes=4, monthly_budget_usd=100_000)
TAGS = {"team": "ml", "project": "gpuinfra", "cost-center": "cc-1"}


@dataclass(frozen=True)
class Res:
    type_: str
    inputs: dict[str, Any]
    name: str = "r"
    parent: str | None = "component"
    extra: dict[str, Any] = field(default_factory=dict)


SG = "aws:ec2/securityGroup:SecurityGroup"
LT = v.LAUNCH_TEMPLATE
NG = v.NODE_GROUP


def node_group(instance_type: str = "g6.xlarge", max_size: int = 2, **inputs: object) -> Res:
    base = {
        "instanceTypes": [instance_type],
        "scalingConfig": {"minSize": 0, "maxSize": max_size, "desiredSize": 0},
        "launchTemplate": {"id": "lt-1", "version": "1"},
        "releaseVersion": "1.34.2-20261110",
        "tags": TAGS,
    }
    return Res(NG, {**base, **inputs})


@pytest.mark.parametrize(
    "resource",
    [
        Res(
            SG,
            {
                "ingress": [
                    {"protocol": "tcp", "fromPort": 22, "toPort": 22, "cidrBlocks": ["0.0.0.0/0"]}
                ]
            },
        ),
        Res(
            SG,
            {
                "ingress": [
                    {"protocol": "-1", "fromPort": 0, "toPort": 0, "ipv6CidrBlocks": ["::/0"]}
                ]
            },
        ),
        Res(
            SG,
            {
                "ingress": [
                    {"protocol": "tcp", "fromPort": 0, "toPort": 1024, "cidrBlocks": ["0.0.0.0/0"]}
                ]
            },
        ),
        Res(
            "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule",
            {"ipProtocol": "tcp", "fromPort": 22, "toPort": 22, "cidrIpv4": "0.0.0.0/0"},
        ),
        Res(
            "aws:ec2/securityGroupRule:SecurityGroupRule",
            {
                "type": "ingress",
                "protocol": "tcp",
                "fromPort": 22,
                "toPort": 22,
                "cidrBlocks": ["0.0.0.0/0"],
            },
        ),
        node_group(remoteAccess={"ec2SshKey": "ops"}),
    ],
)
def test_ssh_from_the_internet_is_refused(resource: Res) -> None:
    assert v.no_public_ssh(resource, DEV)


@pytest.mark.parametrize(
    "resource",
    [
        Res(SG, {"ingress": [{"protocol": "-1", "fromPort": 0, "toPort": 0, "self": True}]}),
        Res(
            SG,
            {
                "ingress": [
                    {"protocol": "tcp", "fromPort": 443, "toPort": 443, "cidrBlocks": ["0.0.0.0/0"]}
                ]
            },
        ),
        Res(
            SG,
            {
                "ingress": [
                    {"protocol": "tcp", "fromPort": 22, "toPort": 22, "cidrBlocks": ["10.0.0.0/8"]}
                ]
            },
        ),
        node_group(remoteAccess={"ec2SshKey": "ops", "sourceSecurityGroupIds": ["sg-bastion"]}),
    ],
)
def test_ssh_from_inside_or_other_ports_pass(resource: Res) -> None:
    assert v.no_public_ssh(resource, DEV) == []


def lt(**inputs: Any) -> Res:
    base = {
        "metadataOptions": {"httpTokens": "required"},
        "blockDeviceMappings": [{"deviceName": "/dev/xvda", "ebs": {"encrypted": "true"}}],
        "tags": TAGS,
    }
    return Res(LT, {**base, **inputs})


SSE = "aws:s3/bucketServerSideEncryptionConfiguration:BucketServerSideEncryptionConfiguration"


@pytest.mark.parametrize(
    ("bad", "good"),
    [
        (
            lt(blockDeviceMappings=[{"deviceName": "/dev/xvda", "ebs": {"volumeSize": 100}}]),
            lt(),
        ),
        (
            Res("aws:ebs/volume:Volume", {"size": 10}),
            Res("aws:ebs/volume:Volume", {"encrypted": True}),
        ),
        (
            Res("aws:fsx/lustreFileSystem:LustreFileSystem", {"deploymentType": "PERSISTENT_2"}),
            Res("aws:fsx/lustreFileSystem:LustreFileSystem", {"kmsKeyId": "arn:aws:kms:k"}),
        ),
        (
            Res(SSE, {"rules": []}),
            Res(
                SSE,
                {"rules": [{"applyServerSideEncryptionByDefault": {"sseAlgorithm": "aws:kms"}}]},
            ),
        ),
        (
            Res(
                "kubernetes:storage.k8s.io/v1:StorageClass",
                {"provisioner": "ebs.csi.aws.com", "parameters": {"type": "gp3"}},
            ),
            Res(
                "kubernetes:storage.k8s.io/v1:StorageClass",
                {
                    "provisioner": "ebs.csi.aws.com",
                    "parameters": {"type": "gp3", "encrypted": "true"},
                },
            ),
        ),
        (
            Res("aws:eks/cluster:Cluster", {"version": "1.34"}),
            Res("aws:eks/cluster:Cluster", {"encryptionConfig": {"resources": ["secrets"]}}),
        ),
    ],
)
def test_encryption_at_rest(bad: Res, good: Res) -> None:
    assert v.encryption_at_rest(bad, DEV)
    assert v.encryption_at_rest(good, DEV) == []


def test_imdsv2_required() -> None:
    assert v.imdsv2_required(lt(metadataOptions={"httpTokens": "optional"}), DEV)
    assert v.imdsv2_required(lt(metadataOptions={}), DEV)
    assert v.imdsv2_required(node_group(launchTemplate=None), DEV)
    assert v.imdsv2_required(lt(), DEV) == []
    assert v.imdsv2_required(node_group(), DEV) == []


def test_s3_public_access_blocked() -> None:
    kind = "aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock"
    keys = ("blockPublicAcls", "blockPublicPolicy", "ignorePublicAcls", "restrictPublicBuckets")
    assert v.s3_public_access_blocked(Res(kind, dict.fromkeys(keys, True)), DEV) == []
    (message,) = v.s3_public_access_blocked(
        Res(kind, {**dict.fromkeys(keys, True), "blockPublicPolicy": False}), DEV
    )
    assert "blockPublicPolicy" in message


def test_pinned_ami_and_charts_outside_dev() -> None:
    floating = node_group(releaseVersion=None)
    assert v.pinned_versions(floating, PROD)
    assert v.pinned_versions(node_group(releaseVersion="latest"), PROD)
    assert v.pinned_versions(floating, DEV) == [], "dev may follow the newest AMI"
    assert v.pinned_versions(node_group(), PROD) == []
    release = v.HELM_RELEASE
    assert v.pinned_versions(Res(release, {"chart": "kueue"}), PROD)
    assert v.pinned_versions(Res(release, {"chart": "kueue", "version": "0.x"}), PROD)
    assert v.pinned_versions(Res(release, {"chart": "kueue", "version": "0.19.2"}), PROD) == []


def test_gpu_instance_types_allowed_per_environment() -> None:
    (message,) = v.allowed_instance_types(node_group("p5.48xlarge"), DEV)
    assert "p5.48xlarge not allowed in dev (allowed: g6.xlarge)" in message
    assert v.allowed_instance_types(node_group("g6.xlarge"), DEV) == []
    assert v.allowed_instance_types(lt(instanceType="g5.xlarge"), DEV)


def test_cost_tags_required_on_taggable_resources() -> None:
    vpc = "aws:ec2/vpc:Vpc"
    (message,) = v.required_cost_tags(Res(vpc, {"tags": {"team": "ml"}}), DEV)
    assert message.endswith("missing cost tags project, cost-center")
    assert v.required_cost_tags(Res(vpc, {"tags": TAGS}), DEV) == []
    untaggable = "aws:iam/rolePolicyAttachment:RolePolicyAttachment"
    assert v.required_cost_tags(Res(untaggable, {}), DEV) == []


def test_node_cap() -> None:
    assert v.node_cap([node_group(max_size=2), node_group(max_size=2)], DEV) == []
    (message,) = v.node_cap([node_group(max_size=3), node_group(max_size=2)], DEV)
    assert message == "GPU node groups may grow to 5 nodes; dev allows 4"


def test_monthly_cost_ceiling() -> None:
    # g6.xlarge at 0.8048 USD/h: 2 nodes = 1175.01 a month, 3 nodes = 1762.51.
    assert v.monthly_cost_ceiling([node_group(max_size=2)], DEV) == []
    (message,) = v.monthly_cost_ceiling([node_group(max_size=3)], DEV)
    assert "$1,763/month" in message and "dev allows $1,500" in message


def test_a_type_without_a_price_cannot_pass_the_ceiling() -> None:
    (message,) = v.monthly_cost_ceiling([node_group("p5e.48xlarge", max_size=1)], PROD)
    assert "no on-demand price for p5e.48xlarge" in message


def test_each_bucket_needs_its_public_access_block_and_encryption() -> None:
    bucket = Res("aws:s3/bucket:Bucket", {"tags": TAGS}, name="models")
    block = Res("aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock", {})
    sse = Res(SSE, {})
    assert v.buckets_protected([bucket, block, sse], DEV) == []
    assert v.buckets_protected([bucket, sse], DEV) == [
        "Bucket 'models': no BucketPublicAccessBlock beside it"
    ]
    other_component = Res(block.type_, {}, parent="elsewhere")
    assert v.buckets_protected([bucket, sse, other_component], DEV)


def test_evaluate_reports_by_rule() -> None:
    verdicts = v.evaluate([node_group("p5.48xlarge", max_size=5)], DEV)
    assert set(verdicts) == set(v.RESOURCE_RULES) | set(v.STACK_RULES)
    failing = sorted(name for name, found in verdicts.items() if found)
    assert failing == ["allowed-instance-types", "monthly-cost-ceiling", "node-cap"]


def test_the_system_node_group_takes_a_cpu_type_and_counts_toward_no_gpu_limit() -> None:
    system = {"gpuinfra.dev/pool": "system"}
    cpu = node_group("m7i.large", max_size=3, labels=system)
    assert v.allowed_instance_types(cpu, DEV) == []
    assert v.allowed_instance_types(node_group("p5.48xlarge", labels=system), DEV), "no GPUs"
    assert v.node_cap([cpu, node_group(max_size=4)], DEV) == []
    assert v.monthly_cost_ceiling([cpu, node_group(max_size=1)], DEV) == []

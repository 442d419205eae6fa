"""The policy pack's rules as plain functions, over resources as the engine describes them.

Properties are the engine's (camelCase) names, which both ``pulumi preview`` and the offline run
in ``gpuinfra.review.stackrun`` produce. A resource rule takes ``(resource, limits)``, a stack rule
``(resources, limits)``; each returns one message per violation, naming the resource. The pack
(``policies/__main__.py``) and the offline plan call the same functions.
"""

from __future__ import annotations

import importlib
import inspect
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any, Protocol

from gpuinfra import catalog
from gpuinfra.config import (
    POOL_LABEL,
    REQUIRED_TAGS,
    SYSTEM_POOL,
    StackConfig,
    system_type_problem,
)
from gpuinfra.versions import pin_problem

WORLD = ("0.0.0.0/0", "::/0")
SSH = 22
NODE_GROUP = "aws:eks/nodeGroup:NodeGroup"
LAUNCH_TEMPLATE = "aws:ec2/launchTemplate:LaunchTemplate"
BUCKET_TYPES = ("aws:s3/bucket:Bucket", "aws:s3/bucketV2:BucketV2")
HELM_RELEASE = "kubernetes:helm.sh/v3:Release"


class Resource(Protocol):
    """What a rule reads of a resource (gpuinfra.review.stackrun.Resource has these)."""

    @property
    def type_(self) -> str: ...
    @property
    def name(self) -> str: ...
    @property
    def inputs(self) -> Mapping[str, Any]: ...
    @property
    def parent(self) -> str | None: ...


@dataclass(frozen=True)
class Limits:
    """What one environment may have (the stack file's ``gpuinfra:policy`` block)."""

    environment: str
    allowed_instance_types: tuple[str, ...]
    max_nodes: int
    monthly_budget_usd: float

    @classmethod
    def of(cls, cfg: StackConfig) -> Limits:
        return cls(
            environment=cfg.environment,
            allowed_instance_types=tuple(cfg.policy.allowed_instance_types),
            max_nodes=cfg.policy.max_nodes,
            monthly_budget_usd=cfg.policy.monthly_budget_usd,
        )


ResourceRule = Callable[[Resource, Limits], list[str]]
StackRule = Callable[[Sequence[Resource], Limits], list[str]]


def _where(resource: Resource) -> str:
    return f"{resource.type_.rsplit(':', 1)[-1]} '{resource.name}'"


def _covers_ssh(protocol: Any, from_port: Any, to_port: Any) -> bool:
    if str(protocol) in ("-1", "all"):
        return True
    if str(protocol).lower() not in ("tcp", "6"):
        return False
    return int(from_port or 0) <= SSH <= int(to_port or 0)


def no_public_ssh(resource: Resource, limits: Limits) -> list[str]:
    """No rule admits SSH (or all traffic) from 0.0.0.0/0 or ::/0."""
    del limits
    props = resource.inputs
    found: list[str] = []
    rules: list[Mapping[str, Any]] = []
    if resource.type_ == "aws:ec2/securityGroup:SecurityGroup":
        rules = list(props.get("ingress") or [])
    elif resource.type_ == "aws:ec2/securityGroupRule:SecurityGroupRule":
        rules = [props] if props.get("type") == "ingress" else []
    elif resource.type_ == "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule":
        rules = [
            {
                "protocol": props.get("ipProtocol"),
                "fromPort": props.get("fromPort"),
                "toPort": props.get("toPort"),
                "cidrBlocks": [props.get("cidrIpv4")],
                "ipv6CidrBlocks": [props.get("cidrIpv6")],
            }
        ]
    elif resource.type_ == NODE_GROUP:
        remote = props.get("remoteAccess") or {}
        if remote and not remote.get("sourceSecurityGroupIds"):
            found.append(
                f"{_where(resource)}: remoteAccess without sourceSecurityGroupIds opens SSH "
                "to 0.0.0.0/0; use SSM Session Manager or name the source security groups"
            )
    for rule in rules:
        blocks = [*(rule.get("cidrBlocks") or []), *(rule.get("ipv6CidrBlocks") or [])]
        open_to = sorted(b for b in blocks if b in WORLD)
        if open_to and _covers_ssh(rule.get("protocol"), rule.get("fromPort"), rule.get("toPort")):
            found.append(
                f"{_where(resource)}: ingress from {', '.join(open_to)} reaches SSH (port 22)"
            )
    return found


def encryption_at_rest(resource: Resource, limits: Limits) -> list[str]:
    """EBS volumes, S3 buckets, FSx file systems and Kubernetes secrets are encrypted."""
    del limits
    props = resource.inputs
    kind = resource.type_
    if kind == LAUNCH_TEMPLATE:
        return [
            f"{_where(resource)}: block device {m.get('deviceName')} is not encrypted"
            for m in props.get("blockDeviceMappings") or []
            if str((m.get("ebs") or {}).get("encrypted")).lower() != "true"
        ]
    if kind == "aws:ebs/volume:Volume" and props.get("encrypted") is not True:
        return [f"{_where(resource)}: encrypted must be true"]
    if kind == "aws:fsx/lustreFileSystem:LustreFileSystem" and not props.get("kmsKeyId"):
        return [f"{_where(resource)}: set kmsKeyId to encrypt with a customer-managed key"]
    if (
        kind
        == "aws:s3/bucketServerSideEncryptionConfiguration:BucketServerSideEncryptionConfiguration"
    ):
        algorithms = [
            ((r.get("applyServerSideEncryptionByDefault") or {}).get("sseAlgorithm"))
            for r in props.get("rules") or []
        ]
        if not algorithms or any(
            a not in ("aws:kms", "aws:kms:dsse", "AES256") for a in algorithms
        ):
            return [f"{_where(resource)}: every rule needs aws:kms, aws:kms:dsse or AES256"]
    if kind == "kubernetes:storage.k8s.io/v1:StorageClass":
        params = props.get("parameters") or {}
        ebs = props.get("provisioner") == "ebs.csi.aws.com"
        if ebs and str(params.get("encrypted")).lower() != "true":
            return [f"{_where(resource)}: EBS volumes need parameters.encrypted: 'true'"]
    if kind == "aws:eks/cluster:Cluster":
        config = props.get("encryptionConfig") or {}
        if "secrets" not in (config.get("resources") or []):
            return [f"{_where(resource)}: encrypt Kubernetes secrets (encryptionConfig)"]
    return []


def imdsv2_required(resource: Resource, limits: Limits) -> list[str]:
    """Instances answer only IMDSv2 (session tokens); node groups get that via a template."""
    del limits
    props = resource.inputs
    if resource.type_ in (LAUNCH_TEMPLATE, "aws:ec2/instance:Instance"):
        tokens = (props.get("metadataOptions") or {}).get("httpTokens")
        if tokens != "required":
            return [f"{_where(resource)}: metadataOptions.httpTokens must be 'required'"]
    if resource.type_ == NODE_GROUP and not props.get("launchTemplate"):
        return [
            f"{_where(resource)}: without a launch template the nodes accept IMDSv1; "
            "attach one that requires IMDSv2"
        ]
    return []


def s3_public_access_blocked(resource: Resource, limits: Limits) -> list[str]:
    del limits
    if resource.type_ != "aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock":
        return []
    keys = ("blockPublicAcls", "blockPublicPolicy", "ignorePublicAcls", "restrictPublicBuckets")
    off = [k for k in keys if resource.inputs.get(k) is not True]
    return [f"{_where(resource)}: {', '.join(off)} must be true"] if off else []


def pinned_versions(resource: Resource, limits: Limits) -> list[str]:
    """Outside dev, node groups run a pinned GPU AMI release and charts a pinned version."""
    if limits.environment == "dev":
        return []
    props = resource.inputs
    if resource.type_ == NODE_GROUP:
        release = props.get("releaseVersion")
        if not release:
            return [f"{_where(resource)}: set releaseVersion (versions.yaml eks_gpu_ami)"]
        problem = pin_problem(str(release), "eks_gpu_ami")
        if problem:
            return [f"{_where(resource)}: releaseVersion {problem}"]
    if resource.type_ == HELM_RELEASE:
        version = props.get("version")
        if not version:
            return [f"{_where(resource)}: chart {props.get('chart')} has no pinned version"]
        problem = pin_problem(str(version), "chart")
        if problem:
            return [f"{_where(resource)}: chart version {problem}"]
    return []


def _is_system(resource: Resource) -> bool:
    """The CPU node group for controllers: pool label 'system', not a GPU allowance."""
    labels = resource.inputs.get("labels") or {}
    return resource.type_ == NODE_GROUP and labels.get(POOL_LABEL) == SYSTEM_POOL


def allowed_instance_types(resource: Resource, limits: Limits) -> list[str]:
    """GPU node groups use the environment's types; the system group a small CPU family."""
    props = resource.inputs
    if resource.type_ == NODE_GROUP:
        types = [str(t) for t in props.get("instanceTypes") or []]
    elif resource.type_ in (LAUNCH_TEMPLATE, "aws:ec2/instance:Instance"):
        types = [str(props["instanceType"])] if props.get("instanceType") else []
    else:
        return []
    if _is_system(resource):
        problems = [p for p in map(system_type_problem, types) if p]
        return [f"{_where(resource)}: {p}" for p in problems]
    refused = sorted(t for t in types if t not in limits.allowed_instance_types)
    if not refused:
        return []
    return [
        f"{_where(resource)}: {', '.join(refused)} not allowed in {limits.environment} "
        f"(allowed: {', '.join(limits.allowed_instance_types)})"
    ]


def required_cost_tags(resource: Resource, limits: Limits) -> list[str]:
    del limits
    if not taggable(resource.type_):
        return []
    tags = resource.inputs.get("tags") or {}
    missing = [k for k in REQUIRED_TAGS if not tags.get(k)]
    if not missing:
        return []
    return [f"{_where(resource)}: missing cost tags {', '.join(missing)}"]


@cache
def taggable(type_: str) -> bool:
    """Whether an AWS resource type takes ``tags``, read from the pulumi-aws SDK itself."""
    if not type_.startswith("aws:"):
        return False
    _, module_part, class_name = type_.split(":")
    module_name = module_part.split("/")[0]
    try:
        module = importlib.import_module(
            "pulumi_aws" if module_name == "index" else f"pulumi_aws.{module_name}"
        )
        cls = getattr(module, class_name)
    except (ImportError, AttributeError):
        return False
    return "tags" in inspect.signature(cls._internal_init).parameters


def _gpu_node_groups(resources: Sequence[Resource]) -> list[tuple[Resource, str, int]]:
    groups = []
    for r in resources:
        if r.type_ != NODE_GROUP or _is_system(r):
            continue
        size = int((r.inputs.get("scalingConfig") or {}).get("maxSize") or 0)
        for instance_type in r.inputs.get("instanceTypes") or []:
            groups.append((r, str(instance_type), size))
    return groups


def node_cap(resources: Sequence[Resource], limits: Limits) -> list[str]:
    """The GPU node groups' maximum sizes add up to at most the environment's cap."""
    total = sum(size for _, _, size in _gpu_node_groups(resources))
    if total <= limits.max_nodes:
        return []
    return [
        f"GPU node groups may grow to {total} nodes; {limits.environment} allows {limits.max_nodes}"
    ]


def monthly_cost_ceiling(resources: Sequence[Resource], limits: Limits) -> list[str]:
    """GPU nodes at their maximum size, priced on demand, fit the monthly budget.

    Spot and reserved capacity are priced on demand too: the ceiling is an upper bound.
    """
    found: list[str] = []
    total = 0.0
    for resource, instance_type, size in _gpu_node_groups(resources):
        cost = catalog.monthly_on_demand_usd(instance_type, size)
        if cost is None:
            found.append(
                f"{_where(resource)}: no on-demand price for {instance_type} in the catalog "
                f"({catalog.PRICE_DATE}); the cost ceiling cannot be checked"
            )
            continue
        total += cost
    if total > limits.monthly_budget_usd:
        found.append(
            f"GPU nodes at maximum size cost ${total:,.0f}/month on demand "
            f"(prices of {catalog.PRICE_DATE}); {limits.environment} allows "
            f"${limits.monthly_budget_usd:,.0f}"
        )
    return found


def buckets_protected(resources: Sequence[Resource], limits: Limits) -> list[str]:
    """Each bucket comes with a public access block and an encryption configuration.

    They are matched by the component that created them: bucket names are unknown before
    creation, so a reference cannot be compared during a preview.
    """
    del limits
    count: dict[tuple[str | None, str], int] = defaultdict(int)
    for r in resources:
        count[(r.parent, r.type_.rsplit(":", 1)[-1])] += 1
    found = []
    for r in resources:
        if r.type_ not in BUCKET_TYPES:
            continue
        buckets = sum(count[(r.parent, t.rsplit(":", 1)[-1])] for t in BUCKET_TYPES)
        for companion in ("BucketPublicAccessBlock", "BucketServerSideEncryptionConfiguration"):
            if count[(r.parent, companion)] < buckets:
                found.append(f"{_where(r)}: no {companion} beside it")
    return found


RESOURCE_RULES: dict[str, tuple[str, ResourceRule]] = {
    "no-public-ssh": ("No SSH ingress from 0.0.0.0/0 or ::/0", no_public_ssh),
    "encryption-at-rest": ("EBS, S3, FSx and Kubernetes secrets encrypted", encryption_at_rest),
    "imdsv2-required": ("Instances require IMDSv2", imdsv2_required),
    "s3-public-access-blocked": ("S3 public access blocked", s3_public_access_blocked),
    "pinned-versions": ("Pinned GPU AMI and chart versions outside dev", pinned_versions),
    "allowed-instance-types": (
        "GPU instance types allowed per environment",
        allowed_instance_types,
    ),
    "required-cost-tags": ("team, project and cost-center tags", required_cost_tags),
}
STACK_RULES: dict[str, tuple[str, StackRule]] = {
    "node-cap": ("Node count cap per environment", node_cap),
    "monthly-cost-ceiling": (
        "Monthly on-demand cost ceiling per environment",
        monthly_cost_ceiling,
    ),
    "buckets-protected": (
        "Every bucket has public access blocked and encryption",
        buckets_protected,
    ),
}


def evaluate(resources: Sequence[Resource], limits: Limits) -> dict[str, list[str]]:
    """Every rule's violations over a whole stack, by rule name (empty lists when it passes)."""
    verdicts: dict[str, list[str]] = {}
    for name, (_, rule) in RESOURCE_RULES.items():
        verdicts[name] = [msg for r in resources for msg in rule(r, limits)]
    for name, (_, stack_rule) in STACK_RULES.items():
        verdicts[name] = stack_rule(resources, limits)
    return verdicts

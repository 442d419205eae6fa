"""The policy pack's rules as plain functions, over resources as the engine describes them.

Properties are the engine's (camelCase) names, which both ``pulumi preview`` and the offline run
in ``gpuinfra.review.stackrun`` produce. A resource rule takes ``(resource, limits)``, a stack rule
``(resources, limits)``; each returns one message per violation, naming the resource. The pack
(``policies/__main__.py``) and the offline plan call the same functions.

Each rule's docstring names the checkov checks (and tfsec rules) it corresponds to, so a
reviewer can compare the two. A resource that belongs to another (a bucket's public access
block, a node group's launch template, a standalone security group rule) is matched to it
through its inputs: the input property that reads the other resource's output (its property
dependencies), or a literal id or name equal to the other's. Nothing is matched by being
created beside something else.

The limits of each environment live in ``policies/limits.yaml``; the environment is the stack's
name, never a key of the stack file the pack polices.
"""

from __future__ import annotations

import importlib
import inspect
import json
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase
from functools import cache
from itertools import pairwise
from pathlib import Path
from typing import Any, Protocol

from pydantic import Field

from gpuinfra import catalog
from gpuinfra.config import (
    MAX_NODE_GROUPS,
    MAX_NODES_PER_GROUP,
    POOL_LABEL,
    REQUIRED_TAGS,
    SYSTEM_POOL,
    CamelModel,
    StackConfig,
    instance_type_problem,
    stack_path,
    system_type_problem,
    world_cidr,
)
from gpuinfra.errors import ConfigError, Problem
from gpuinfra.loading import display_path, join_path, load_yaml, validate
from gpuinfra.paths import repo_root
from gpuinfra.review import iam_actions
from gpuinfra.suggest import allowed
from gpuinfra.versions import pin_problem

NODE_GROUP = "aws:eks/nodeGroup:NodeGroup"
LAUNCH_TEMPLATE = "aws:ec2/launchTemplate:LaunchTemplate"
LAUNCH_CONFIGURATION = "aws:ec2/launchConfiguration:LaunchConfiguration"
INSTANCE = "aws:ec2/instance:Instance"
SUBNET = "aws:ec2/subnet:Subnet"
AWS_PROVIDER = "pulumi:providers:aws"
AUTOSCALING_GROUP = "aws:autoscaling/group:Group"
EBS_VOLUME = "aws:ebs/volume:Volume"
EBS_DEFAULT_ENCRYPTION = "aws:ebs/encryptionByDefault:EncryptionByDefault"
SECURITY_GROUP = "aws:ec2/securityGroup:SecurityGroup"
DEFAULT_SECURITY_GROUP = "aws:ec2/defaultSecurityGroup:DefaultSecurityGroup"
SECURITY_GROUP_RULE = "aws:ec2/securityGroupRule:SecurityGroupRule"
INGRESS_RULE = "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule"
EKS_CLUSTER = "aws:eks/cluster:Cluster"
BUCKET_TYPES = ("aws:s3/bucket:Bucket", "aws:s3/bucketV2:BucketV2")
BUCKET_ACL_TYPES = ("aws:s3/bucketAcl:BucketAcl", "aws:s3/bucketAclV2:BucketAclV2")
BUCKET_POLICY = "aws:s3/bucketPolicy:BucketPolicy"
PUBLIC_ACCESS_BLOCK = "aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock"
ACCOUNT_PUBLIC_ACCESS_BLOCK = "aws:s3/accountPublicAccessBlock:AccountPublicAccessBlock"
BUCKET_ENCRYPTION = (
    "aws:s3/bucketServerSideEncryptionConfiguration:BucketServerSideEncryptionConfiguration",
    "aws:s3/bucketServerSideEncryptionConfigurationV2:BucketServerSideEncryptionConfigurationV2",
)
KMS_KEY = "aws:kms/key:Key"
KMS_KEY_POLICY = "aws:kms/keyPolicy:KeyPolicy"
FSX_LUSTRE = "aws:fsx/lustreFileSystem:LustreFileSystem"
IAM_ROLE = "aws:iam/role:Role"
HELM_RELEASE = "kubernetes:helm.sh/v3:Release"
# An EKS managed node group without an instance type, in its group or its launch template.
EKS_DEFAULT_INSTANCE_TYPE = "t3.medium"
# Root device names of the AMIs EKS and EC2 boot (Amazon Linux, Bottlerocket; Ubuntu, Windows).
ROOT_DEVICES = ("/dev/xvda", "/dev/sda1")

LIMITS_FILE = Path("policies") / "limits.yaml"


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
    @property
    def urn(self) -> str: ...
    @property
    def property_dependencies(self) -> Mapping[str, Sequence[str]]: ...


# --- limits: policies/limits.yaml ------------------------------------------------------------


class EnvironmentLimits(CamelModel):
    # At most what EKS allows a cluster: 30 managed node groups of 450 nodes.
    max_nodes: int = Field(ge=0, le=MAX_NODES_PER_GROUP * MAX_NODE_GROUPS)
    monthly_budget_usd: float = Field(gt=0)
    allowed_instance_types: list[str] = Field(min_length=1)


class LimitsFile(CamelModel):
    environments: dict[str, EnvironmentLimits] = Field(min_length=1)


@dataclass(frozen=True)
class Limits:
    """What one environment may have."""

    environment: str
    allowed_instance_types: tuple[str, ...]
    max_nodes: int
    monthly_budget_usd: float

    @classmethod
    def for_stack(cls, stack: str, root: Path | None = None) -> Limits:
        """The limits of the environment that ``stack`` (a stack name) belongs to."""
        path = (root or repo_root()) / LIMITS_FILE
        shown = display_path(path)
        known = _limits_file(path)
        environment = environment_of(stack, known.environments)
        if environment is None:
            raise ConfigError(
                [
                    Problem(
                        shown,
                        "environments",
                        f"no environment for stack '{stack}' (a stack named after one, or "
                        f"'<environment>-<suffix>'; environments: "
                        f"{allowed(known.environments)})",
                    )
                ]
            )
        entry = known.environments[environment]
        return cls(
            environment=environment,
            allowed_instance_types=tuple(entry.allowed_instance_types),
            max_nodes=entry.max_nodes,
            monthly_budget_usd=entry.monthly_budget_usd,
        )


def environment_of(stack: str, environments: Iterable[str]) -> str | None:
    """``prod`` for the stack ``prod`` or ``prod-eu``; None when no environment matches."""
    names = set(environments)
    if stack in names:
        return stack
    head = stack.split("-", 1)[0]
    return head if head in names else None


def _limits_file(path: Path) -> LimitsFile:
    shown = display_path(path)
    data = validate(LimitsFile, load_yaml(path), shown)
    problems = [
        Problem(shown, join_path(["environments", env, "allowedInstanceTypes", i]), problem)
        for env, entry in data.environments.items()
        for i, name in enumerate(entry.allowed_instance_types)
        if (problem := instance_type_problem(name))
    ]
    if problems:
        raise ConfigError(problems)
    return data


def pool_findings(stack: str, cfg: StackConfig, root: Path | None = None) -> list[Problem]:
    """A stack file's node pools over its environment's node cap or with an instance type its
    environment does not allow. (An ``environment`` key that disagrees with the stack's name is
    refused earlier, by ``config.parse_stack``.)"""
    limits = Limits.for_stack(stack, root)
    shown = display_path(stack_path(stack, root))
    found = [
        Problem(
            shown,
            f"config.gpuinfra:nodePools[{i}].maxSize",
            f"maxSize {pool.max_size} is over {limits.environment}'s maxNodes {limits.max_nodes} "
            f"in {LIMITS_FILE} (allowed: 0 to {limits.max_nodes})",
        )
        for i, pool in enumerate(cfg.node_pools)
        if pool.max_size > limits.max_nodes
    ]
    # maxNodes caps the pools together, as the policy pack's node-cap rule counts them.
    total = sum(pool.max_size for pool in cfg.node_pools)
    if not found and total > limits.max_nodes:
        found.append(
            Problem(
                shown,
                "config.gpuinfra:nodePools",
                f"the pools' maxSize add up to {total}, over {limits.environment}'s maxNodes "
                f"{limits.max_nodes} in {LIMITS_FILE} (allowed: a sum of at most "
                f"{limits.max_nodes})",
            )
        )
    return found + [
        Problem(
            shown,
            f"config.gpuinfra:nodePools[{i}].instanceType",
            f"{pool.instance_type} is not allowed in {limits.environment} by {LIMITS_FILE} "
            f"(allowed: {allowed(limits.allowed_instance_types)})",
        )
        for i, pool in enumerate(cfg.node_pools)
        if pool.instance_type not in limits.allowed_instance_types
    ]


def refuse_pools_over_limits(stack: str, cfg: StackConfig, root: Path | None = None) -> None:
    """Raise ConfigError (exit 2) naming each of ``pool_findings``: what config check, cost and
    plan refuse before they read the stack any further."""
    refused = pool_findings(stack, cfg, root)
    if refused:
        raise ConfigError(refused)


ResourceRule = Callable[[Resource, Limits], list[str]]
StackRule = Callable[[Sequence[Resource], Limits], list[str]]


# --- helpers -------------------------------------------------------------------------------


def _where(resource: Resource) -> str:
    return f"{resource.type_.rsplit(':', 1)[-1]} '{resource.name}'"


def _true(value: Any) -> bool:
    return value is True or str(value).lower() == "true"


def _document(value: Any) -> Mapping[str, Any] | None:
    """An IAM/S3/KMS policy document from a JSON string or a mapping; None when unknown."""
    if isinstance(value, Mapping):
        return value
    if isinstance(value, str):
        try:
            parsed = json.loads(value)
        except ValueError:
            return None
        return parsed if isinstance(parsed, Mapping) else None
    return None


def _statements(document: Mapping[str, Any] | None) -> list[Mapping[str, Any]]:
    if document is None:
        return []
    statements = document.get("Statement") or []
    if isinstance(statements, Mapping):
        statements = [statements]
    return [s for s in statements if isinstance(s, Mapping)]


def _allows(statement: Mapping[str, Any]) -> bool:
    return str(statement.get("Effect", "")).lower() == "allow"


def _listed(value: Any) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    if isinstance(value, Mapping):
        return [str(v) for values in value.values() for v in _listed(values)]
    return [str(v) for v in value]


def _strings(value: Any) -> Iterator[str]:
    """Every string in a nested input value."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, Mapping):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _strings(item)


def _principals(statement: Mapping[str, Any]) -> list[str]:
    """Every principal a statement names, of any kind (AWS, Service, Federated, "*")."""
    return _listed(statement.get("Principal"))


def _wildcard_principal(statement: Mapping[str, Any]) -> bool:
    return any(p.strip() == "*" for p in _principals(statement)) or "NotPrincipal" in statement


class _Index:
    """Which resource another one's input reads."""

    def __init__(self, resources: Sequence[Resource]) -> None:
        self.resources = resources

    def refers(self, resource: Resource, prop: str, target: Resource) -> bool:
        """Whether ``resource``'s input ``prop`` reads ``target``: through a property
        dependency, or a literal value that is the target's name, id or ARN."""
        if target.urn and target.urn in (resource.property_dependencies.get(prop) or ()):
            return True
        literals = set(_strings(resource.inputs.get(prop)))
        names: set[str] = set()
        for key in ("name", "bucket", "arn"):
            given = target.inputs.get(key)
            if isinstance(given, str) and given:
                names.add(given)
        return any(v in names for v in literals)

    def referred(self, resource: Resource, prop: str, types: Iterable[str]) -> list[Resource]:
        kinds = tuple(types)
        return [t for t in self.resources if t.type_ in kinds and self.refers(resource, prop, t)]


# --- network: ingress from the whole internet --------------------------------------------------

ALL_PORTS = (0, 65535)
_PROTOCOLS = {"-1": "all", "all": "all", "6": "tcp", "17": "udp", "1": "icmp", "58": "icmpv6"}


@dataclass(frozen=True)
class _Ingress:
    protocol: str
    low: int
    high: int
    blocks: tuple[str, ...]


def _protocol(value: Any) -> str:
    name = str(value).strip().lower()
    return _PROTOCOLS.get(name, name)


def _port(value: Any, default: int) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return default


def _ingress(protocol: Any, from_port: Any, to_port: Any, blocks: Iterable[Any]) -> _Ingress:
    proto = _protocol(protocol)
    if proto in ("tcp", "udp"):
        low, high = _port(from_port, ALL_PORTS[0]), _port(to_port, ALL_PORTS[1])
        if low < 0 or high < 0:
            low, high = ALL_PORTS
    else:
        # All traffic, ICMP (ports are type and code) and other protocols: every "port".
        low, high = ALL_PORTS
    return _Ingress(proto, low, high, tuple(str(b) for b in blocks if b))


def _inline_ingress(resource: Resource) -> list[_Ingress]:
    return [
        _ingress(
            rule.get("protocol"),
            rule.get("fromPort"),
            rule.get("toPort"),
            [*(rule.get("cidrBlocks") or []), *(rule.get("ipv6CidrBlocks") or [])],
        )
        for rule in resource.inputs.get("ingress") or []
        if isinstance(rule, Mapping)
    ]


def _rule_ingress(resource: Resource) -> _Ingress | None:
    props = resource.inputs
    if resource.type_ == SECURITY_GROUP_RULE:
        if str(props.get("type", "")).lower() != "ingress":
            return None
        return _ingress(
            props.get("protocol"),
            props.get("fromPort"),
            props.get("toPort"),
            [*(props.get("cidrBlocks") or []), *(props.get("ipv6CidrBlocks") or [])],
        )
    if resource.type_ == INGRESS_RULE:
        return _ingress(
            props.get("ipProtocol"),
            props.get("fromPort"),
            props.get("toPort"),
            [props.get("cidrIpv4"), props.get("cidrIpv6")],
        )
    return None


def _world_reach(entries: Sequence[_Ingress]) -> Iterator[tuple[str, int, int, str, list[str]]]:
    """(protocol, first port, last port, world block, the blocks that cover it) for each
    protocol that some set of these entries opens to the whole internet, together."""
    # All traffic first: once it alone reaches the internet, each protocol would say it again.
    protocols = sorted({e.protocol for e in entries}, key=lambda p: (p != "all", p))
    for proto in protocols:
        relevant = [e for e in entries if e.protocol in (proto, "all")]
        bounds = sorted({e.low for e in relevant} | {e.high + 1 for e in relevant})
        for low, after in pairwise(bounds):
            covering = [e for e in relevant if e.low <= low and e.high >= after - 1]
            blocks = sorted({b for e in covering for b in e.blocks})
            world = world_cidr(blocks)
            if world is not None:
                yield proto, low, after - 1, world, blocks
                if proto == "all":
                    return
                break


def _ports(proto: str, low: int, high: int) -> str:
    if proto == "all":
        return "all traffic"
    if (low, high) == ALL_PORTS or proto not in ("tcp", "udp"):
        return f"every {proto} port"
    return f"{proto} port {low}" if low == high else f"{proto} ports {low}-{high}"


def no_world_ingress(resources: Sequence[Resource], limits: Limits) -> list[str]:
    """No security group admits traffic from the whole internet, on any port.

    checkov CKV_AWS_24 (port 22), CKV_AWS_25 (3389), CKV_AWS_260 (80) and CKV_AWS_277 (all
    ports), tfsec aws-ec2-no-public-ingress-sgr; and CKV_AWS_100 for an EKS node group's
    remote access without source security groups (SSH from 0.0.0.0/0). Stricter than those:
    every port counts, and the CIDRs of every ingress entry of one group are taken together,
    so 0.0.0.0/1 and 128.0.0.0/1 are the internet as much as 0.0.0.0/0 is. Covers
    SecurityGroup, DefaultSecurityGroup and the standalone SecurityGroupRule and
    SecurityGroupIngressRule resources, which count toward the group their
    ``securityGroupId`` reads. Protocols are compared case-insensitively.
    """
    del limits
    index = _Index(resources)
    groups = [r for r in resources if r.type_ in (SECURITY_GROUP, DEFAULT_SECURITY_GROUP)]
    entries: dict[str, list[_Ingress]] = {g.urn or g.name: _inline_ingress(g) for g in groups}
    owner: dict[str, Resource] = {g.urn or g.name: g for g in groups}
    for resource in resources:
        entry = _rule_ingress(resource)
        if entry is None:
            continue
        targets = index.referred(
            resource, "securityGroupId", (SECURITY_GROUP, DEFAULT_SECURITY_GROUP)
        )
        if not targets:
            key = resource.urn or resource.name
            owner[key] = resource
            entries.setdefault(key, []).append(entry)
        for target in targets:
            entries[target.urn or target.name].append(entry)
    found: list[str] = []
    for key, group_entries in entries.items():
        for proto, low, high, world, blocks in _world_reach(group_entries):
            shown = world if blocks == [world] else f"{world} as {', '.join(blocks)}"
            found.append(
                f"{_where(owner[key])}: ingress from the whole internet ({shown}) reaches "
                f"{_ports(proto, low, high)}; allow only the CIDRs that need it"
            )
    for resource in resources:
        if resource.type_ != NODE_GROUP:
            continue
        remote = resource.inputs.get("remoteAccess") or {}
        if remote and not remote.get("sourceSecurityGroupIds"):
            found.append(
                f"{_where(resource)}: remoteAccess without sourceSecurityGroupIds opens SSH "
                "to 0.0.0.0/0; use SSM Session Manager or name the source security groups"
            )
    return found


def default_security_group_closed(resource: Resource, limits: Limits) -> list[str]:
    """A VPC's default security group holds no rules: nothing should use it.

    checkov CKV2_AWS_12 (the default security group of every VPC restricts all traffic).
    """
    del limits
    if resource.type_ != DEFAULT_SECURITY_GROUP:
        return []
    kinds = [k for k in ("ingress", "egress") if resource.inputs.get(k)]
    if not kinds:
        return []
    return [f"{_where(resource)}: the default security group takes no {' or '.join(kinds)} rules"]


# --- EC2: metadata service, volumes, public addresses ------------------------------------------


def imdsv2_required(resource: Resource, limits: Limits) -> list[str]:
    """Instances answer only IMDSv2, one network hop away: a pod cannot reach the node's
    credentials (pods get their own from Pod Identity).

    checkov CKV_AWS_79 (IMDSv1 disabled: ``httpTokens: required``) and CKV_AWS_341 (hop limit
    at most 1), tfsec aws-ec2-enforce-http-token-imds and aws-ec2-enforce-launch-config-http-
    token-imds. Stricter: the hop limit must be given as 1, because the EKS AMIs default to 2;
    a node group without a launch template gets the AMI's defaults and is refused.
    """
    del limits
    props = resource.inputs
    if resource.type_ in (LAUNCH_TEMPLATE, INSTANCE, LAUNCH_CONFIGURATION):
        options = props.get("metadataOptions") or {}
        if str(options.get("httpEndpoint", "")).lower() == "disabled":
            return []
        found = []
        if str(options.get("httpTokens", "")).lower() != "required":
            found.append(f"{_where(resource)}: metadataOptions.httpTokens must be 'required'")
        if _port(options.get("httpPutResponseHopLimit"), 0) != 1:
            found.append(
                f"{_where(resource)}: metadataOptions.httpPutResponseHopLimit must be 1 "
                f"(is {options.get('httpPutResponseHopLimit', 'unset: the AMI default, 2 on EKS')}); "
                "pods take credentials from Pod Identity, not the node's"
            )
        return found
    if resource.type_ == NODE_GROUP and not props.get("launchTemplate"):
        return [
            f"{_where(resource)}: without a launch template the nodes accept IMDSv1 two hops "
            "away; attach one that requires IMDSv2 with hop limit 1"
        ]
    return []


def _block_devices(resource: Resource) -> Iterator[tuple[str, Any]]:
    """(device, encrypted) of every EBS volume an instance or launch configuration makes."""
    props = resource.inputs
    root = props.get("rootBlockDevice")
    yield "root volume", (root or {}).get("encrypted") if root else None
    for device in props.get("ebsBlockDevices") or []:
        yield str(device.get("deviceName")), device.get("encrypted")


def ebs_encrypted(resources: Sequence[Resource], limits: Limits) -> list[str]:
    """Every EBS volume an instance, launch template, launch configuration or volume makes is
    encrypted, unless the stack turns on EBS encryption by default for the account.

    checkov CKV_AWS_8 (instances and launch configurations), CKV_AWS_3 (volumes), CKV_AWS_106
    (EBS encryption by default); tfsec aws-ec2-enable-at-rest-encryption and
    aws-ec2-enable-launch-config-at-rest-encryption. Stricter: a launch template or instance
    that does not map its root device boots an unencrypted root volume from the AMI, and is
    refused.
    """
    del limits
    if any(
        r.type_ == EBS_DEFAULT_ENCRYPTION and r.inputs.get("enabled") is not False
        for r in resources
    ):
        return []
    found: list[str] = []
    for resource in resources:
        kind = resource.type_
        if kind == EBS_VOLUME and not _true(resource.inputs.get("encrypted")):
            found.append(f"{_where(resource)}: encrypted must be true")
        elif kind in (INSTANCE, LAUNCH_CONFIGURATION):
            for device, encrypted in _block_devices(resource):
                if not _true(encrypted):
                    found.append(
                        f"{_where(resource)}: {device} is not encrypted"
                        + (" (set rootBlockDevice.encrypted)" if device == "root volume" else "")
                    )
        elif kind == LAUNCH_TEMPLATE:
            mappings = [m for m in resource.inputs.get("blockDeviceMappings") or [] if m]
            devices = {str(m.get("deviceName")) for m in mappings}
            if not devices & set(ROOT_DEVICES):
                found.append(
                    f"{_where(resource)}: no block device mapping for the root device "
                    f"({' or '.join(ROOT_DEVICES)}): the AMI's unencrypted default applies"
                )
            found += [
                f"{_where(resource)}: block device {m.get('deviceName')} is not encrypted"
                for m in mappings
                if m.get("ebs") is not None and not _true((m.get("ebs") or {}).get("encrypted"))
            ]
    return found


def no_public_instance_ip(resource: Resource, limits: Limits) -> list[str]:
    """No instance gets a public IP address: nodes sit in private subnets behind NAT.

    checkov CKV_AWS_88 (EC2 instance should not have public IP), tfsec
    aws-ec2-no-public-ip.
    """
    del limits
    props = resource.inputs
    if resource.type_ in (INSTANCE, LAUNCH_CONFIGURATION) and _true(
        props.get("associatePublicIpAddress")
    ):
        return [f"{_where(resource)}: associatePublicIpAddress must not be true"]
    if resource.type_ == LAUNCH_TEMPLATE:
        return [
            f"{_where(resource)}: network interface {i} has associatePublicIpAddress true"
            for i, nic in enumerate(props.get("networkInterfaces") or [])
            if _true((nic or {}).get("associatePublicIpAddress"))
        ]
    return []


# --- storage -----------------------------------------------------------------------------------


def encryption_at_rest(resource: Resource, limits: Limits) -> list[str]:
    """S3 default encryption, FSx with a customer key, encrypted EBS StorageClasses and EKS
    secrets.

    checkov CKV_AWS_19 and CKV_AWS_145 (S3 server-side encryption, with KMS), CKV_AWS_190
    (Lustre with a customer-managed key), CKV_AWS_58 (EKS secrets encryption). EC2 volumes are
    ``ebs-encrypted``'s.
    """
    del limits
    props = resource.inputs
    kind = resource.type_
    if kind == FSX_LUSTRE and not props.get("kmsKeyId"):
        return [f"{_where(resource)}: set kmsKeyId to encrypt with a customer-managed key"]
    if kind in BUCKET_ENCRYPTION:
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
    if kind == EKS_CLUSTER:
        config = props.get("encryptionConfig") or {}
        if "secrets" not in (config.get("resources") or []):
            return [f"{_where(resource)}: encrypt Kubernetes secrets (encryptionConfig)"]
    return []


PUBLIC_ACLS = ("public-read", "public-read-write", "authenticated-read")
PUBLIC_GRANTEES = (
    "http://acs.amazonaws.com/groups/global/AllUsers",
    "http://acs.amazonaws.com/groups/global/AuthenticatedUsers",
)


def s3_no_public_access(resource: Resource, limits: Limits) -> list[str]:
    """No bucket ACL or policy opens a bucket to everyone.

    checkov CKV_AWS_20 (public READ), CKV_AWS_57 (public WRITE), CKV_AWS_70 (an action allowed
    to any principal); tfsec aws-s3-no-public-access-with-acl. An Allow to ``*`` counts
    whatever its conditions: a bucket shared outside the account names who it is shared with.
    """
    del limits
    props = resource.inputs
    found: list[str] = []
    if resource.type_ in (*BUCKET_TYPES, *BUCKET_ACL_TYPES):
        acl = str(props.get("acl") or "").lower()
        if acl in PUBLIC_ACLS:
            found.append(f"{_where(resource)}: acl '{acl}' opens the bucket to everyone")
        grants = [
            *(props.get("grants") or []),
            *((props.get("accessControlPolicy") or {}).get("grants") or []),
        ]
        for grant in grants:
            grantee = (grant or {}).get("grantee") or grant or {}
            if str(grantee.get("uri")) in PUBLIC_GRANTEES:
                found.append(f"{_where(resource)}: a grant to {grantee.get('uri')}")
    if resource.type_ in (*BUCKET_TYPES, BUCKET_POLICY):
        for statement in _statements(_document(props.get("policy"))):
            if _allows(statement) and _wildcard_principal(statement):
                found.append(
                    f"{_where(resource)}: the bucket policy allows "
                    f"{', '.join(_listed(statement.get('Action'))) or 'actions'} to any principal"
                )
    return found


def s3_public_access_blocked(resource: Resource, limits: Limits) -> list[str]:
    """Every public access block turns on all four of its settings.

    checkov CKV_AWS_53, CKV_AWS_54, CKV_AWS_55 and CKV_AWS_56; tfsec aws-s3-block-public-acls,
    aws-s3-block-public-policy, aws-s3-ignore-public-acls, aws-s3-no-public-buckets.
    """
    del limits
    if resource.type_ not in (PUBLIC_ACCESS_BLOCK, ACCOUNT_PUBLIC_ACCESS_BLOCK):
        return []
    keys = ("blockPublicAcls", "blockPublicPolicy", "ignorePublicAcls", "restrictPublicBuckets")
    off = [k for k in keys if resource.inputs.get(k) is not True]
    return [f"{_where(resource)}: {', '.join(off)} must be true"] if off else []


def buckets_protected(resources: Sequence[Resource], limits: Limits) -> list[str]:
    """Each bucket has a public access block and a default encryption configuration that name
    it in their ``bucket`` input (or an account-wide public access block).

    checkov CKV2_AWS_6 (a bucket has a public access block) and CKV_AWS_145 (S3 encrypted with
    KMS by default); tfsec aws-s3-specify-public-access-block and aws-s3-enable-bucket-
    encryption. A companion protects the bucket it reads, not the one created beside it.
    """
    del limits
    index = _Index(resources)
    account_block = any(r.type_ == ACCOUNT_PUBLIC_ACCESS_BLOCK for r in resources)
    companions = {
        "BucketPublicAccessBlock": (PUBLIC_ACCESS_BLOCK,),
        "BucketServerSideEncryptionConfiguration": BUCKET_ENCRYPTION,
    }
    found = []
    for bucket in resources:
        if bucket.type_ not in BUCKET_TYPES:
            continue
        for label, types in companions.items():
            if label == "BucketPublicAccessBlock" and account_block:
                continue
            if not any(index.refers(c, "bucket", bucket) for c in resources if c.type_ in types):
                found.append(f"{_where(bucket)}: no {label} names this bucket in its bucket input")
    return found


def _key_policies(key: Resource, resources: Sequence[Resource], index: _Index) -> list[Any]:
    """The key's own policy and every KeyPolicy resource that names it: each applies."""
    separate = [
        r.inputs.get("policy")
        for r in resources
        if r.type_ == KMS_KEY_POLICY and index.refers(r, "keyId", key)
    ]
    return [key.inputs.get("policy"), *separate]


def kms_key_policies(resources: Sequence[Resource], limits: Limits) -> list[str]:
    """The KMS keys that encrypt buckets and FSx file systems rotate, and their key policies
    allow nothing to ``*`` without a condition.

    checkov CKV_AWS_7 (rotation of customer-created keys) and CKV_AWS_33 (no wildcard
    principal in a key policy); tfsec aws-kms-auto-rotate-keys. A key policy given as a
    separate KeyPolicy resource counts for the key its ``keyId`` reads.
    """
    del limits
    index = _Index(resources)
    used: dict[str, Resource] = {}
    for resource in resources:
        if resource.type_ == FSX_LUSTRE:
            for key in index.referred(resource, "kmsKeyId", (KMS_KEY,)):
                used[key.urn or key.name] = key
        if resource.type_ in BUCKET_ENCRYPTION:
            for key in index.referred(resource, "rules", (KMS_KEY,)):
                used[key.urn or key.name] = key
    found: list[str] = []
    for key in used.values():
        if not _true(key.inputs.get("enableKeyRotation")):
            found.append(f"{_where(key)}: enableKeyRotation must be true")
        statements = [
            statement
            for document in _key_policies(key, resources, index)
            for statement in _statements(_document(document))
        ]
        for statement in statements:
            if (
                _allows(statement)
                and _wildcard_principal(statement)
                and not statement.get("Condition")
            ):
                found.append(
                    f"{_where(key)}: the key policy allows "
                    f"{', '.join(_listed(statement.get('Action'))) or 'actions'} to any "
                    "principal without a condition"
                )
    return found


def kms_key_policy_defined(resources: Sequence[Resource], limits: Limits) -> list[str]:
    """Every KMS key the stack makes states its key policy, on the key or as a KeyPolicy that
    names it: none is left to what KMS writes when nobody says.

    checkov CKV2_AWS_64 (a KMS key policy is defined).
    """
    del limits
    index = _Index(resources)
    return [
        f"{_where(key)}: no key policy (set policy, or a KeyPolicy whose keyId reads this key)"
        for key in resources
        if key.type_ == KMS_KEY
        and not key.inputs.get("policy")
        and not any(r.type_ == KMS_KEY_POLICY and index.refers(r, "keyId", key) for r in resources)
    ]


# FSx for Lustre reads and writes a linked bucket through a service-linked role made for the
# file system: AWSServiceRoleForFSxS3Access_<file system id>.
FSX_S3_ROLE = "AWSServiceRoleForFSxS3Access_"
DATA_REPOSITORY_ASSOCIATION = "aws:fsx/dataRepositoryAssociation:DataRepositoryAssociation"
# What a customer-managed key must allow for FSx to use it (the file system's own data through
# grants of its creator; a linked bucket's objects through the service-linked role).
FSX_GRANT_ACTIONS = ("kms:creategrant", "kms:decrypt", "kms:generatedatakey", "kms:describekey")
FSX_IMPORT_ACTIONS = ("kms:decrypt",)
FSX_EXPORT_ACTIONS = ("kms:decrypt", "kms:encrypt", "kms:generatedatakey")


def _key_statements(key: Resource, resources: Sequence[Resource], index: _Index) -> list[Any]:
    return [
        statement
        for document in _key_policies(key, resources, index)
        for statement in _statements(_document(document))
        if _allows(statement)
    ]


def _allows_all(statement: Mapping[str, Any], actions: Iterable[str]) -> bool:
    wanted = set(actions)
    return _granted(statement, wanted) == wanted


def _account_root(principal: str) -> bool:
    return bool(_WHOLE_ACCOUNT.match(principal.strip()))


def _via_fsx(statement: Mapping[str, Any]) -> bool:
    condition = statement.get("Condition") or {}
    return any(
        str(k).lower() == "kms:viaservice" and any(v.startswith("fsx.") for v in _listed(value))
        for values in condition.values()
        if isinstance(values, Mapping)
        for k, value in values.items()
    )


def _bucket_keys(bucket: Resource, resources: Sequence[Resource], index: _Index) -> list[Resource]:
    """The KMS keys the stack makes that encrypt ``bucket`` by default."""
    return [
        key
        for config in resources
        if config.type_ in BUCKET_ENCRYPTION and index.refers(config, "bucket", bucket)
        for key in index.referred(config, "rules", (KMS_KEY,))
    ]


def fsx_key_policy(resources: Sequence[Resource], limits: Limits) -> list[str]:
    """A Lustre file system's key, and the key of a bucket linked to it, let FSx use them, and
    let no one else.

    The file system's key states a policy that lets FSx create its grants: the account
    delegating to IAM (its root principal with the actions FSx uses), or FSx through
    ``kms:ViaService``. A bucket linked by a data repository association is read, and with
    export written, by the file system's S3 service-linked role (``AWSServiceRoleForFSxS3Access_
    <id>``), which its key's policy must name with kms:Decrypt (and kms:Encrypt and
    kms:GenerateDataKey to export); without that, imports fail on every encrypted object.
    Neither key's policy allows anything to ``*``, whatever the condition.
    No checkov check reads a key policy for FSx; near it are CKV_AWS_190 (Lustre with a
    customer key), CKV_AWS_33 (no ``*`` principal in a key policy) and CKV2_AWS_64.
    """
    del limits
    index = _Index(resources)
    found: list[str] = []
    for fs in (r for r in resources if r.type_ == FSX_LUSTRE):
        keys = index.referred(fs, "kmsKeyId", (KMS_KEY,))
        needs: list[tuple[Resource, str, tuple[str, ...]]] = [(k, "", ()) for k in keys]
        for link in resources:
            if link.type_ != DATA_REPOSITORY_ASSOCIATION or not index.refers(
                link, "fileSystemId", fs
            ):
                continue
            export = ((link.inputs.get("s3") or {}).get("autoExportPolicy") or {}).get("events")
            needed: tuple[str, ...] = FSX_EXPORT_ACTIONS if export else FSX_IMPORT_ACTIONS
            for bucket in index.referred(link, "dataRepositoryPath", BUCKET_TYPES):
                needs += [(k, _where(link), needed) for k in _bucket_keys(bucket, resources, index)]
        for key, link_where, actions in needs:
            statements = _key_statements(key, resources, index)
            if not statements:
                found.append(
                    f"{_where(key)}: encrypts {_where(fs)} but states no key policy that lets "
                    "FSx use it"
                )
                continue
            for statement in statements:
                if _wildcard_principal(statement):
                    found.append(
                        f"{_where(key)}: the key policy allows "
                        f"{', '.join(_listed(statement.get('Action'))) or 'actions'} to any "
                        f"principal, on a key {_where(fs)} uses; name the principals"
                    )
            if not link_where:
                if not any(
                    _allows_all(s, FSX_GRANT_ACTIONS)
                    and (any(map(_account_root, _principals(s))) or _via_fsx(s))
                    for s in statements
                ):
                    found.append(
                        f"{_where(key)}: the key policy lets neither the account's IAM "
                        f"policies nor FSx (kms:ViaService) use it for {', '.join(FSX_GRANT_ACTIONS)}; "
                        f"{_where(fs)} cannot encrypt with it"
                    )
                continue
            if not any(
                _allows_all(s, actions) and any(FSX_S3_ROLE in p for p in _principals(s))
                for s in statements
            ):
                found.append(
                    f"{_where(key)}: the key policy does not let the file system's "
                    f"{FSX_S3_ROLE}<id> role use {', '.join(actions)}; {link_where} cannot "
                    "read the encrypted bucket"
                )
    return list(dict.fromkeys(found))


# --- identity ----------------------------------------------------------------------------------

IDENTITY_POLICY_TYPES = (
    "aws:iam/rolePolicy:RolePolicy",
    "aws:iam/policy:Policy",
    "aws:iam/userPolicy:UserPolicy",
    "aws:iam/groupPolicy:GroupPolicy",
)
POLICY_ATTACHMENT_TYPES = (
    "aws:iam/rolePolicyAttachment:RolePolicyAttachment",
    "aws:iam/policyAttachment:PolicyAttachment",
    "aws:iam/userPolicyAttachment:UserPolicyAttachment",
    "aws:iam/groupPolicyAttachment:GroupPolicyAttachment",
)
# AWS managed policies that grant administration of the account or of IAM itself.
ADMIN_POLICIES = ("AdministratorAccess", "PowerUserAccess", "IAMFullAccess")
_MANAGED_ARN = re.compile(
    r"^arn:aws[a-z-]*:iam::aws:policy/(?:[\w+=,.@-]+/)*(?P<name>[\w+=,.@-]+)$"
)
_WHOLE_ACCOUNT = re.compile(r"^(\d{12}|arn:aws[a-z-]*:iam::\d{12}:root)$")


def _identity_documents(resource: Resource) -> list[Any]:
    if resource.type_ in IDENTITY_POLICY_TYPES:
        return [resource.inputs.get("policy")]
    if resource.type_ == IAM_ROLE:
        return [p.get("policy") for p in resource.inputs.get("inlinePolicies") or [] if p]
    return []


# Read actions AWS authorises on no resource type (its Service Authorization Reference lists
# none for them): "Resource": "*" is the only form they take. The Cluster Autoscaler reads these.
UNSCOPED_READS = frozenset(
    {
        "autoscaling:DescribeAutoScalingGroups",
        "autoscaling:DescribeAutoScalingInstances",
        "autoscaling:DescribeLaunchConfigurations",
        "autoscaling:DescribeScalingActivities",
        "autoscaling:DescribeTags",
        "ec2:DescribeImages",
        "ec2:DescribeInstanceTypes",
        "ec2:DescribeLaunchTemplateVersions",
        "ec2:GetInstanceTypesFromInstanceRequirements",
    }
)


def iam_no_wildcards(resource: Resource, limits: Limits) -> list[str]:
    """Identity policies name their actions and resources: no ``*`` in an allowed action, no
    ``"Resource": "*"``, no Allow with NotAction or NotResource.

    checkov CKV_AWS_1 and CKV_AWS_62 (no ``*:*`` administrative policy), CKV_AWS_63 (no ``*``
    action), CKV_AWS_355 (no ``*`` resource); tfsec aws-iam-no-policy-wildcards. Stricter:
    ``s3:*`` or ``s3:Get*`` counts as a wildcard, and a ``*`` resource is refused for every
    action but the reads in ``UNSCOPED_READS``, which take no resource (checkov exempts every
    action that takes none).
    """
    del limits
    found: list[str] = []
    for document in _identity_documents(resource):
        for statement in _statements(_document(document)):
            if not _allows(statement):
                continue
            actions = [a for a in _listed(statement.get("Action")) if "*" in a]
            if actions:
                found.append(f"{_where(resource)}: allows wildcard actions {', '.join(actions)}")
            if "NotAction" in statement or "NotResource" in statement:
                found.append(f"{_where(resource)}: an Allow with NotAction or NotResource")
            listed = _listed(statement.get("Action"))
            unscoped = bool(listed) and all(a in UNSCOPED_READS for a in listed)
            if "*" in [r.strip() for r in _listed(statement.get("Resource"))] and not unscoped:
                found.append(f"{_where(resource)}: allows on every resource ('Resource': '*')")
    return found


def iam_no_admin_policies(resource: Resource, limits: Limits) -> list[str]:
    """No role, user or group the stack makes gets an administrator's managed policy
    (AdministratorAccess, PowerUserAccess, IAMFullAccess).

    checkov CKV_AWS_274 (no AdministratorAccess); tfsec aws-iam-no-policy-wildcards for the
    policies' own ``*``. Stricter: PowerUserAccess and IAMFullAccess count too. The operators'
    administrator role is given by ARN (``cluster.adminRoleArn``), never made by a stack.
    """
    del limits
    arns: list[str] = []
    if resource.type_ in POLICY_ATTACHMENT_TYPES:
        arns = _listed(resource.inputs.get("policyArn"))
    elif resource.type_ == IAM_ROLE:
        arns = _listed(resource.inputs.get("managedPolicyArns"))
    found = []
    for arn in arns:
        match = _MANAGED_ARN.match(arn)
        if match and match.group("name") in ADMIN_POLICIES:
            found.append(f"{_where(resource)}: {match.group('name')} on a workload identity")
    return found


def _granted(statement: Mapping[str, Any], wanted: Iterable[str]) -> set[str]:
    """Which of ``wanted`` (lower-case action names) a statement names, wildcards and
    NotAction included."""
    if "NotAction" in statement:
        excluded = [p.strip().lower() for p in _listed(statement.get("NotAction"))]
        return {a for a in wanted if not any(fnmatchcase(a, p) for p in excluded)}
    patterns = [p.strip().lower() for p in _listed(statement.get("Action"))]
    return {a for a in wanted if any(fnmatchcase(a, p) for p in patterns)}


def _unconstrained(documents: Iterable[Any], wanted: Iterable[str]) -> set[str]:
    """Which of ``wanted`` these policy documents allow, together, without a condition and on
    every resource: ``Resource: "*"`` (or NotResource), or an action no policy can scope.

    Only a Deny of its own on every resource, without a condition, takes an action back.
    """
    candidates = set(wanted)
    allowed: set[str] = set()
    denied: set[str] = set()
    for document in documents:
        for statement in _statements(_document(document)):
            if statement.get("Condition"):
                continue
            granted = _granted(statement, candidates)
            anywhere = "*" in [r.strip() for r in _listed(statement.get("Resource"))]
            if _allows(statement):
                anywhere = anywhere or "NotResource" in statement
                allowed |= {a for a in granted if anywhere or a in iam_actions.WILDCARD_ONLY}
            elif anywhere:
                denied |= granted
    return allowed - denied


def _role_documents(resources: Sequence[Resource]) -> list[tuple[Resource, list[Any]]]:
    """Each role with every identity policy document it holds (inline, a RolePolicy naming
    it, a Policy attached to it), then each policy the stack makes that names no role."""
    index = _Index(resources)
    policies = [r for r in resources if r.type_ in IDENTITY_POLICY_TYPES]
    attachments = [r for r in resources if r.type_ in POLICY_ATTACHMENT_TYPES]
    held: set[str] = set()
    found: list[tuple[Resource, list[Any]]] = []
    for role in (r for r in resources if r.type_ == IAM_ROLE):
        documents = _identity_documents(role)
        for p in policies:
            attached = p.type_ == "aws:iam/rolePolicy:RolePolicy" and index.refers(p, "role", role)
            attached = attached or any(
                (index.refers(a, "role", role) or index.refers(a, "roles", role))
                and index.refers(a, "policyArn", p)
                for a in attachments
            )
            if attached:
                documents += _identity_documents(p)
                held.add(p.urn or p.name)
        found.append((role, documents))
    found += [(p, _identity_documents(p)) for p in policies if (p.urn or p.name) not in held]
    return found


def iam_no_privilege_escalation(resources: Sequence[Resource], limits: Limits) -> list[str]:
    """No role's policies, taken together, allow a known way to raise its own privileges.

    checkov CKV_AWS_286 (cloudsplaining's privilege escalation methods: creating another
    user's keys, writing or attaching policies, passing a role to new compute, ...), with the
    actions in ``gpuinfra.review.iam_actions``. An action counts when it is allowed on every
    resource without a condition, or cannot be scoped to one. Stricter: checkov judges each
    policy alone; here a role's inline policies, RolePolicy resources and attached Policies
    count together, so a method split across two policies is found too.
    """
    del limits
    found: list[str] = []
    for holder, documents in _role_documents(resources):
        wanted = {a for actions in iam_actions.PRIVILEGE_ESCALATION.values() for a in actions}
        allowed = _unconstrained(documents, wanted)
        methods = [
            name
            for name, actions in iam_actions.PRIVILEGE_ESCALATION.items()
            if set(actions) <= allowed
        ]
        if methods:
            actions = sorted({a for m in methods for a in iam_actions.PRIVILEGE_ESCALATION[m]})
            found.append(
                f"{_where(holder)}: allows privilege escalation ({', '.join(methods)}) through "
                f"{', '.join(actions)} on every resource; name the resources or add a condition"
            )
    return found


def iam_no_credentials_exposure(resource: Resource, limits: Limits) -> list[str]:
    """No identity policy allows, unconstrained, an API call that answers with credentials.

    checkov CKV_AWS_287 (cloudsplaining's actions that return credentials, less
    ecr:GetAuthorizationToken, which nodes need to pull images): ``sts:AssumeRole``,
    ``iam:CreateAccessKey``, ``sts:GetSessionToken``, ``redshift:GetClusterCredentials``, ...
    on every resource without a condition, or an action no policy can scope.
    """
    del limits
    allowed = _unconstrained(_identity_documents(resource), iam_actions.CREDENTIALS_EXPOSURE)
    if not allowed:
        return []
    return [
        f"{_where(resource)}: allows {', '.join(sorted(allowed))} on every resource, which "
        "answers with credentials; name the resources or add a condition"
    ]


def iam_no_data_exfiltration(resource: Resource, limits: Limits) -> list[str]:
    """No identity policy allows, unconstrained, the reads that leak data and secrets.

    checkov CKV_AWS_288 (s3:GetObject, ssm:GetParameter, ssm:GetParameters,
    ssm:GetParametersByPath, secretsmanager:GetSecretValue on every resource without a
    condition). ``iam-no-wildcards`` refuses every ``Resource: "*"``; this rule says which
    data it would have handed out.
    """
    del limits
    allowed = _unconstrained(_identity_documents(resource), iam_actions.DATA_EXFILTRATION)
    if not allowed:
        return []
    return [
        f"{_where(resource)}: allows {', '.join(sorted(allowed))} on every resource; name "
        "the buckets, parameters or secrets"
    ]


# The managed policies that let the VPC CNI manage network interfaces (IPv4 and IPv6).
CNI_POLICIES = ("AmazonEKS_CNI_Policy", "AmazonEKS_CNI_IPv6_Policy")


def _trusts_service(role: Resource, service: str) -> bool:
    return any(
        _allows(s) and service in _principals(s)
        for s in _statements(_document(role.inputs.get("assumeRolePolicy")))
    )


def node_role_no_cni_policy(resources: Sequence[Resource], limits: Limits) -> list[str]:
    """No role that EC2 instances assume (a node role) holds the VPC CNI's policy: aws-node
    gets it through its own identity (Pod Identity or IRSA), so a pod that reaches the
    node's credentials cannot rewrite the VPC's network interfaces.

    No checkov check; EKS's best practices guide (use IRSA or Pod Identity for the CNI).
    """
    del limits
    index = _Index(resources)
    found: list[str] = []
    for role in resources:
        if role.type_ != IAM_ROLE or not _trusts_service(role, "ec2.amazonaws.com"):
            continue
        arns = list(_listed(role.inputs.get("managedPolicyArns")))
        arns += [
            arn
            for a in resources
            if a.type_ in POLICY_ATTACHMENT_TYPES
            and (index.refers(a, "role", role) or index.refers(a, "roles", role))
            for arn in _listed(a.inputs.get("policyArn"))
        ]
        for arn in arns:
            match = _MANAGED_ARN.match(arn)
            if match and match.group("name") in CNI_POLICIES:
                found.append(
                    f"{_where(role)}: {match.group('name')} on a node role; give the VPC CNI "
                    "(aws-node) its own role through Pod Identity"
                )
    return found


def _source_scoped(statement: Mapping[str, Any]) -> bool:
    condition = statement.get("Condition") or {}
    keys = {
        str(k).lower()
        for values in condition.values()
        if isinstance(values, Mapping)
        for k in values
    }
    return bool(keys & {"aws:sourcearn", "aws:sourceaccount"})


def iam_trust_principals(resource: Resource, limits: Limits) -> list[str]:
    """A role's trust policy names who may assume it: no ``*`` principal and no whole account.

    checkov CKV_AWS_60 (only specific services or principals assume a role) and CKV_AWS_61 (no
    assume-role permission for a whole account); tfsec aws-iam-no-policy-wildcards. Beyond
    checkov: a role EKS Pod Identity assumes (``pods.eks.amazonaws.com``) names the cluster or
    account it serves (an ``aws:SourceArn`` or ``aws:SourceAccount`` condition), or any cluster
    that can create a pod identity association could take it.
    """
    del limits
    if resource.type_ != IAM_ROLE:
        return []
    found = []
    for statement in _statements(_document(resource.inputs.get("assumeRolePolicy"))):
        if not _allows(statement):
            continue
        if _wildcard_principal(statement):
            found.append(f"{_where(resource)}: the trust policy lets any principal assume it")
        if "pods.eks.amazonaws.com" in _principals(statement) and not _source_scoped(statement):
            found.append(
                f"{_where(resource)}: the Pod Identity trust names no aws:SourceArn or "
                "aws:SourceAccount condition; scope it to the cluster"
            )
        accounts = [p for p in _principals(statement) if _WHOLE_ACCOUNT.match(p.strip())]
        if accounts:
            found.append(
                f"{_where(resource)}: the trust policy lets every identity of "
                f"{', '.join(accounts)} assume it; name the roles"
            )
    return found


# --- EKS -------------------------------------------------------------------------------------


def eks_endpoint(resource: Resource, limits: Limits) -> list[str]:
    """The EKS API endpoint is never open to the whole internet, and private in prod.

    checkov CKV_AWS_38 (public endpoint not open to 0.0.0.0/0) and CKV_AWS_39 (public endpoint
    disabled), tfsec aws-eks-no-public-cluster-access and
    aws-eks-no-public-cluster-access-to-cidr. AWS defaults a cluster without ``vpcConfig``
    values to a public endpoint open to 0.0.0.0/0; CIDRs that together cover the internet
    (0.0.0.0/1 and 128.0.0.0/1) are the internet.
    """
    if resource.type_ != EKS_CLUSTER:
        return []
    vpc = resource.inputs.get("vpcConfig") or {}
    public = vpc.get("endpointPublicAccess", True)
    if not _true(public):
        return []
    found = []
    cidrs = _listed(vpc.get("publicAccessCidrs")) or ["0.0.0.0/0"]
    world = world_cidr(cidrs)
    if world is not None:
        found.append(
            f"{_where(resource)}: the public API endpoint is open to the whole internet "
            f"({', '.join(cidrs)}); list the CIDRs that deploy, or turn it off"
        )
    if limits.environment == "prod":
        found.append(
            f"{_where(resource)}: prod keeps the API endpoint private "
            "(vpcConfig.endpointPublicAccess: false)"
        )
    return found


EKS_LOG_TYPES = ("api", "audit", "authenticator", "controllerManager", "scheduler")


def eks_control_plane_logs(resource: Resource, limits: Limits) -> list[str]:
    """An EKS cluster sends every control-plane log type to CloudWatch.

    checkov CKV_AWS_37 (control plane logging enabled for all log types), tfsec
    aws-eks-enable-control-plane-logging.
    """
    del limits
    if resource.type_ != EKS_CLUSTER:
        return []
    enabled = set(_listed(resource.inputs.get("enabledClusterLogTypes")))
    missing = [t for t in EKS_LOG_TYPES if t not in enabled]
    if not missing:
        return []
    return [f"{_where(resource)}: enabledClusterLogTypes lacks {', '.join(missing)}"]


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


SCALED_OBJECT = "kubernetes:keda.sh/v1alpha1:ScaledObject"


def no_idle_reclaim_in_prod(resource: Resource, limits: Limits) -> list[str]:
    """prod keeps its replicas: no KEDA ScaledObject scales a prod workload to zero for being
    idle (idle reclaim is for dev and test). No checkov counterpart."""
    if limits.environment != "prod" or resource.type_ != SCALED_OBJECT:
        return []
    return [f"{_where(resource)}: scales a prod workload to zero when idle; dev and test only"]


# --- capacity: instance types, node cap, cost ----------------------------------------------------


@dataclass(frozen=True)
class Capacity:
    """Nodes a resource may run: its instance types (where they are set) and maximum count."""

    resource: Resource
    instance_types: tuple[str, ...]
    max_size: int
    system: bool


def _is_system(resource: Resource) -> bool:
    """The CPU node group for controllers: pool label 'system', not a GPU allowance."""
    labels = resource.inputs.get("labels") or {}
    return resource.type_ == NODE_GROUP and labels.get(POOL_LABEL) == SYSTEM_POOL


def _template_types(resource: Resource, prop: str, index: _Index) -> tuple[str, ...]:
    """The instance types of the launch templates (or configurations) ``resource`` reads."""
    templates = index.referred(resource, prop, (LAUNCH_TEMPLATE, LAUNCH_CONFIGURATION))
    return tuple(str(t.inputs["instanceType"]) for t in templates if t.inputs.get("instanceType"))


def capacities(resources: Sequence[Resource]) -> list[Capacity]:
    """Every node group, autoscaling group and instance, with the instance types it runs
    wherever they are set: on the group, on its launch template (or launch configuration),
    in a mixed instances policy; an EKS group with none runs EKS's default type."""
    index = _Index(resources)
    found: list[Capacity] = []
    for r in resources:
        props = r.inputs
        if r.type_ == NODE_GROUP:
            types = tuple(str(t) for t in props.get("instanceTypes") or ())
            types = types or _template_types(r, "launchTemplate", index)
            size = _port((props.get("scalingConfig") or {}).get("maxSize"), 0)
            found.append(Capacity(r, types or (EKS_DEFAULT_INSTANCE_TYPE,), size, _is_system(r)))
        elif r.type_ == AUTOSCALING_GROUP:
            mixed = (props.get("mixedInstancesPolicy") or {}).get("launchTemplate") or {}
            types = tuple(
                str(o["instanceType"])
                for o in mixed.get("overrides") or []
                if o.get("instanceType")
            )
            for prop in ("launchTemplate", "launchConfiguration", "mixedInstancesPolicy"):
                types = types or _template_types(r, prop, index)
            found.append(Capacity(r, types, _port(props.get("maxSize"), 0), False))
        elif r.type_ == INSTANCE:
            types = (str(props["instanceType"]),) if props.get("instanceType") else ()
            found.append(Capacity(r, types, 1, False))
    return found


def allowed_instance_types(resources: Sequence[Resource], limits: Limits) -> list[str]:
    """Node groups, autoscaling groups, instances and launch templates use the environment's
    GPU types, wherever the type is set; the system node group a small CPU family."""
    found: list[str] = []
    system_types: set[str] = set()
    for cap in capacities(resources):
        if cap.system:
            system_types.update(cap.instance_types)
            found += [
                f"{_where(cap.resource)}: {p}"
                for p in map(system_type_problem, cap.instance_types)
                if p
            ]
            continue
        refused = sorted({t for t in cap.instance_types if t not in limits.allowed_instance_types})
        if not cap.instance_types:
            refused = ["no instance type"]
        if refused:
            found.append(
                f"{_where(cap.resource)}: {', '.join(refused)} not allowed in "
                f"{limits.environment} (allowed: {', '.join(limits.allowed_instance_types)})"
            )
    for r in resources:
        if r.type_ not in (LAUNCH_TEMPLATE, LAUNCH_CONFIGURATION) or not r.inputs.get(
            "instanceType"
        ):
            continue
        kind = str(r.inputs["instanceType"])
        if kind not in limits.allowed_instance_types and kind not in system_types:
            found.append(
                f"{_where(r)}: {kind} not allowed in {limits.environment} "
                f"(allowed: {', '.join(limits.allowed_instance_types)})"
            )
    return found


def node_cap(resources: Sequence[Resource], limits: Limits) -> list[str]:
    """The GPU node groups' maximum sizes add up to at most the environment's cap.

    Counts every node group (its own types or its launch template's), autoscaling group and
    instance the stack makes, the CPU system group aside.
    """
    total = sum(c.max_size for c in capacities(resources) if not c.system)
    if total <= limits.max_nodes:
        return []
    return [
        f"GPU node groups may grow to {total} nodes; {limits.environment} allows {limits.max_nodes}"
    ]


def stack_regions(resources: Sequence[Resource]) -> set[str]:
    """The AWS regions a stack's resources name: its AWS providers' region and the region of
    each subnet's availability zone (a name the catalog does not list is left out)."""
    found: set[str] = set()
    for r in resources:
        value = r.inputs.get("region" if r.type_ == AWS_PROVIDER else "availabilityZone")
        if not isinstance(value, str):
            continue
        if r.type_ == AWS_PROVIDER:
            found.add(value)
        elif r.type_ == SUBNET and (region := catalog.region_of_zone(value)):
            found.add(region)
    return found


def monthly_cost_ceiling(resources: Sequence[Resource], limits: Limits) -> list[str]:
    """GPU nodes at their maximum size, priced on demand, fit the monthly budget.

    Spot and reserved capacity are priced on demand too: the ceiling is an upper bound. A
    group of several types is priced at its dearest. The catalog's prices are one region's: a
    stack in another region cannot be checked, rather than be priced as if it ran there.
    """
    gpu_capacity = [c for c in capacities(resources) if not c.system and c.max_size > 0]
    unpriced = sorted(stack_regions(resources) - {catalog.PRICE_REGION})
    if gpu_capacity and unpriced:
        return [
            f"no on-demand prices for {', '.join(unpriced)} in the catalog ({catalog.PRICE_DATE}, "
            f"{catalog.PRICE_REGION} only); the cost ceiling cannot be checked"
        ]
    found: list[str] = []
    total = 0.0
    for cap in gpu_capacity:
        costs: list[float] = []
        for instance_type in cap.instance_types or ("",):
            cost = catalog.monthly_on_demand_usd(instance_type, cap.max_size)
            if cost is None:
                found.append(
                    f"{_where(cap.resource)}: no on-demand price for "
                    f"{instance_type or 'an unnamed instance type'} in the catalog "
                    f"({catalog.PRICE_DATE}); the cost ceiling cannot be checked"
                )
                continue
            costs.append(cost)
        total += max(costs, default=0.0)
    if total > limits.monthly_budget_usd:
        found.append(
            f"GPU nodes at maximum size cost ${total:,.0f}/month on demand "
            f"(prices of {catalog.PRICE_DATE}); {limits.environment} allows "
            f"${limits.monthly_budget_usd:,.0f}"
        )
    return found


# --- tags --------------------------------------------------------------------------------------


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


RESOURCE_RULES: dict[str, tuple[str, ResourceRule]] = {
    "default-security-group-closed": (
        "The default security group holds no rules (CKV2_AWS_12)",
        default_security_group_closed,
    ),
    "imdsv2-required": (
        "IMDSv2 required, hop limit 1 (CKV_AWS_79, CKV_AWS_341)",
        imdsv2_required,
    ),
    "no-public-instance-ip": ("No public IP on instances (CKV_AWS_88)", no_public_instance_ip),
    "encryption-at-rest": (
        "S3, FSx and Kubernetes secrets encrypted (CKV_AWS_19, CKV_AWS_145, CKV_AWS_190, CKV_AWS_58)",
        encryption_at_rest,
    ),
    "s3-no-public-access": (
        "No public bucket ACL or policy (CKV_AWS_20, CKV_AWS_57, CKV_AWS_70)",
        s3_no_public_access,
    ),
    "s3-public-access-blocked": (
        "S3 public access blocks complete (CKV_AWS_53 to CKV_AWS_56)",
        s3_public_access_blocked,
    ),
    "iam-no-wildcards": (
        "No wildcard IAM actions or resources (CKV_AWS_1, CKV_AWS_62, CKV_AWS_63, CKV_AWS_355)",
        iam_no_wildcards,
    ),
    "iam-no-admin-policies": (
        "No administrator managed policies on workload identities (CKV_AWS_274)",
        iam_no_admin_policies,
    ),
    "iam-no-credentials-exposure": (
        "No unconstrained actions that return credentials (CKV_AWS_287)",
        iam_no_credentials_exposure,
    ),
    "iam-no-data-exfiltration": (
        "No unconstrained reads of objects, parameters or secrets (CKV_AWS_288)",
        iam_no_data_exfiltration,
    ),
    "iam-trust-principals": (
        "Trust policies name who assumes a role (CKV_AWS_60, CKV_AWS_61)",
        iam_trust_principals,
    ),
    "eks-endpoint": (
        "EKS endpoint never open to the internet, private in prod (CKV_AWS_38, CKV_AWS_39)",
        eks_endpoint,
    ),
    "eks-control-plane-logs": (
        "Every EKS control-plane log type on (CKV_AWS_37)",
        eks_control_plane_logs,
    ),
    "pinned-versions": ("Pinned GPU AMI and chart versions outside dev", pinned_versions),
    "required-cost-tags": ("team, project and cost-center tags", required_cost_tags),
    "no-idle-reclaim-in-prod": (
        "No scale-to-zero of idle workloads in prod",
        no_idle_reclaim_in_prod,
    ),
}
STACK_RULES: dict[str, tuple[str, StackRule]] = {
    "no-world-ingress": (
        "No ingress from the whole internet on any port (CKV_AWS_24, CKV_AWS_25, CKV_AWS_260, "
        "CKV_AWS_277, CKV_AWS_100)",
        no_world_ingress,
    ),
    "ebs-encrypted": (
        "Every EC2 volume encrypted (CKV_AWS_3, CKV_AWS_8, CKV_AWS_106)",
        ebs_encrypted,
    ),
    "buckets-protected": (
        "Every bucket has its public access block and encryption (CKV2_AWS_6, CKV_AWS_145)",
        buckets_protected,
    ),
    "kms-key-policies": (
        "Bucket and FSx keys rotate, no wildcard key policy (CKV_AWS_7, CKV_AWS_33)",
        kms_key_policies,
    ),
    "kms-key-policy-defined": (
        "Every KMS key states its key policy (CKV2_AWS_64)",
        kms_key_policy_defined,
    ),
    "fsx-key-policy": (
        "FSx keys let FSx and its S3 role use them, and no '*' (near CKV_AWS_190, CKV_AWS_33)",
        fsx_key_policy,
    ),
    "node-role-no-cni-policy": (
        "The VPC CNI's policy on its own identity, not the node role",
        node_role_no_cni_policy,
    ),
    "iam-no-privilege-escalation": (
        "No privilege escalation through a role's policies (CKV_AWS_286)",
        iam_no_privilege_escalation,
    ),
    "allowed-instance-types": (
        "GPU instance types allowed per environment, wherever set",
        allowed_instance_types,
    ),
    "node-cap": ("Node count cap per environment", node_cap),
    "monthly-cost-ceiling": (
        "Monthly on-demand cost ceiling per environment",
        monthly_cost_ceiling,
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

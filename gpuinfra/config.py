"""Typed configuration of an environment (a Pulumi stack file) and of a bare-metal site.

Every model forbids unknown keys, so a misspelled key is an error with a suggestion rather than
a silently ignored setting. Loading functions return models or raise ConfigError.
"""

from __future__ import annotations

import importlib.util
import ipaddress
import re
from collections.abc import Collection
from functools import cache
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from gpuinfra import catalog, labels
from gpuinfra.addons import AddonsSettings
from gpuinfra.addons.gpu_operator import MIG_ALL_DISABLED, MIG_CONFIG_LABEL
from gpuinfra.addons.prometheus_stack import alerting_secret_config_keys
from gpuinfra.errors import ConfigError, Problem, UsageError, excerpt
from gpuinfra.loading import (
    display_path,
    is_dir,
    is_file,
    join_path,
    list_dir,
    load_yaml,
    located_messages,
    validate,
)
from gpuinfra.paths import repo_root
from gpuinfra.suggest import allowed, did_you_mean

ENVIRONMENTS = ("dev", "staging", "prod")
NAMESPACE = "gpuinfra"
_NAME = re.compile(r"^[a-z][a-z0-9-]{0,38}[a-z0-9]$")
# Node labels under this prefix are the contract with Kueue's ResourceFlavors.
RESERVED_LABEL_PREFIX = "gpuinfra.dev/"
POOL_LABEL = "gpuinfra.dev/pool"
# The CPU node group for controllers carries this pool label; GPU pools may not take the name.
SYSTEM_POOL = "system"
# x86 general-purpose, compute and memory families the standard EKS AMI runs on.
SYSTEM_INSTANCE_FAMILIES = ("m6i", "m7i", "c6i", "c7i", "r6i", "r7i")
# The sizes EC2 offers in those families, by generation, with their vCPUs.
_XLARGE = {f"{n}xlarge": 4 * n for n in (2, 4, 8, 12, 16, 24)}
SYSTEM_INSTANCE_SIZES = {
    "6i": {"large": 2, "xlarge": 4, **_XLARGE, "32xlarge": 128, "metal": 128},
    "7i": {
        "large": 2,
        "xlarge": 4,
        **_XLARGE,
        "48xlarge": 192,
        "metal-24xl": 96,
        "metal-48xl": 192,
    },
}
# Amazon EKS service quotas: nodes per managed node group, and managed node groups per cluster.
MAX_NODES_PER_GROUP = 450
MAX_NODE_GROUPS = 30
# The IOPS an io2 volume may be provisioned with (EC2's CreateVolume).
IO2_MIN_IOPS = 100
IO2_MAX_IOPS = 256_000
# The smallest IPv4 subnet a VPC takes (16 addresses, 5 of them kept by AWS).
MAX_SUBNET_PREFIX = 28
# A stack name as Pulumi allows it (letters, digits, '-', '_', '.'), and no longer than a
# file name can carry.
_STACK_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$")


class Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=False)


def camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(p.title() for p in rest)


class CamelModel(Model):
    """Stack files use Pulumi's camelCase keys."""

    model_config = ConfigDict(extra="forbid", frozen=True, alias_generator=camel)


# --- cloud environment (stacks/Pulumi.<env>.yaml) ------------------------------------------

CapacityType = Literal["on-demand", "spot", "capacity-reservation", "capacity-block"]
Cidr = Annotated[str, Field(min_length=9)]


def _cidr(value: str) -> str:
    try:
        ipaddress.ip_network(value, strict=True)
    except ValueError as exc:
        raise ValueError(f"'{value}' is not a CIDR block ({exc})") from None
    return value


def vpc_problem(cidr: str) -> str | None:
    """What is wrong with a CIDR block, valid as such, as a GPU VPC's block; None when nothing."""
    net = ipaddress.ip_network(cidr)
    if net.version != 4 or not 16 <= net.prefixlen <= 20:
        return f"'{cidr}': a GPU VPC takes an IPv4 /16 to /20 block"
    if (
        net.is_multicast
        or net.is_loopback
        or net.is_link_local
        or net.is_reserved
        or net.subnet_of(ipaddress.IPv4Network("0.0.0.0/8"))
    ):
        return (
            f"'{cidr}' is no range hosts are addressed from (allowed: a private range such as "
            "10.40.0.0/16, 172.16.0.0/16 or 192.168.0.0/16)"
        )
    return None


def world_cidr(blocks: Any) -> str | None:
    """``0.0.0.0/0`` or ``::/0`` when ``blocks`` together cover it (0.0.0.0/1 with
    128.0.0.0/1 does), else None; what is not a CIDR block covers nothing."""
    networks: dict[int, list[Any]] = {4: [], 6: []}
    for block in blocks or ():
        try:
            net = ipaddress.ip_network(str(block).strip(), strict=False)
        except ValueError:
            continue
        networks[net.version].append(net)
    for version, world in ((4, "0.0.0.0/0"), (6, "::/0")):
        if ipaddress.ip_network(world) in ipaddress.collapse_addresses(networks[version]):
            return world
    return None


# Cost tags every taggable cloud resource carries (the policy pack refuses resources without).
REQUIRED_TAGS = ("team", "project", "cost-center")


# What AWS takes in a tag's value: letters and digits of any script, spaces and _ . : / = + - @.
_TAG_VALUE = re.compile(r"^[\w .:/=+\-@]*$")


class Tags(CamelModel):
    team: str = Field(min_length=1, max_length=256)
    project: str = Field(min_length=1, max_length=256)
    cost_center: str = Field(min_length=1, max_length=256)

    @field_validator("team", "project", "cost_center")
    @classmethod
    def _aws_value(cls, value: str) -> str:
        if not _TAG_VALUE.match(value):
            raise ValueError(
                f"{excerpt(repr(value))} is not a tag value AWS takes (allowed: letters, digits, "
                "spaces and _ . : / = + - @)"
            )
        return value

    def as_aws(self) -> dict[str, str]:
        return {"team": self.team, "project": self.project, "cost-center": self.cost_center}


class NetworkConfig(CamelModel):
    cidr: str = "10.40.0.0/16"
    availability_zones: list[str] = Field(min_length=1, max_length=6)
    # One per availability zone, in the same order; carved from ``cidr`` when left out.
    private_subnet_cidrs: list[str] | None = None
    public_subnet_cidrs: list[str] | None = None
    single_nat_gateway: bool = True
    flow_logs: bool = False

    @field_validator("cidr")
    @classmethod
    def _vpc(cls, value: str) -> str:
        # Checked here, before the default subnets are carved from it (an eighth of a /31
        # cannot be carved at all).
        if why := vpc_problem(_cidr(value)):
            raise ValueError(why)
        return value

    @field_validator("private_subnet_cidrs", "public_subnet_cidrs")
    @classmethod
    def _subnets(cls, value: list[str] | None) -> list[str] | None:
        for cidr in value or ():
            _cidr(cidr)
        return value


class ClusterConfig(CamelModel):
    endpoint_public_access: bool = False
    public_access_cidrs: list[str] = Field(default_factory=list)
    admin_role_arn: str | None = Field(
        default=None, pattern=r"^arn:aws[a-z-]*:iam::\d{12}:role/.+$"
    )
    system_instance_type: str = "m7i.large"
    system_node_count: int = Field(default=2, ge=1, le=10)
    # The Cluster Autoscaler (gpuinfra/autoscaler.py): GPU pools grow from and shrink to their
    # minSize as pods come and go.
    autoscaler: bool = False

    @field_validator("system_instance_type")
    @classmethod
    def _system_type(cls, value: str) -> str:
        problem = system_type_problem(value)
        if problem:
            raise ValueError(problem)
        return value

    @field_validator("public_access_cidrs")
    @classmethod
    def _cidrs(cls, value: list[str]) -> list[str]:
        for cidr in value:
            _cidr(cidr)
        world = world_cidr(value)
        if world is not None:
            shown = ", ".join(f"'{c}'" for c in value)
            raise ValueError(
                f"{shown} open the API endpoint to the whole internet ({world}); list your CIDRs"
            )
        return value

    @model_validator(mode="after")
    def _public_needs_cidrs(self) -> ClusterConfig:
        if self.endpoint_public_access and not self.public_access_cidrs:
            raise ValueError("endpointPublicAccess: true needs publicAccessCidrs")
        return self


def _label_key(key: str) -> str:
    # The key is the last part of the error's path: the message need not quote it again.
    if why := labels.key_problem(key):
        raise ValueError(why)
    return key


def _label_value(value: str) -> str:
    if why := labels.value_problem(value):
        raise ValueError(why)
    return value


LabelKey = Annotated[str, AfterValidator(_label_key)]
LabelValue = Annotated[str, AfterValidator(_label_value)]


class NodePoolConfig(CamelModel):
    name: str
    instance_type: str
    capacity_type: CapacityType = "on-demand"
    min_size: int = Field(default=0, ge=0, le=MAX_NODES_PER_GROUP)
    max_size: int = Field(default=1, ge=0, le=MAX_NODES_PER_GROUP)
    desired_size: int = Field(default=0, ge=0, le=MAX_NODES_PER_GROUP)
    availability_zone: str | None = None
    efa: bool = False
    root_volume_gib: int = Field(default=200, ge=50, le=16384)
    capacity_reservation_id: str | None = Field(default=None, pattern=r"^cr-[0-9a-f]{8,17}$")
    labels: dict[LabelKey, LabelValue] = Field(default_factory=dict)

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not _NAME.match(value):
            raise ValueError(
                f"{excerpt(repr(value), 50)} is not a pool name (allowed: 2-40 lowercase letters, "
                "digits and '-', starting with a letter and ending with a letter or digit)"
            )
        if value == SYSTEM_POOL:
            raise ValueError(f"'{SYSTEM_POOL}' names the CPU node group gpuinfra adds itself")
        return value

    @field_validator("instance_type")
    @classmethod
    def _instance_type(cls, value: str) -> str:
        problem = instance_type_problem(value)
        if problem:
            raise ValueError(problem)
        return value


class FsxConfig(CamelModel):
    enabled: bool = False
    storage_capacity_gib: int = Field(default=1200, ge=1200)
    throughput_per_tib: Literal[125, 250, 500, 1000] = 125
    link_model_bucket: bool = True
    # Files written under the mount go back to the model bucket only when asked (never deletes).
    export_to_bucket: bool = False

    @field_validator("storage_capacity_gib")
    @classmethod
    def _capacity(cls, value: int) -> int:
        if value % 2400 and value != 1200:
            raise ValueError(f"{value} GiB: PERSISTENT_2 takes 1200 GiB or a multiple of 2400 GiB")
        return value


class StorageConfig(CamelModel):
    model_bucket_versioning: bool = True
    fsx: FsxConfig = Field(default_factory=FsxConfig)
    ebs_volume_type: Literal["gp3", "io2"] = "gp3"
    # io2 volumes are provisioned with a set IOPS: the EBS CSI driver asks EC2 for it, and EC2
    # creates no io2 volume without one.
    ebs_iops: int | None = Field(default=None, ge=IO2_MIN_IOPS, le=IO2_MAX_IOPS)


class StackConfig(Model):
    """The ``gpuinfra:*`` keys of a stack file, plus the AWS region."""

    environment: Literal["dev", "staging", "prod"]
    region: str
    tags: Tags
    network: NetworkConfig
    cluster: ClusterConfig = Field(default_factory=ClusterConfig)
    node_pools: list[NodePoolConfig] = Field(min_length=1, max_length=MAX_NODE_GROUPS)
    storage: StorageConfig = Field(default_factory=StorageConfig)
    addons: AddonsSettings = Field(default_factory=AddonsSettings)


# --- checks shared by the stack file and the components -----------------------------------
#
# Each returns (path, message) pairs, the path in the components' snake_case argument names;
# the stack loader turns them into stack-file keys. Both report every problem, not the first.

Finding = tuple[tuple[str | int, ...], str]


def instance_type_problem(instance_type: str) -> str | None:
    known = catalog.instance_types()
    if instance_type in known:
        return None
    hint = did_you_mean(instance_type, known)
    if not hint:
        # No close spelling (p5.metal): say which sizes the family has, or which families.
        family = instance_type.partition(".")[0]
        sizes = [name for name in known if name.partition(".")[0] == family]
        families = sorted({name.partition(".")[0] for name in known})
        hint = (
            f" (allowed in {family}: {allowed(sizes)})"
            if sizes
            else f" (allowed: a type of the catalog's families {', '.join(families)})"
        )
    return f"unknown GPU instance type '{excerpt(instance_type, 40)}'{hint}"


def system_vcpus(instance_type: str) -> int | None:
    """The vCPUs of a system node type; None when it is not one."""
    family, _, size = instance_type.partition(".")
    if family not in SYSTEM_INSTANCE_FAMILIES:
        return None
    return SYSTEM_INSTANCE_SIZES[family[1:]].get(size)


def system_type_problem(instance_type: str) -> str | None:
    if system_vcpus(instance_type) is not None:
        return None
    family = instance_type.partition(".")[0]
    if family in SYSTEM_INSTANCE_FAMILIES:
        sizes = SYSTEM_INSTANCE_SIZES[family[1:]]
        return (
            f"'{excerpt(instance_type, 40)}' is not a size EC2 offers in {family} "
            f"(allowed: {', '.join(sizes)})"
        )
    families = ", ".join(f"{f}.*" for f in SYSTEM_INSTANCE_FAMILIES)
    return f"'{excerpt(instance_type, 40)}' is not a system node type (allowed: {families})"


def offered_problem(instance_type: str, region: str) -> str | None:
    """Whether the catalog records ``instance_type`` as offered in ``region``."""
    regions = catalog.offered_regions(instance_type)
    if region in regions or catalog.availability_zones(region) is None:
        return None  # an unknown region is reported once, at aws:region
    return (
        f"{instance_type} is not offered in {region} as the catalog records it "
        f"({catalog.regions_as_of()}; allowed regions: {allowed(regions) if regions else 'none'})"
    )


def zone_problem(region: str, zone: str) -> str | None:
    zones = catalog.availability_zones(region)
    if zones is None:
        return f"region '{region}' is not in the catalog (known: {allowed(catalog.REGION_ZONES)})"
    if zone in zones:
        return None
    return f"'{zone}' is not an availability zone of {region} (allowed: {allowed(zones)})"


def ebs_iops_problem(volume_type: str, iops: int | None) -> str | None:
    """An io2 StorageClass needs the IOPS of its volumes; gp3's are not set here."""
    if volume_type == "io2" and iops is None:
        return (
            "ebsVolumeType io2 needs ebsIops, the IOPS each volume is provisioned with: EC2 "
            f"creates no io2 volume without (allowed: {IO2_MIN_IOPS} to {IO2_MAX_IOPS})"
        )
    if volume_type != "io2" and iops is not None:
        return f"ebsIops applies to io2 volumes only, not {volume_type} (allowed: unset)"
    return None


def fsx_export_problem(link_model_bucket: bool, export_to_bucket: bool) -> str | None:
    """Files go back to the bucket through the bucket's link: an export without it is lost."""
    if export_to_bucket and not link_model_bucket:
        return (
            "exportToBucket: true writes files back through the link to the model bucket, which "
            "linkModelBucket: false leaves out (allowed: linkModelBucket: true, or no export)"
        )
    return None


def node_pool_findings(pool: NodePoolConfig, region: str) -> list[Finding]:
    """Every problem of one pool: its fields, then the checks that span fields and the region.

    The fields are checked against the model again, so a pool made without validation
    (``model_construct``, ``model_copy(update=...)``) gets the stack file's own words.
    """
    found = _pool_field_findings(pool)
    if pool.min_size > pool.max_size:
        found.append(
            (("min_size",), f"minSize {pool.min_size} is greater than maxSize {pool.max_size}")
        )
    elif not pool.min_size <= pool.desired_size <= pool.max_size:
        found.append(
            (
                ("desired_size",),
                f"desiredSize {pool.desired_size} must lie between minSize {pool.min_size} "
                f"and maxSize {pool.max_size}",
            )
        )
    zone = pool.availability_zone
    if zone is not None:
        bad_zone = zone_problem(region, zone)
        if bad_zone:
            found.append((("availability_zone",), bad_zone))
    spec = catalog.instance_types().get(pool.instance_type)
    bad_region = offered_problem(pool.instance_type, region)
    if spec is not None and bad_region:
        found.append((("instance_type",), bad_region))
    if pool.efa and spec is not None and spec.efa_interfaces == 0:
        found.append((("efa",), f"{spec.name} has no EFA interfaces; {_efa_hint(spec.name)}"))
    if pool.efa and zone is None:
        found.append(
            (("availability_zone",), "an EFA pool needs one explicit zone for its placement group")
        )
    capacity, reservation = pool.capacity_type, pool.capacity_reservation_id
    reserved = capacity in ("capacity-reservation", "capacity-block")
    if reserved and not reservation:
        found.append(
            (("capacity_reservation_id",), f"capacityType {capacity} needs a reservation id")
        )
    if reservation and not reserved:
        found.append(
            (
                ("capacity_reservation_id",),
                f"a reservation id needs capacityType 'capacity-reservation' or "
                f"'capacity-block', not '{capacity}'",
            )
        )
    if reserved and zone is None:
        found.append(
            (("availability_zone",), "a capacity reservation lives in one zone: name it here")
        )
    for key in sorted(pool.labels):
        if key.startswith(RESERVED_LABEL_PREFIX):
            found.append(
                (("labels", key), f"'{RESERVED_LABEL_PREFIX}*' labels are set by gpuinfra")
            )
    return found


def _pool_field_findings(pool: NodePoolConfig) -> list[Finding]:
    fields = {name: getattr(pool, name) for name in NodePoolConfig.model_fields}
    try:
        NodePoolConfig.model_validate(fields, by_alias=False, by_name=True)
    except ValidationError as exc:
        return located_messages(exc, NodePoolConfig)
    return []


def _efa_hint(instance_type: str) -> str:
    """The EFA types of the same family, smallest first, or of the whole catalog."""
    types = catalog.instance_types()
    family = types[instance_type].family
    with_efa = [s for s in types.values() if s.efa_interfaces]
    same = [s for s in with_efa if s.family == family] or with_efa
    names = [s.name for s in sorted(same, key=lambda s: (s.vcpu, s.name))]
    return f"EFA needs one of {', '.join(names)}"


def network_findings(
    *,
    region: str,
    cidr: str,
    availability_zones: list[str],
    private_subnet_cidrs: list[str],
    public_subnet_cidrs: list[str],
    carved: Collection[str] = (),
) -> list[Finding]:
    """Zones in the region, one subnet per zone of each kind, inside the VPC, no overlaps.

    ``carved`` names the subnet lists that ``default_subnets`` made, not the user.
    """
    found: list[Finding] = []
    for i, zone in enumerate(availability_zones):
        bad = zone_problem(region, zone)
        if bad:
            found.append((("availability_zones", i), bad))
    dupes = sorted({z for z in availability_zones if availability_zones.count(z) > 1})
    if dupes:
        found.append((("availability_zones",), f"zones listed twice: {', '.join(dupes)}"))
    vpc = ipaddress.ip_network(cidr)
    if why := vpc_problem(cidr):
        found.append((("cidr",), why))
    seen: list[tuple[str, int, ipaddress.IPv4Network | ipaddress.IPv6Network]] = []
    for field_name, blocks in (
        ("private_subnet_cidrs", private_subnet_cidrs),
        ("public_subnet_cidrs", public_subnet_cidrs),
    ):
        if len(blocks) != len(availability_zones):
            found.append(
                (
                    (field_name,),
                    f"{len(blocks)} subnets for {len(availability_zones)} availability zones; "
                    "give one per zone, in the same order",
                )
            )
        for i, block in enumerate(blocks):
            net = ipaddress.ip_network(block)
            if net.version == 4 and net.prefixlen > MAX_SUBNET_PREFIX:
                found.append(
                    (
                        (field_name, i),
                        f"'{block}' is smaller than the smallest subnet AWS takes (allowed: /16 "
                        f"to /{MAX_SUBNET_PREFIX}, 16 addresses or more)",
                    )
                )
            if net.version != vpc.version or not net.subnet_of(vpc):  # type: ignore[arg-type]
                found.append(((field_name, i), f"'{block}' lies outside the VPC block {cidr}"))
            for other_field, j, other in seen:
                if not net.overlaps(other):
                    continue
                # A block carved from the VPC is in no file: the line goes to the one written.
                if field_name in carved and other_field not in carved:
                    found.append(((other_field, j), _overlap(other, field_name, net, carved)))
                else:
                    found.append(((field_name, i), _overlap(net, other_field, other, carved)))
            seen.append((field_name, i, net))
    return found


def _overlap(
    block: ipaddress.IPv4Network | ipaddress.IPv6Network,
    other_field: str,
    other: ipaddress.IPv4Network | ipaddress.IPv6Network,
    carved: Collection[str],
) -> str:
    kind = other_field.split("_", 1)[0]
    if other_field not in carved:
        return f"'{block}' overlaps the {kind} subnet '{other}'"
    key = camel(other_field)
    return (
        f"'{block}' overlaps the {kind} subnet '{other}', which is carved from the VPC block "
        f"since {key} is not set (allowed: a block clear of it, or {key} set too)"
    )


def default_subnets(cidr: str, zones: int) -> tuple[list[str], list[str]]:
    """Private and public subnet blocks carved from the VPC block, one of each per zone.

    Private subnets take an eighth of the VPC each (pods get VPC addresses, GPU nodes run many
    of them); the public ones, for load balancers and NAT only, share the last eighth.
    """
    eighths = list(ipaddress.ip_network(cidr).subnets(prefixlen_diff=3))
    private = [str(n) for n in eighths[:zones]]
    last = ipaddress.ip_network(str(eighths[-1]))
    public = [str(n) for n in list(last.subnets(prefixlen_diff=3))[:zones]]
    return private, public


def carved_subnet_lists(private: list[str] | None, public: list[str] | None) -> list[str]:
    """The subnet lists left out, which ``default_subnets`` carves."""
    lists = {"private_subnet_cidrs": private, "public_subnet_cidrs": public}
    return [name for name, given in lists.items() if not given]


def stack_findings(cfg: StackConfig) -> list[Finding]:
    """Checks that span keys (zones against the region, subnets against each other)."""
    found = _stack_findings(cfg)
    if catalog.availability_zones(cfg.region) is not None:
        return found
    # An unknown region makes every zone "wrong"; say it once, at the region.
    bad_region = zone_problem(cfg.region, "")
    assert bad_region is not None
    return [(("region",), bad_region), *(f for f in found if f[1] != bad_region)]


def _stack_findings(cfg: StackConfig) -> list[Finding]:
    private, public = default_subnets(cfg.network.cidr, len(cfg.network.availability_zones))
    found = [
        (("network", *path), message)
        for path, message in network_findings(
            region=cfg.region,
            cidr=cfg.network.cidr,
            availability_zones=cfg.network.availability_zones,
            private_subnet_cidrs=cfg.network.private_subnet_cidrs or private,
            public_subnet_cidrs=cfg.network.public_subnet_cidrs or public,
            carved=carved_subnet_lists(
                cfg.network.private_subnet_cidrs, cfg.network.public_subnet_cidrs
            ),
        )
    ]
    zones = cfg.network.availability_zones
    first: dict[str, int] = {}
    for i, pool in enumerate(cfg.node_pools):
        if pool.name in first:
            found.append(
                (
                    ("node_pools", i, "name"),
                    f"'{pool.name}' is the name of nodePools[{first[pool.name]}] too (allowed: a "
                    "name of its own: the pool's node group and gpuinfra.dev/pool label are named "
                    "for it)",
                )
            )
        first.setdefault(pool.name, i)
        pool_found = node_pool_findings(pool, cfg.region)
        found += [(("node_pools", i, *path), m) for path, m in pool_found]
        zone = pool.availability_zone
        # A pool's nodes live in the network's private subnets: a zone the network does not
        # span has none. A zone outside the region is already said once, at the pool.
        if (
            zone is not None
            and zone not in zones
            and ("availability_zone",) not in {path for path, _ in pool_found}
        ):
            found.append(
                (
                    ("node_pools", i, "availability_zone"),
                    f"'{zone}' is not one of network.availabilityZones, so the pool has no "
                    f"subnet there (allowed: {allowed(zones)})",
                )
            )
    if why := ebs_iops_problem(cfg.storage.ebs_volume_type, cfg.storage.ebs_iops):
        found.append((("storage", "ebs_iops"), why))
    fsx = cfg.storage.fsx
    if why := fsx_export_problem(fsx.link_model_bucket, fsx.export_to_bucket):
        found.append((("storage", "fsx", "export_to_bucket"), why))
    # The GPU Operator's MIG manager applies the layout a node's label names; a name it does
    # not know leaves the node's GPUs unsplit and the MIG manager failing.
    operator = cfg.addons.gpu_operator
    layouts = [MIG_ALL_DISABLED, *operator.mig_profiles]
    for i, pool in enumerate(cfg.node_pools):
        layout = pool.labels.get(MIG_CONFIG_LABEL)
        if operator.enabled and layout is not None and layout not in layouts:
            found.append(
                (
                    ("node_pools", i, "labels", MIG_CONFIG_LABEL),
                    f"'{layout}' is not a MIG layout of addons.gpuOperator.migProfiles"
                    f"{did_you_mean(layout, layouts)} (allowed: {allowed(layouts)})",
                )
            )
    # The node pools boot the EKS GPU AMI, which carries the pinned driver and toolkit: the
    # operator's own driver containers would fight the host's for the GPUs.
    if operator.enabled and operator.driver_mode != "host":
        found.append(
            (
                ("addons", "gpu_operator", "driver_mode"),
                f"'{operator.driver_mode}' runs the driver in containers, but EKS nodes boot the "
                "GPU AMI with its driver (allowed on a stack: 'host')",
            )
        )
    # A ResourceFlavor selects nodes by their GPU type label; one no pool carries selects none.
    gpu_types = sorted({catalog.instance_types()[p.instance_type].gpu_name for p in cfg.node_pools})
    for i, flavor in enumerate(cfg.addons.kueue.flavors):
        if cfg.addons.kueue.enabled and flavor.gpu_type not in gpu_types:
            found.append(
                (
                    ("addons", "kueue", "flavors", i, "gpu_type"),
                    f"no node pool has {flavor.gpu_type} GPUs (pools have {allowed(gpu_types)})",
                )
            )
    return found


def check_stack(cfg: StackConfig, file: str) -> StackConfig:
    """Raise ConfigError naming every cross-key problem of ``cfg`` in stack-file terms."""
    found = stack_findings(cfg)
    if found:
        reverse = {v: k for k, v in _STACK_KEYS.items()}
        raise ConfigError(
            _stack_paths(Problem(file, join_path(_camel_path(path)), message), reverse)
            for path, message in found
        )
    return cfg


def _camel_path(path: tuple[str | int, ...]) -> list[str | int]:
    # Label keys are the user's own words; only model field names become camelCase.
    out: list[str | int] = []
    for i, part in enumerate(path):
        # The head is a model field that _stack_paths maps to its stack key.
        keep = isinstance(part, int) or i == 0 or (i > 0 and path[i - 1] == "labels")
        out.append(part if keep else camel(str(part)))
    return out


# Stack-file keys, as written (``gpuinfra:nodePools``), to model fields.
_STACK_KEYS = {
    "environment": "environment",
    "tags": "tags",
    "network": "network",
    "cluster": "cluster",
    "nodePools": "node_pools",
    "storage": "storage",
    "addons": "addons",
}


def stack_path(env: str, root: Path | None = None) -> Path:
    return (root or repo_root()) / "stacks" / f"Pulumi.{env}.yaml"


def known_stacks(root: Path | None = None) -> list[str]:
    stacks = (root or repo_root()) / "stacks"
    if not is_dir(stacks):
        return []
    return sorted(
        p.name[len("Pulumi.") : -len(".yaml")]
        for p in list_dir(stacks)
        if p.name.startswith("Pulumi.") and p.name.endswith(".yaml") and p.exists()
    )


# A stack's EKS cluster is named for the stack. EKS takes 1-100 letters, digits, '-' and '_',
# starting with a letter or digit (botocore's eks service model, 2017-11-01: ClusterName); a
# Pulumi stack name may also hold '.', and 100 characters, which the cluster's name cannot.
CLUSTER_PREFIX = "gpuinfra-"
MAX_EKS_CLUSTER_NAME = 100
_EKS_CLUSTER_NAME = re.compile(r"^[0-9A-Za-z][A-Za-z0-9_-]*$")


def cluster_name(stack: str) -> str:
    """The name of ``stack``'s EKS cluster: unique in an account and region as EKS requires, where
    the environment alone would be shared by ``dev`` and ``dev-alice`` (decision 0077)."""
    return CLUSTER_PREFIX + stack


def eks_cluster_name_problem(name: str) -> str | None:
    """Why EKS would refuse ``name`` as a cluster's name; None when it takes it."""
    if len(name) <= MAX_EKS_CLUSTER_NAME and _EKS_CLUSTER_NAME.match(name):
        return None
    return (
        f"'{excerpt(name, 50)}' is not an EKS cluster name (allowed: 1-{MAX_EKS_CLUSTER_NAME} "
        "letters, digits, '-' or '_', starting with a letter or digit)"
    )


# What the program does not name, Pulumi names <logical name>-<7 random hex> (pulumi-aws's
# AutoName), and every logical name begins with the cluster's name. The tightest of those names
# bound the stack's (decision 0086):
# - an IAM role takes 64 characters (botocore's iam model, roleNameType); the longest role is
#   <cluster>-model-reader-role, the one Triton reads the model bucket with;
# - a node group takes 63 (pulumi-aws's NodeGroup.node_group_name): <cluster>-<pool>-ng;
# - the model bucket's name is lowercased, and takes letters, digits and '-' but no '_'.
AUTONAME_SUFFIX = len("-0123abc")
MAX_IAM_ROLE_NAME = 64
MAX_NODE_GROUP_NAME = 63
LONGEST_ROLE_SUFFIX = "-model-reader-role"
MAX_STACK_NAME = (
    MAX_IAM_ROLE_NAME - AUTONAME_SUFFIX - len(CLUSTER_PREFIX) - len(LONGEST_ROLE_SUFFIX)
)
_DEPLOYABLE_STACK = re.compile(rf"^[A-Za-z0-9][A-Za-z0-9-]{{0,{MAX_STACK_NAME - 1}}}$")
_STACK_RULE = (
    f"1-{MAX_STACK_NAME} letters, digits or '-', starting with a letter or digit: AWS names "
    f"follow {CLUSTER_PREFIX}<stack>"
)


def node_group_logical_name(stack: str, pool: str) -> str:
    """The logical name of ``pool``'s node group in ``stack``, which Pulumi names it after."""
    return f"{cluster_name(stack)}-{pool}-ng"


def max_pool_name(stack: str) -> int:
    """The longest pool name whose node group EKS takes in ``stack``."""
    return MAX_NODE_GROUP_NAME - AUTONAME_SUFFIX - len(node_group_logical_name(stack, ""))


def _stack_name_problem(stack: str) -> str | None:
    """Why ``stack`` cannot be deployed: a name AWS gives one of its resources would be refused."""
    if _DEPLOYABLE_STACK.match(stack):
        return None
    # Short enough to stay whole after the file's name, which holds the stack's name too.
    return f"stack name '{excerpt(stack, 30)}' (allowed: {_STACK_RULE})"


def _pool_name_problems(stack: str, cfg: StackConfig, file: str) -> list[Problem]:
    """Pools whose node group would get a name longer than EKS takes, in ``stack``."""
    longest = max_pool_name(stack)
    return [
        Problem(
            file,
            f"config.{NAMESPACE}:nodePools[{i}].name",
            f"'{pool.name}' would name the node group {node_group_logical_name(stack, pool.name)}"
            f"-<7 random>, over the {MAX_NODE_GROUP_NAME} characters EKS takes (allowed: a pool "
            f"name of at most {longest} characters in stack '{stack}')",
        )
        for i, pool in enumerate(cfg.node_pools)
        if len(pool.name) > longest
    ]


def check_stack_name(env: str) -> str:
    """A ``--stack`` argument: a Pulumi stack name, never a path."""
    if not _STACK_NAME.match(env):
        raise UsageError(
            f"--stack {excerpt(repr(env), 40)}: not a stack name (allowed: {_STACK_RULE})"
        )
    return env


def load_stack(env: str, root: Path | None = None) -> StackConfig:
    """Read ``stacks/Pulumi.<env>.yaml`` into a StackConfig, or raise with every problem."""
    path = stack_path(check_stack_name(env), root)
    if not (is_file(path) or is_dir(path) or path.is_symlink()):
        stacks = known_stacks(root)
        raise UsageError(
            f"no stack '{env}' (stacks/Pulumi.{env}.yaml not found){did_you_mean(env, stacks)}; "
            f"stacks: {', '.join(stacks) or 'none'}"
        )
    shown = display_path(path)
    return check_stack(parse_stack(load_yaml(path), shown, stack=env), shown)


# Keys Pulumi itself reads under ``pulumi:`` in a stack file.
_PULUMI_KEYS = ("autonaming", "disable-default-providers", "tags", "template")


@cache
def provider_keys(namespace: str) -> tuple[str, ...]:
    """The configuration keys a provider reads, from its installed Pulumi SDK.

    The SDKs are generated from the providers' schemas: pulumi-aws's ``config/vars.py`` reads
    each key by name, pulumi-kubernetes' ``ProviderArgs`` takes each as an argument.
    """
    if namespace == "pulumi":
        return _PULUMI_KEYS
    package = {"aws": "pulumi_aws", "kubernetes": "pulumi_kubernetes"}[namespace]
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return ()
    base = Path(next(iter(spec.submodule_search_locations)))
    if namespace == "aws":
        text = (base / "config" / "vars.py").read_text(encoding="utf-8")
        return tuple(sorted(set(re.findall(r"__config__\.get\w*\('(\w+)'", text))))
    text = (base / "provider.py").read_text(encoding="utf-8")
    names = set(re.findall(r'pulumi\.set\(__self__, "(\w+)"', text))
    return tuple(sorted(camel(name) for name in names))


def parse_stack(document: Any, file: str, *, stack: str | None = None) -> StackConfig:
    if stack is not None and (why := _stack_name_problem(stack)):
        raise ConfigError([Problem(file, "", why)])
    if isinstance(document, dict) and (unknown := _unknown_file_keys(document, file)):
        raise ConfigError(unknown)
    if not isinstance(document, dict) or not isinstance(document.get("config"), dict):
        raise ConfigError([Problem(file, "config", "a stack file needs a 'config' mapping")])
    raw: dict[str, Any] = document["config"]
    data: dict[str, Any] = {}
    problems: list[Problem] = []
    # Keys set by ``pulumi config set --secret``: checked once the settings say which are read.
    secure: dict[str, str] = {}
    for key, value in raw.items():
        namespace, _, name = str(key).partition(":")
        shown_key = f"config.{excerpt(str(key), 60)}"
        if namespace == "aws" and name == "region":
            data["region"] = value
        elif namespace == NAMESPACE and name in _STACK_KEYS:
            data[_STACK_KEYS[name]] = value
        elif namespace == NAMESPACE and name == "policy":
            problems.append(
                Problem(
                    file,
                    f"config.{key}",
                    "the policy pack's limits live in policies/limits.yaml, not in the stack "
                    "file they police",
                )
            )
        elif namespace == NAMESPACE and _is_secure(value):
            secure[name] = shown_key
        elif namespace == NAMESPACE:
            hint = did_you_mean(name, _STACK_KEYS)
            if "-" in name and not hint:
                # A Secret's value set without --secret: it would sit in the file as plain text.
                message = (
                    f"unknown key '{excerpt(name, 60)}' (a Secret's value is set with pulumi "
                    f"config set --secret {NAMESPACE}:{excerpt(name, 60)})"
                )
            else:
                message = f"unknown key '{excerpt(name, 40)}'{hint}" + (
                    "" if hint else f" (allowed: {allowed(_STACK_KEYS)})"
                )
            problems.append(Problem(file, shown_key, message))
        elif namespace in ("aws", "kubernetes", "pulumi"):
            known = provider_keys(namespace)
            if name not in known:
                hint = did_you_mean(name, known)
                problems.append(
                    Problem(
                        file,
                        shown_key,
                        f"unknown {namespace} configuration key '{excerpt(name, 40)}'{hint}"
                        + ("" if hint else f" (allowed: the {namespace} provider's keys)"),
                    )
                )
        else:
            problems.append(
                Problem(
                    file,
                    shown_key,
                    f"unknown namespace '{excerpt(namespace, 40)}'"
                    f"{did_you_mean(namespace, (NAMESPACE, 'aws', 'kubernetes', 'pulumi'))} "
                    "(allowed: 'gpuinfra:', 'aws:', 'kubernetes:' or 'pulumi:')",
                )
            )
    if problems:
        raise ConfigError(problems)
    # Error paths read as the user wrote them: config.gpuinfra:nodePools[0].instanceType.
    reverse = {v: k for k, v in _STACK_KEYS.items()}
    try:
        cfg = validate(StackConfig, data, file, strict=True)
    except ConfigError as exc:
        raise ConfigError(_stack_paths(p, reverse) for p in exc.problems) from None
    read = alerting_secret_config_keys(cfg.addons.prometheus_stack)
    unread = [
        Problem(
            file,
            shown,
            f"secret config '{excerpt(name, 40)}' is read by no Secret"
            f"{did_you_mean(name, read)} (allowed: {allowed(read) if read else 'none'})",
        )
        for name, shown in secure.items()
        if name not in read
    ]
    if unread:
        raise ConfigError(unread)
    if stack is not None and not _environment_matches(stack, cfg.environment):
        raise ConfigError(
            [
                Problem(
                    file,
                    f"config.{NAMESPACE}:environment",
                    f"'{cfg.environment}' does not match stack '{excerpt(stack, 40)}': resources "
                    f"would be named for {cfg.environment} (allowed: "
                    f"{allowed(_environments_for(stack)) if _environments_for(stack) else 'none'}"
                    "; a stack is named for its environment, or <environment>-<suffix>)",
                )
            ]
        )
    if stack is not None and (too_long := _pool_name_problems(stack, cfg, file)):
        raise ConfigError(too_long)
    return cfg


# The keys of a stack file Pulumi reads (its ProjectStack). Pulumi ignores any other, so a
# misspelled one (confg:) would leave its settings unread; keys that resemble none stay allowed,
# as Pulumi allows them (a top-level key that only holds a YAML anchor).
_STACK_FILE_KEYS = ("config", "encryptedkey", "encryptionsalt", "environment", "secretsprovider")


def _unknown_file_keys(document: dict[Any, Any], file: str) -> list[Problem]:
    found = []
    for key in document:
        name = str(key)
        if name in _STACK_FILE_KEYS or not (hint := did_you_mean(name, _STACK_FILE_KEYS)):
            continue
        found.append(
            Problem(
                file,
                excerpt(name, 40),
                f"unknown key '{excerpt(name, 40)}'{hint} (Pulumi would ignore it and what it "
                "holds)",
            )
        )
    return found


def _is_secure(value: Any) -> bool:
    """A value ``pulumi config set --secret`` wrote: ``{secure: <ciphertext>}``."""
    return (
        isinstance(value, dict) and list(value) == ["secure"] and isinstance(value["secure"], str)
    )


def _environments_for(stack: str) -> list[str]:
    return [env for env in ENVIRONMENTS if stack == env or stack.startswith(f"{env}-")]


def _environment_matches(stack: str, environment: str) -> bool:
    return environment in _environments_for(stack)


def _stack_paths(problem: Problem, reverse: dict[str, str]) -> Problem:
    head, sep, rest = problem.path.partition(".")
    head, bracket, index = head.partition("[")
    if head == "region":
        key = "config.aws:region"
    elif head in reverse:
        key = f"config.{NAMESPACE}:{reverse[head]}"
    else:
        key = "config"
    path = key + (bracket + index if bracket else "") + (sep + rest if sep else "")
    return Problem(problem.file, path, problem.message)

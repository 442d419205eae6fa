"""Typed configuration of an environment (a Pulumi stack file) and of a bare-metal site.

Every model forbids unknown keys, so a misspelled key is an error with a suggestion rather than
a silently ignored setting. Loading functions return models or raise ConfigError.
"""

from __future__ import annotations

import ipaddress
import re
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from gpuinfra import catalog
from gpuinfra.errors import ConfigError, Problem, UsageError
from gpuinfra.loading import display_path, load_yaml, validate
from gpuinfra.paths import repo_root
from gpuinfra.suggest import allowed, did_you_mean

ENVIRONMENTS = ("dev", "staging", "prod")
NAMESPACE = "gpuinfra"
_NAME = re.compile(r"^[a-z][a-z0-9-]{0,38}[a-z0-9]$")


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


class Tags(CamelModel):
    team: str = Field(min_length=1)
    project: str = Field(min_length=1)
    cost_center: str = Field(min_length=1)

    def as_aws(self) -> dict[str, str]:
        return {"team": self.team, "project": self.project, "cost-center": self.cost_center}


class NetworkConfig(CamelModel):
    cidr: str = "10.40.0.0/16"
    availability_zones: list[str] = Field(min_length=1, max_length=6)
    single_nat_gateway: bool = True
    flow_logs: bool = False

    _check_cidr = field_validator("cidr")(_cidr)


class ClusterConfig(CamelModel):
    endpoint_public_access: bool = False
    public_access_cidrs: list[str] = Field(default_factory=list)
    admin_role_arn: str | None = None

    @field_validator("public_access_cidrs")
    @classmethod
    def _cidrs(cls, value: list[str]) -> list[str]:
        for cidr in value:
            _cidr(cidr)
        return value


class NodePoolConfig(CamelModel):
    name: str
    instance_type: str
    capacity_type: CapacityType = "on-demand"
    min_size: int = Field(default=0, ge=0)
    max_size: int = Field(default=1, ge=0)
    desired_size: int = Field(default=0, ge=0)
    availability_zone: str | None = None
    efa: bool = False
    root_volume_gib: int = Field(default=200, ge=50, le=16384)
    capacity_reservation_id: str | None = None
    labels: dict[str, str] = Field(default_factory=dict)

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not _NAME.match(value):
            raise ValueError(f"'{value}' must be lowercase letters, digits and '-' (2-40 chars)")
        return value

    @field_validator("instance_type")
    @classmethod
    def _instance_type(cls, value: str) -> str:
        known = catalog.instance_types()
        if value not in known:
            raise ValueError(f"unknown GPU instance type '{value}'{did_you_mean(value, known)}")
        return value

    @model_validator(mode="after")
    def _sizes(self) -> NodePoolConfig:
        if self.min_size > self.max_size:
            raise ValueError(f"minSize {self.min_size} is greater than maxSize {self.max_size}")
        if not self.min_size <= self.desired_size <= self.max_size:
            raise ValueError(
                f"desiredSize {self.desired_size} must lie between minSize {self.min_size} "
                f"and maxSize {self.max_size}"
            )
        spec = catalog.instance_types()[self.instance_type]
        if self.efa and spec.efa_interfaces == 0:
            with_efa = sorted(n for n, s in catalog.instance_types().items() if s.efa_interfaces)
            raise ValueError(
                f"efa: {self.instance_type} has no EFA interfaces; EFA needs one of "
                f"{allowed(with_efa, limit=6)}"
            )
        if self.efa and not self.availability_zone:
            raise ValueError(
                "efa: an EFA pool needs an explicit availabilityZone (placement group)"
            )
        reserved = self.capacity_type in ("capacity-reservation", "capacity-block")
        if reserved and not self.capacity_reservation_id:
            raise ValueError(f"capacityType {self.capacity_type} needs capacityReservationId")
        return self


class FsxConfig(CamelModel):
    enabled: bool = False
    storage_capacity_gib: int = Field(default=1200, ge=1200)
    throughput_per_tib: Literal[125, 250, 500, 1000] = 125
    link_model_bucket: bool = True

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


class PolicyConfig(CamelModel):
    max_nodes: int = Field(ge=0)
    monthly_budget_usd: float = Field(gt=0)
    allowed_instance_types: list[str] = Field(min_length=1)


class StackConfig(Model):
    """The ``gpuinfra:*`` keys of a stack file, plus the AWS region."""

    environment: Literal["dev", "staging", "prod"]
    region: str
    tags: Tags
    network: NetworkConfig
    cluster: ClusterConfig = Field(default_factory=ClusterConfig)
    node_pools: list[NodePoolConfig] = Field(min_length=1)
    storage: StorageConfig = Field(default_factory=StorageConfig)
    policy: PolicyConfig
    addons: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _cross_checks(self) -> StackConfig:
        names = [p.name for p in self.node_pools]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"nodePools: duplicate pool names {', '.join(dupes)}")
        return self


# Stack-file keys, as written (``gpuinfra:nodePools``), to model fields.
_STACK_KEYS = {
    "environment": "environment",
    "tags": "tags",
    "network": "network",
    "cluster": "cluster",
    "nodePools": "node_pools",
    "storage": "storage",
    "policy": "policy",
    "addons": "addons",
}


def stack_path(env: str, root: Path | None = None) -> Path:
    return (root or repo_root()) / "stacks" / f"Pulumi.{env}.yaml"


def known_stacks(root: Path | None = None) -> list[str]:
    stacks = (root or repo_root()) / "stacks"
    return sorted(p.name[len("Pulumi.") : -len(".yaml")] for p in stacks.glob("Pulumi.*.yaml"))


def load_stack(env: str, root: Path | None = None) -> StackConfig:
    """Read ``stacks/Pulumi.<env>.yaml`` into a StackConfig, or raise with every problem."""
    path = stack_path(env, root)
    if not path.exists():
        stacks = known_stacks(root)
        raise UsageError(
            f"no stack '{env}' (stacks/Pulumi.{env}.yaml not found){did_you_mean(env, stacks)}; "
            f"stacks: {', '.join(stacks) or 'none'}"
        )
    return parse_stack(load_yaml(path), display_path(path))


def parse_stack(document: Any, file: str) -> StackConfig:
    if not isinstance(document, dict) or not isinstance(document.get("config"), dict):
        raise ConfigError([Problem(file, "config", "a stack file needs a 'config' mapping")])
    raw: dict[str, Any] = document["config"]
    data: dict[str, Any] = {}
    problems: list[Problem] = []
    for key, value in raw.items():
        namespace, _, name = str(key).partition(":")
        if namespace == "aws" and name == "region":
            data["region"] = value
        elif namespace == NAMESPACE and name in _STACK_KEYS:
            data[_STACK_KEYS[name]] = value
        elif namespace == NAMESPACE:
            problems.append(
                Problem(
                    file, f"config.{key}", f"unknown key '{name}'{did_you_mean(name, _STACK_KEYS)}"
                )
            )
        elif namespace not in ("aws", "kubernetes", "pulumi"):
            problems.append(
                Problem(
                    file,
                    f"config.{key}",
                    f"unknown namespace '{namespace}'; gpuinfra reads 'gpuinfra:' and 'aws:region'",
                )
            )
    if problems:
        raise ConfigError(problems)
    # Error paths read as the user wrote them: config.gpuinfra:nodePools[0].instanceType.
    reverse = {v: k for k, v in _STACK_KEYS.items()}
    try:
        return validate(StackConfig, data, file)
    except ConfigError as exc:
        raise ConfigError(_stack_paths(p, reverse) for p in exc.problems) from None


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

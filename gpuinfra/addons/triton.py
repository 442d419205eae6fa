"""Triton Inference Server: Deployment, Service, autoscaler, metrics scraping, model configs.

Triton publishes no chart repository, so this spec writes the Kubernetes objects itself. Each
model's ``config.pbtxt`` is built as Triton's own ``ModelConfig`` protobuf and printed in text
format, so a field Triton does not know cannot be written.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
import shlex
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import AfterValidator, Field, ValidationInfo, field_validator, model_validator

from gpuinfra.addons.base import (
    CONTAINER_SECURITY,
    GPU_RESOURCE,
    GPU_TOLERATION,
    GPU_TYPE_LABEL,
    MONITOR_LABELS,
    PROJECT_LABEL,
    TEAM_LABEL,
    AddonRender,
    AddonSettings,
    GeneratedSecret,
    LabelValue,
    Name,
    Prerequisite,
    Quantity,
    Settings,
    enabled_field,
    metadata,
)
from gpuinfra.errors import UsageError, excerpt
from gpuinfra.loading import cross_field_error, refuse_duplicates
from gpuinfra.versions import Versions

if TYPE_CHECKING:
    from tritonclient.grpc import model_config_pb2 as mc

NAME = "triton"
HTTP_PORT = 8000
GRPC_PORT = 8001
METRICS_PORT = 8002
MODELS_MOUNT = "/models"

_KINDS = {"gpu": "KIND_GPU", "cpu": "KIND_CPU", "auto": "KIND_AUTO"}
# What the ModelConfig protobuf's integer fields hold: max_batch_size, preferred_batch_size and
# instance_group.count are int32, max_queue_delay_microseconds uint64, version_policy's latest
# uint32 and specific's versions int64. A larger value cannot be written into the config.
INT32_MAX = 2**31 - 1
UINT32_MAX = 2**32 - 1
INT64_MAX = 2**63 - 1
UINT64_MAX = 2**64 - 1
# What the device plugin advertises: whole (or time-sliced) GPUs, renamed shares, MIG slices.
GPU_RESOURCE_PATTERN = r"^nvidia\.com/(gpu|gpu\.shared|mig-[1-7]g\.[0-9]+gb(\+me)?)$"
# Triton loads every model at start and never reloads: a changed config reaches the pods only
# through a new pod template (the config hash below), so it rolls out pod by pod behind the
# readiness probe and rolls back with the Deployment (docs/decisions/0035).
MODEL_CONTROL_MODE = "none"
CONFIG_HASH_ANNOTATION = "gpuinfra.dev/model-config-hash"
# Files a backend needs in each version directory besides config.pbtxt (vLLM reads its engine
# arguments from model.json; the others name their model file in the config or by default).
VERSION_FILES: dict[str, tuple[str, ...]] = {"vllm": ("model.json",)}
_VERSION_DIR = re.compile(r"^[0-9]+$")
# The APIs that change a running server: loading and unloading models (and the repository
# index beside them), registering shared-memory regions (a region names memory in the pod, the
# Python backend's among it), and the trace and log settings (how much it traces and logs).
# Nothing in a cluster calls them: the models are named at start. A request to them needs the
# header below; inference, health (the kubelet's probes), metadata, model config and statistics
# stay open (docs/decisions/0078).
RESTRICTED_APIS = ("model-repository", "shared-memory", "trace", "logging")
ADMIN_HEADER = "triton-admin-key"
# Triton's gRPC server reads the header as metadata under its own prefix.
ADMIN_GRPC_HEADER = f"triton-grpc-protocol-{ADMIN_HEADER}"
# The container's variable holding the header's value, from the admin Secret: the kubelet puts
# it into the args ($(VAR)), so the value is in no rendered object.
ADMIN_ENV = "TRITON_ADMIN_KEY"
# A generated admin key: letters and digits (a value Triton's flag parsing cannot split).
ADMIN_KEY_LENGTH = 32
# How Triton 2.51 refuses a request without the header: "This API is restricted, expecting
# header '...'" (HTTP 403), "This protocol is restricted, ..." (gRPC, status UNAVAILABLE).
_RESTRICTED = re.compile(r"\bThis (API|protocol) is restricted\b")


def refused_for_admin_key(message: str) -> bool:
    """Whether Triton's error ``message`` says the request lacked the admin header (or had
    another value: Triton answers both alike)."""
    return _RESTRICTED.search(message) is not None


class DynamicBatching(Settings):
    # Each at least 1 and at most maxBatchSize: the model's check says so in one line.
    preferred_batch_size: list[Annotated[int, Field(le=INT32_MAX)]] = Field(default_factory=list)
    max_queue_delay_microseconds: int = Field(default=100, ge=0, le=UINT64_MAX)


class InstanceGroup(Settings):
    count: int = Field(default=1, ge=1, le=INT32_MAX)
    kind: Literal["gpu", "cpu", "auto"] = "gpu"


class VersionPolicy(Settings):
    """Which model versions Triton serves: the newest N, all, or the listed ones."""

    policy: Literal["latest", "all", "specific"] = "latest"
    latest: int = Field(default=1, ge=1, le=UINT32_MAX)
    # A version is a numeric directory; Triton ignores 0 (and names starting with 0).
    versions: list[Annotated[int, Field(ge=1, le=INT64_MAX)]] = Field(default_factory=list)

    @model_validator(mode="after")
    def _versions(self) -> VersionPolicy:
        if self.policy == "specific" and not self.versions:
            raise cross_field_error(
                "policy 'specific' needs versions",
                "versions",
                allowed="one or more versions with policy 'specific'",
            )
        if self.policy != "specific" and self.versions:
            raise cross_field_error(
                "versions apply only to policy 'specific'",
                "versions",
                allowed=f"no versions with policy {self.policy!r}",
            )
        return self

    def describe(self) -> str:
        if self.policy == "specific":
            return f"specific {sorted(self.versions)}"
        return f"latest {self.latest}" if self.policy == "latest" else "all"


class TritonModel(Settings):
    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$", max_length=128)
    backend: Literal["onnxruntime", "tensorrt", "pytorch", "tensorflow", "python", "vllm"]
    max_batch_size: int = Field(default=0, ge=0, le=INT32_MAX)
    dynamic_batching: DynamicBatching | None = None
    instance_group: InstanceGroup = Field(default_factory=InstanceGroup)
    version_policy: VersionPolicy = Field(default_factory=VersionPolicy)

    @model_validator(mode="after")
    def _batching(self) -> TritonModel:
        if self.dynamic_batching is None:
            return self
        if self.max_batch_size == 0:
            raise cross_field_error(
                "dynamicBatching needs maxBatchSize above 0",
                "max_batch_size",
                allowed="1 or more with dynamicBatching",
            )
        sizes = self.dynamic_batching.preferred_batch_size
        wrong = [i for i, b in enumerate(sizes) if not 1 <= b <= self.max_batch_size]
        if wrong:
            raise cross_field_error(
                f"preferredBatchSize values must lie between 1 and maxBatchSize "
                f"{self.max_batch_size}",
                "dynamic_batching",
                "preferred_batch_size",
                wrong[0],
            )
        return self


class ModelRepository(Settings):
    """Where Triton reads models: an S3 URI or an existing PersistentVolumeClaim."""

    s3: str | None = Field(default=None, pattern=r"^s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9](/.*)?$")
    pvc: Name | None = None
    # For S3: the AWS region, and a service account bound to an IAM role (IRSA) for access.
    region: str | None = Field(default=None, pattern=r"^[a-z]{2}(-[a-z]+)+-\d$")
    service_account: Name | None = None

    @model_validator(mode="after")
    def _one(self) -> ModelRepository:
        if (self.s3 is None) == (self.pvc is None):
            raise cross_field_error(
                "give exactly one of s3 or pvc", allowed="a mapping with s3 or with pvc"
            )
        if self.pvc and (self.region or self.service_account):
            raise cross_field_error(
                "region and serviceAccount apply only to an s3 repository",
                "region" if self.region else "service_account",
                allowed="pvc alone, or s3 with region and serviceAccount",
            )
        return self


def _gpu_resource_name(value: str) -> str:
    if not re.match(GPU_RESOURCE_PATTERN, value):
        raise ValueError(
            f"{value!r} is not a GPU resource (allowed: nvidia.com/gpu, "
            "nvidia.com/gpu.shared or a MIG slice nvidia.com/mig-<N>g.<M>gb)"
        )
    return value


GpuResource = Annotated[str, AfterValidator(_gpu_resource_name)]
# A group's objects are named triton-<group>, its canary's triton-<group>-canary; a Service's
# name is a DNS label, 63 characters at most.
MAX_GROUP_NAME = 63 - len(f"{NAME}--canary")


def _group_name(value: str) -> str:
    if len(value) > MAX_GROUP_NAME:
        raise ValueError(
            f"{excerpt(repr(value), 30)} has {len(value)} characters (allowed: at most "
            f"{MAX_GROUP_NAME}: the canary's objects are named {NAME}-<group>-canary, a "
            "Kubernetes name of at most 63 characters)"
        )
    return value


GroupName = Annotated[Name, AfterValidator(_group_name)]


class Canary(Settings):
    """A second set of pods for the group's models, given ``weight`` percent of the traffic."""

    weight: int = Field(ge=0, le=100)
    replicas: int = Field(default=1, ge=1, le=INT32_MAX)
    # Per model of the group: the versions the canary serves instead of stable's policy.
    version_policies: dict[str, VersionPolicy] = Field(default_factory=dict)


class ServingGroup(Settings):
    """A set of models on pods of their own. An unset field takes triton's own setting."""

    name: GroupName
    models: list[str] = Field(min_length=1)
    gpu_resource: GpuResource | None = None
    gpus_per_replica: int | None = Field(default=None, ge=1, le=8)
    gpu_type: Name | None = None
    node_selector: dict[str, str] = Field(default_factory=dict)
    cpu: Quantity | None = None
    memory: Quantity | None = None
    autoscaling: bool | None = None
    min_replicas: int | None = Field(default=None, ge=1, le=INT32_MAX)
    max_replicas: int | None = Field(default=None, ge=1, le=INT32_MAX)
    target_cpu_utilization: int | None = Field(default=None, ge=10, le=100)
    canary: Canary | None = None


class Gateway(Settings):
    """The Gateway API Gateway the groups' HTTPRoutes attach to (their parentRef)."""

    name: Name
    namespace: Name | None = None
    section_name: Name | None = None


class TritonSettings(AddonSettings):
    # Off by default: serving needs a model repository the site provides.
    enabled: bool = enabled_field("Deploy Triton", default=False, left="deployed objects")
    namespace: Name = Field(default="triton", description="Namespace Triton runs in.")
    image_variant: Literal["default", "vllm"] = Field(
        default="default",
        description="Which pinned Triton image runs: default (the -py3 tag) or vllm (the "
        "variant with the vLLM backend, versions.yaml triton.variants.vllm). Models with backend "
        "vllm need vllm.",
    )
    model_repository: ModelRepository | None = Field(
        default=None,
        description="Where Triton reads models: {s3: s3://bucket/prefix, region, "
        "service_account} or {pvc: claim-name}. Required when enabled.",
    )
    models: list[TritonModel] = Field(
        default_factory=list,
        description="Models whose config.pbtxt the spec writes, each a mapping: name, backend, "
        "max_batch_size, dynamic_batching {preferred_batch_size, max_queue_delay_microseconds}, "
        "instance_group {count, kind}, version_policy {policy, latest, versions}.",
    )
    gpus_per_replica: int = Field(
        default=1, ge=1, le=8, description="GPUs each Triton pod requests."
    )
    gpu_resource: GpuResource = Field(
        default=GPU_RESOURCE,
        description="The GPU resource each pod requests gpusPerReplica of: nvidia.com/gpu (a "
        "whole GPU, or a time-sliced share where the GPU Operator time-slices), "
        "nvidia.com/gpu.shared (time-slicing with renamed resources) or a MIG slice such as "
        "nvidia.com/mig-3g.71gb (MIG strategy mixed).",
    )
    gpu_type: Name | None = Field(
        default=None,
        description="Schedule Triton only on nodes labelled gpuinfra.dev/gpu-type=<gpu_type>; "
        "unset for any GPU node.",
    )
    team: LabelValue | None = Field(
        default=None,
        description="The team label of Triton's pods, by which their GPU-hours are reported (the "
        "Prometheus stack refuses GPU pods without it where requireCostLabels is on); unset: "
        "the namespace's name.",
    )
    project: LabelValue | None = Field(
        default=None,
        description="The project label of Triton's pods; unset: each serving group's name, or "
        "triton without groups.",
    )
    cpu: Quantity = Field(default="4", description="CPU request per pod (a Kubernetes quantity).")
    memory: Quantity = Field(
        default="16Gi", description="Memory request and limit per pod (a Kubernetes quantity)."
    )
    shm_size: Quantity = Field(
        default="1Gi", description="Size of /dev/shm per pod (a Kubernetes quantity)."
    )
    autoscaling: bool = Field(
        default=False,
        description="Scale between minReplicas and maxReplicas with a HorizontalPodAutoscaler on "
        "CPU. It reads the metrics API (metrics-server), which gpuinfra does not install: turn "
        "it on where the cluster has one. Off, the Deployment runs minReplicas pods.",
    )
    min_replicas: int = Field(
        default=1, ge=1, le=INT32_MAX, description="Fewest pods the autoscaler keeps."
    )
    max_replicas: int = Field(
        default=2, ge=1, le=INT32_MAX, description="Most pods the autoscaler starts."
    )
    # CPU, because the HTTP/gRPC front end and pre/post-processing load CPU in step with
    # request rate, and CPU needs no custom-metrics adapter.
    target_cpu_utilization: int = Field(
        default=70,
        ge=10,
        le=100,
        description="Average CPU utilisation (percent) the autoscaler aims for.",
    )

    admin_secret: Name = Field(
        default="triton-admin",
        description="Secret in the namespace holding the key Triton's administrative APIs "
        "require in the triton-admin-key header (model repository: load, unload, index; shared "
        "memory; trace; logging); inference, health, metadata, model config and statistics stay "
        "open. A stack generates it; a site creates it before the first run (a non-empty value "
        "of letters and digits).",
    )
    admin_secret_key: str = Field(
        default="admin-key",
        pattern=r"^[-._a-zA-Z0-9]+$",
        max_length=253,
        description="Key of the admin key in that Secret.",
    )

    gateway: Gateway | None = Field(
        default=None,
        description="The Gateway each serving group's HTTPRoute attaches to: {name, namespace, "
        "section_name}. Needed by a canary (the route's weights split the traffic); unset, no "
        "HTTPRoute.",
    )

    serving_groups: list[ServingGroup] = Field(
        default_factory=list,
        description="Sets of models each on a Deployment and Service of their own (one model's "
        "failure leaves the others serving), each a mapping: name, models (names from models; "
        "each model in exactly one group), and optionally gpu_resource, gpus_per_replica, "
        "gpu_type, node_selector, cpu, memory, autoscaling, min_replicas, max_replicas, "
        "target_cpu_utilization (unset: triton's own), canary {weight 0-100, replicas, "
        "version_policies {model: version_policy}}. Empty: one group of every model, named "
        "triton.",
    )

    @field_validator("serving_groups")
    @classmethod
    def _groups(cls, groups: list[ServingGroup], info: ValidationInfo) -> list[ServingGroup]:
        if not groups:
            return groups
        declared = [m.name for m in info.data.get("models", [])]
        names = [g.name for g in groups]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"duplicate serving group names: {', '.join(dupes)}")
        # A canary's objects are named as a group called <group>-canary would be.
        taken = [g.name for g in groups if g.canary is not None and f"{g.name}-canary" in names]
        if taken:
            raise ValueError(
                f"serving group {taken[0] + '-canary'!r} is named as the canary of group "
                f"{taken[0]!r}: both would be Deployment and Service {NAME}-{taken[0]}-canary, "
                "one replacing the other (rename the group)"
            )
        home: dict[str, str] = {}
        for group in groups:
            for model in group.models:
                if model not in declared:
                    raise ValueError(
                        f"serving group {group.name!r} names model {model!r}, which is not in "
                        f"models (declared: {', '.join(declared) or 'none'})"
                    )
                if model in home:
                    raise ValueError(
                        f"model {model!r} is in serving groups {home[model]!r} and "
                        f"{group.name!r}; a model belongs to exactly one group"
                    )
                home[model] = group.name
            low = group.min_replicas or info.data.get("min_replicas", 1)
            high = group.max_replicas or info.data.get("max_replicas", 1)
            if low > high:
                raise ValueError(
                    f"serving group {group.name!r}: minReplicas {low} is greater than "
                    f"maxReplicas {high}"
                )
            if group.canary is not None and info.data.get("gateway") is None:
                raise ValueError(
                    f"serving group {group.name!r} has a canary, whose weight an HTTPRoute "
                    "carries: set gateway {name, namespace} for the route to attach to"
                )
            if group.canary is not None:
                stray = sorted(set(group.canary.version_policies) - set(group.models))
                if stray:
                    raise ValueError(
                        f"serving group {group.name!r}: canary.versionPolicies names "
                        f"{', '.join(map(repr, stray))}, not a model of the group "
                        f"({', '.join(group.models)})"
                    )
        homeless = [m for m in declared if m not in home]
        if homeless:
            raise ValueError(
                f"model {homeless[0]!r} is in no serving group; with servingGroups every model "
                "belongs to exactly one"
            )
        return groups

    @model_validator(mode="after")
    def _check(self) -> TritonSettings:
        if self.enabled and self.model_repository is None:
            raise cross_field_error(
                "modelRepository is required when triton is enabled",
                "model_repository",
                allowed="a mapping with s3 or with pvc",
            )
        if self.min_replicas > self.max_replicas:
            raise cross_field_error(
                f"minReplicas {self.min_replicas} is greater than maxReplicas {self.max_replicas}",
                "min_replicas",
                allowed=f"1 to {self.max_replicas}",
            )
        vllm = [i for i, m in enumerate(self.models) if m.backend == "vllm"]
        if vllm and self.image_variant != "vllm":
            # The message says what to set: no room is left for an "allowed".
            raise cross_field_error(
                f"model {self.models[vllm[0]].name!r} has backend 'vllm', which the default "
                "Triton image does not contain; set imageVariant: vllm (the -vllm-python-py3 tag "
                "pinned in versions.yaml triton.variants.vllm)",
                "models",
                vllm[0],
                "backend",
            )
        refuse_duplicates(
            [m.name for m in self.models],
            "model names",
            "models",
            "name",
            allowed="each model name once",
        )
        return self


def model_config(model: TritonModel) -> mc.ModelConfig:
    # tritonclient.grpc brings the gRPC client and numpy with it: only a render of models pays.
    from tritonclient.grpc import model_config_pb2 as mc

    config = mc.ModelConfig(name=model.name, backend=model.backend)
    config.max_batch_size = model.max_batch_size
    if model.dynamic_batching is not None:
        config.dynamic_batching.preferred_batch_size.extend(
            model.dynamic_batching.preferred_batch_size
        )
        config.dynamic_batching.max_queue_delay_microseconds = (
            model.dynamic_batching.max_queue_delay_microseconds
        )
    config.instance_group.add(
        count=model.instance_group.count,
        kind=mc.ModelInstanceGroup.Kind.Value(_KINDS[model.instance_group.kind]),
    )
    policy = model.version_policy
    if policy.policy == "latest":
        config.version_policy.latest.num_versions = policy.latest
    elif policy.policy == "all":
        config.version_policy.all.SetInParent()
    else:
        config.version_policy.specific.versions.extend(sorted(policy.versions))
    return config


def config_pbtxt(model: TritonModel) -> str:
    # protobuf ships no type stubs; text_format is only called, and its result wrapped in str().
    from google.protobuf import text_format  # type: ignore[import-untyped]

    return str(text_format.MessageToString(model_config(model)))


def repository_problems(
    models: Iterable[TritonModel], keys: Iterable[str], prefix: str = ""
) -> list[str]:
    """What a model repository lacks for the models' version policies, one line per problem.

    ``keys`` are the repository's entries, files or directories (``resnet50/1/model.onnx``,
    ``resnet50/3``), as an S3 listing or a directory walk gives them. ``prefix`` is where the
    repository starts among them, an S3 URI's path (``serving/`` of ``s3://models/serving/``):
    it is taken off each key, and a key outside it is not the repository's.
    Triton refuses a model with no version its policy can serve ("at least one version must be
    available under the version policy"), and a ``specific`` policy names each version it needs.
    """
    start = f"{prefix.strip('/')}/" if prefix.strip("/") else ""
    entries = [key[len(start) :].strip("/") for key in keys if key.startswith(start)]
    problems = []
    for model in models:
        present: dict[int, set[str]] = {}
        for entry in entries:
            parts = entry.split("/")
            if len(parts) >= 2 and parts[0] == model.name and _VERSION_DIR.match(parts[1]):
                present.setdefault(int(parts[1]), set()).update(parts[2:3])
        policy = model.version_policy
        where = f"model {model.name!r} (version_policy {policy.describe()})"
        if policy.policy == "specific":
            wanted = sorted(policy.versions)
            missing = [v for v in wanted if v not in present]
            if missing:
                dirs = ", ".join(f"{model.name}/{v}/" for v in missing)
                problems.append(f"{where}: no version directory {dirs}")
        elif not present:
            problems.append(f"{where}: no version directory {model.name}/<number>/")
            continue
        else:
            # The newest N serve; older ones may lack the backend's files.
            wanted = sorted(present)[-policy.latest :] if policy.policy == "latest" else []
            wanted = wanted or sorted(present)
        for version in (v for v in wanted if v in present):
            for needed in VERSION_FILES.get(model.backend, ()):
                if needed not in present[version]:
                    problems.append(
                        f"{where}: {model.name}/{version}/{needed} is missing "
                        f"(the {model.backend} backend reads it)"
                    )
    return problems


def index_problems(
    models: Sequence[TritonModel], index: Iterable[tuple[str, int, str]]
) -> list[str]:
    """What a running Triton's repository index says against the declared version policies.

    ``index`` holds (model, version, state) as ``/v2/repository/index`` lists them. A model
    serves what its policy declares: each listed version for ``specific``, one to N versions
    for ``latest N``, at least one for ``all``; a served model that is not declared is named.
    """
    entries = list(index)
    problems = []
    for model in models:
        ready = sorted(v for name, v, state in entries if name == model.name and state == "READY")
        policy = model.version_policy
        where = f"model {model.name!r} (version_policy {policy.describe()})"
        if policy.policy == "specific" and ready != sorted(policy.versions):
            problems.append(f"{where}: READY versions {ready}, declared {sorted(policy.versions)}")
        elif policy.policy == "latest" and not 1 <= len(ready) <= policy.latest:
            problems.append(f"{where}: READY versions {ready}, declared the newest {policy.latest}")
        elif policy.policy == "all" and not ready:
            problems.append(f"{where}: no READY version")
    extra = sorted({name for name, _, _ in entries} - {m.name for m in models})
    problems += [f"model {name!r} is served but not declared" for name in extra]
    return problems


def preflight_script(models: Iterable[TritonModel], root: str = MODELS_MOUNT) -> str:
    """A POSIX shell check of a mounted repository, run before Triton starts.

    The rules of ``repository_problems``, for a volume only the pod can see: one line per
    problem on stderr and exit 1, so the pod waits in Init:Error with the reason in its log.
    """
    lines = ["fail=0", 'say() { echo "model repository $*" >&2; fail=1; }']
    for model in models:
        base = shlex.quote(f"{root}/{model.name}")
        policy = model.version_policy
        where = f"{root}: model {model.name} (version_policy {policy.describe()}):"
        if policy.policy == "specific":
            lines.append(f"v={shlex.quote(' '.join(str(n) for n in sorted(policy.versions)))}")
        else:
            newest = f" | tail -n {policy.latest}" if policy.policy == "latest" else ""
            lines.append(
                f"v=$(find {base} -mindepth 1 -maxdepth 1 -type d 2>/dev/null | sed 's|.*/||'"
                f" | grep -E '^[0-9]+$' | sort -n{newest})"
            )
            lines.append(f'[ -n "$v" ] || say {shlex.quote(where)} "no version directory"')
        checks = [f'[ -d {base}/"$n" ] || say {shlex.quote(where)} "no version directory $n/"']
        checks += [
            f'[ -e {base}/"$n"/{needed} ] || say {shlex.quote(where)} "$n/{needed} is missing"'
            for needed in VERSION_FILES.get(model.backend, ())
        ]
        lines.append(f"for n in $v; do {'; '.join(checks)}; done")
    lines.append('exit "$fail"')
    return "\n".join(lines) + "\n"


def config_hash(models: Iterable[TritonModel]) -> str:
    """A digest of the model settings, which determine every config.pbtxt.

    Hashing the settings rather than the printed files keeps a render of objects free of
    tritonclient; on the pod template, a changed config gives a new template and so a rollout.
    """
    canonical = sorted((m.model_dump(mode="json") for m in models), key=lambda m: m["name"])
    return hashlib.sha256(json.dumps(canonical, sort_keys=True).encode()).hexdigest()[:16]


# The NGC image's own unprivileged user (triton-server, 1000); fsGroup lets it read a PVC.
TRITON_UID = 1000
POD_SECURITY: dict[str, Any] = {
    "runAsNonRoot": True,
    "runAsUser": TRITON_UID,
    "runAsGroup": TRITON_UID,
    "fsGroup": TRITON_UID,
    "seccompProfile": {"type": "RuntimeDefault"},
}


GROUP_LABEL = "gpuinfra.dev/serving-group"
TRACK_LABEL = "gpuinfra.dev/track"
# A canary's pods read models/<name>/configs/canary.pbtxt where the canary's version policy
# differs from stable's, and fall back to config.pbtxt where there is none (Triton's
# --model-config-name).
CANARY_CONFIG = "canary"


@dataclass(frozen=True)
class Group:
    """One Deployment's worth of Triton: its models as its pods serve them, its resources."""

    name: str
    group: str | None
    track: Literal["stable", "canary"]
    models: tuple[TritonModel, ...]
    gpu_resource: str
    gpus_per_replica: int
    gpu_type: str | None
    node_selector: Mapping[str, str]
    cpu: str
    memory: str
    autoscaling: bool
    min_replicas: int
    max_replicas: int
    target_cpu_utilization: int
    weight: int = 100

    @property
    def labels(self) -> dict[str, str]:
        if self.group is None:
            return _labels()
        return {**_labels(), GROUP_LABEL: self.group, TRACK_LABEL: self.track}

    @property
    def config_name(self) -> str | None:
        return CANARY_CONFIG if self.track == "canary" else None


def _canary_model(model: TritonModel, canary: Canary) -> TritonModel:
    policy = canary.version_policies.get(model.name)
    return model if policy is None else model.model_copy(update={"version_policy": policy})


def groups(settings: TritonSettings) -> list[Group]:
    """The Deployments the settings ask for: one of every model without servingGroups; else
    each group's, and its canary's after it."""
    by_name = {m.name: m for m in settings.models}
    common: dict[str, Any] = {
        "gpu_resource": settings.gpu_resource,
        "gpus_per_replica": settings.gpus_per_replica,
        "gpu_type": settings.gpu_type,
        "cpu": settings.cpu,
        "memory": settings.memory,
        "autoscaling": settings.autoscaling,
        "min_replicas": settings.min_replicas,
        "max_replicas": settings.max_replicas,
        "target_cpu_utilization": settings.target_cpu_utilization,
    }
    if not settings.serving_groups:
        return [
            Group(
                name=NAME,
                group=None,
                track="stable",
                models=tuple(settings.models),
                node_selector={},
                **common,
            )
        ]
    found = []
    for spec in settings.serving_groups:
        own = {k: getattr(spec, k) for k in common if getattr(spec, k) is not None}
        stable = Group(
            name=f"{NAME}-{spec.name}",
            group=spec.name,
            track="stable",
            models=tuple(by_name[m] for m in spec.models),
            node_selector=dict(spec.node_selector),
            **(common | own),
        )
        if spec.canary is None:
            found.append(stable)
            continue
        canary = spec.canary
        found.append(dataclasses.replace(stable, weight=100 - canary.weight))
        # The canary runs a fixed count: its share of traffic is the route's, not an autoscaler's.
        found.append(
            dataclasses.replace(
                stable,
                name=f"{NAME}-{spec.name}-canary",
                track="canary",
                models=tuple(_canary_model(m, canary) for m in stable.models),
                autoscaling=False,
                min_replicas=canary.replicas,
                max_replicas=canary.replicas,
                weight=canary.weight,
            )
        )
    return found


def canary_models(settings: TritonSettings) -> list[TritonModel]:
    """The canaries' models whose version policy differs from stable's (their own config)."""
    stable = {m.name: m for m in settings.models}
    return [
        m for g in groups(settings) if g.track == "canary" for m in g.models if m != stable[m.name]
    ]


def served_models(settings: TritonSettings) -> list[TritonModel]:
    """Every model as some pod serves it: stable's, and a canary's where its policy differs."""
    return [*settings.models, *canary_models(settings)]


def _labels() -> dict[str, str]:
    return {"app.kubernetes.io/name": NAME}


def model_args(group: Group) -> list[str]:
    """The flags that choose what a group's server loads, from the shared repository.

    Alone, Triton loads every model in the repository (mode none). A serving group loads only
    its own: explicit mode with each model named at start (docs/decisions/0050)."""
    if group.group is None:
        return [f"--model-control-mode={MODEL_CONTROL_MODE}"]
    args = ["--model-control-mode=explicit"]
    args += [f"--load-model={m.name}" for m in sorted(group.models, key=lambda m: m.name)]
    if group.config_name:
        args.append(f"--model-config-name={group.config_name}")
    return args


def restricted_api_args() -> list[str]:
    """The flags that close the administrative APIs, on HTTP and gRPC, to a request without the
    admin header, its value the kubelet's expansion of the admin variable. Triton's form is
    ``<apis>:<header>=<value>`` (its help text shows a comma before the header, which it refuses
    at start)."""
    restricted = f"{','.join(RESTRICTED_APIS)}:{ADMIN_HEADER}=$({ADMIN_ENV})"
    return [f"--http-restricted-api={restricted}", f"--grpc-restricted-protocol={restricted}"]


def _args(repo: ModelRepository, group: Group) -> list[str]:
    location = repo.s3 if repo.s3 else MODELS_MOUNT
    return [
        "tritonserver",
        f"--model-repository={location}",
        *model_args(group),
        *restricted_api_args(),
        "--strict-readiness=true",
        "--allow-metrics=true",
        f"--metrics-port={METRICS_PORT}",
        # Latency summaries give nv_inference_request_summary_us{quantile="0.99"}, which the
        # P99 latency alert reads; the default counters carry no quantiles.
        "--metrics-config=summary_latencies=true",
    ]


def deployment(settings: TritonSettings, versions: Versions, group: Group) -> dict[str, Any]:
    repo = settings.model_repository
    if repo is None:
        raise UsageError("triton: set modelRepository (s3 or pvc) to render the Deployment")
    image = f"{versions.triton.source.image}:{versions.triton.image_tag(settings.image_variant)}"
    # A pinned digest is the default tag's: the variants run by tag.
    if versions.triton.digest and settings.image_variant == "default":
        image = f"{image}@{versions.triton.digest}"
    health = {"port": "http"}
    container: dict[str, Any] = {
        "name": NAME,
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "args": _args(repo, group),
        "ports": [
            {"name": "http", "containerPort": HTTP_PORT, "protocol": "TCP"},
            {"name": "grpc", "containerPort": GRPC_PORT, "protocol": "TCP"},
            {"name": "metrics", "containerPort": METRICS_PORT, "protocol": "TCP"},
        ],
        "resources": {
            "requests": {"cpu": group.cpu, "memory": group.memory},
            "limits": {
                group.gpu_resource: group.gpus_per_replica,
                "memory": group.memory,
            },
        },
        # Loading large models takes minutes: the startup probe holds off liveness until then.
        "startupProbe": {
            "httpGet": {"path": "/v2/health/live", **health},
            "periodSeconds": 10,
            "failureThreshold": 60,
        },
        "livenessProbe": {
            "httpGet": {"path": "/v2/health/live", **health},
            "periodSeconds": 10,
            "failureThreshold": 3,
        },
        "readinessProbe": {
            "httpGet": {"path": "/v2/health/ready", **health},
            "periodSeconds": 5,
            "failureThreshold": 3,
        },
        "volumeMounts": [
            {"name": "dshm", "mountPath": "/dev/shm"},
            {"name": "tmp", "mountPath": "/tmp"},
        ],
        "securityContext": CONTAINER_SECURITY,
    }
    # Python backends and ensembles pass tensors through shared memory; the 64 MiB default
    # makes them fail under load. /tmp is the one place the server writes (an S3 repository is
    # downloaded there, the Python backend keeps its stubs' files there): the root is read-only.
    # No size limit on it: a downloaded repository is as large as its models.
    volumes: list[dict[str, Any]] = [
        {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": settings.shm_size}},
        {"name": "tmp", "emptyDir": {}},
    ]
    pod: dict[str, Any] = {
        "tolerations": [GPU_TOLERATION],
        "securityContext": POD_SECURITY,
        # The server never calls the Kubernetes API. S3 credentials come from Pod Identity or
        # IRSA, which mount their own token.
        "automountServiceAccountToken": False,
    }
    if repo.pvc:
        container["volumeMounts"].append(
            {"name": "models", "mountPath": MODELS_MOUNT, "readOnly": True}
        )
        # Only the pod sees the volume: it checks the version directories before Triton starts.
        pod["initContainers"] = [
            {
                "name": "model-repository-preflight",
                "image": image,
                "imagePullPolicy": "IfNotPresent",
                "command": ["/bin/sh", "-c", preflight_script(group.models)],
                "resources": {
                    "requests": {"cpu": "100m", "memory": "64Mi"},
                    "limits": {"memory": "64Mi"},
                },
                "securityContext": CONTAINER_SECURITY,
                "volumeMounts": [{"name": "models", "mountPath": MODELS_MOUNT, "readOnly": True}],
            }
        ]
        volumes.append(
            {"name": "models", "persistentVolumeClaim": {"claimName": repo.pvc, "readOnly": True}}
        )
    # A missing Secret or key keeps the pod from starting (CreateContainerConfigError), rather
    # than starting it with the APIs open.
    container["env"] = [
        {
            "name": ADMIN_ENV,
            "valueFrom": {
                "secretKeyRef": {"name": settings.admin_secret, "key": settings.admin_secret_key}
            },
        }
    ]
    if repo.region:
        container["env"].append({"name": "AWS_DEFAULT_REGION", "value": repo.region})
    if repo.service_account:
        pod["serviceAccountName"] = repo.service_account
    selector = {**group.node_selector}
    if group.gpu_type:
        selector[GPU_TYPE_LABEL] = group.gpu_type
    if selector:
        pod["nodeSelector"] = dict(sorted(selector.items()))
    pod["containers"] = [container]
    pod["volumes"] = volumes
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": metadata(group.name, settings.namespace, group.labels),
        # With the autoscaler, no replicas: it owns the count, and re-applying a fixed one
        # would undo it.
        "spec": {
            **({} if group.autoscaling else {"replicas": group.min_replicas}),
            "selector": {"matchLabels": group.labels},
            "template": {
                "metadata": {
                    # The cost labels on the pods only: the selector stays as it was, which a
                    # Deployment cannot change.
                    "labels": {**group.labels, **cost_labels(settings, group)},
                    "annotations": {CONFIG_HASH_ANNOTATION: config_hash(group.models)},
                },
                "spec": pod,
            },
        },
    }


def cost_labels(settings: TritonSettings, group: Group) -> dict[str, str]:
    """The team and project labels a group's pods carry (gpuinfra/addons/accounting.py)."""
    return {
        TEAM_LABEL: settings.team or settings.namespace,
        PROJECT_LABEL: settings.project or group.group or NAME,
    }


def service(settings: TritonSettings, group: Group) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": metadata(group.name, settings.namespace, group.labels),
        "spec": {
            "type": "ClusterIP",
            "selector": group.labels,
            "ports": [
                {"name": name, "port": port, "targetPort": name, "protocol": "TCP"}
                for name, port in (
                    ("http", HTTP_PORT),
                    ("grpc", GRPC_PORT),
                    ("metrics", METRICS_PORT),
                )
            ],
        },
    }


def autoscaler(settings: TritonSettings, group: Group) -> dict[str, Any]:
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": metadata(group.name, settings.namespace, group.labels),
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": group.name},
            "minReplicas": group.min_replicas,
            "maxReplicas": group.max_replicas,
            "metrics": [
                {
                    "type": "Resource",
                    "resource": {
                        "name": "cpu",
                        "target": {
                            "type": "Utilization",
                            "averageUtilization": group.target_cpu_utilization,
                        },
                    },
                }
            ],
        },
    }


def service_monitor(settings: TritonSettings) -> dict[str, Any]:
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "ServiceMonitor",
        "metadata": metadata(NAME, settings.namespace, {**_labels(), **MONITOR_LABELS}),
        "spec": {
            "selector": {"matchLabels": _labels()},
            "endpoints": [{"port": "metrics", "path": "/metrics", "interval": "15s"}],
        },
    }


class ModelFiles(Mapping[str, str]):
    """Each model's config.pbtxt by path, written on first read.

    Writing them loads tritonclient (and numpy with it); a caller that reads only the objects,
    such as ``config check``, does not pay for that.
    """

    def __init__(self, models: list[TritonModel], canaries: Sequence[TritonModel] = ()) -> None:
        self._models = sorted(models, key=lambda m: m.name)
        # A canary's model where it serves other versions than stable: its own config.
        self._canaries = sorted(canaries, key=lambda m: m.name)
        self._files: dict[str, str] | None = None

    def _written(self) -> dict[str, str]:
        if self._files is None:
            files = {f"models/{m.name}/config.pbtxt": config_pbtxt(m) for m in self._models}
            files |= {
                f"models/{m.name}/configs/{CANARY_CONFIG}.pbtxt": config_pbtxt(m)
                for m in self._canaries
            }
            self._files = files
        return self._files

    def __getitem__(self, path: str) -> str:
        return self._written()[path]

    def __iter__(self) -> Iterator[str]:
        return iter(self._written())

    def __len__(self) -> int:
        return len(self._models) + len(self._canaries)


def service_account(settings: TritonSettings, name: str) -> dict[str, Any]:
    """The account an S3 model repository is read as: the stack binds it to an IAM role (Pod
    Identity), so the apply that binds it creates it."""
    return {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": metadata(name, settings.namespace, _labels()),
        "automountServiceAccountToken": False,
    }


def http_route(settings: TritonSettings, stable: Group, canary: Group | None) -> dict[str, Any]:
    """The group's models' HTTP paths, sent to stable and canary by the weights."""
    gateway = settings.gateway
    assert gateway is not None
    parent: dict[str, Any] = {"name": gateway.name}
    if gateway.namespace:
        parent["namespace"] = gateway.namespace
    if gateway.section_name:
        parent["sectionName"] = gateway.section_name
    backends = [
        {"name": g.name, "port": HTTP_PORT, "weight": g.weight}
        for g in (stable, canary)
        if g is not None
    ]
    return {
        "apiVersion": "gateway.networking.k8s.io/v1",
        "kind": "HTTPRoute",
        "metadata": metadata(
            stable.name, settings.namespace, {**_labels(), GROUP_LABEL: str(stable.group)}
        ),
        "spec": {
            "parentRefs": [parent],
            "rules": [
                {
                    # A path prefix matches whole segments: /v2/models/bert is not bert2's.
                    "matches": [
                        {"path": {"type": "PathPrefix", "value": f"/v2/models/{m.name}"}}
                        for m in sorted(stable.models, key=lambda m: m.name)
                    ],
                    "backendRefs": backends,
                }
            ],
        },
    }


def routes(settings: TritonSettings, found: Sequence[Group]) -> list[dict[str, Any]]:
    if settings.gateway is None:
        return []
    stables = [g for g in found if g.track == "stable" and g.group is not None]
    canaries = {g.group: g for g in found if g.track == "canary"}
    return [http_route(settings, g, canaries.get(g.group)) for g in stables]


def admin_secret(settings: TritonSettings) -> GeneratedSecret:
    """The Secret the admin header's value comes from, as the Pulumi path creates it (a
    generated key); on the Ansible path it is the site's to create."""
    return GeneratedSecret(
        name=settings.admin_secret,
        namespace=settings.namespace,
        generated={settings.admin_secret_key: ADMIN_KEY_LENGTH},
    )


def render(settings: TritonSettings, versions: Versions) -> AddonRender:
    repo = settings.model_repository
    found = groups(settings)
    return AddonRender(
        name="triton",
        release=NAME,
        namespace=settings.namespace,
        chart=None,
        objects=[
            *(
                obj
                for group in found
                for obj in (
                    deployment(settings, versions, group),
                    service(settings, group),
                    *([autoscaler(settings, group)] if group.autoscaling else []),
                )
            ),
            *routes(settings, found),
            service_monitor(settings),
            *(
                [service_account(settings, repo.service_account)]
                if repo is not None and repo.service_account
                else []
            ),
        ],
        files=ModelFiles(settings.models, canary_models(settings)),
        secrets=[admin_secret(settings)],
        # The claim the site fills with the models (an S3 repository is read through the API).
        prerequisites=[
            Prerequisite(
                "PersistentVolumeClaim",
                settings.namespace,
                repo.pvc,
                (),
                "Triton (its model repository)",
            )
        ]
        if repo is not None and repo.pvc
        else [],
    )

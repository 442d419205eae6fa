"""Kueue: GPU quota per GPU type, shared through a cohort, queued per team namespace.

Objects use ``kueue.x-k8s.io/v1beta2``, the version Kueue 0.19 stores.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import AfterValidator, Field, StringConstraints, field_validator, model_validator

from gpuinfra.addons.base import (
    EFA_RESOURCE,
    GPU_RESOURCE,
    GPU_TOLERATION,
    GPU_TYPE_LABEL,
    AddonRender,
    AddonSettings,
    Chart,
    Name,
    Quantity,
    Settings,
    enabled_field,
    metadata,
)
from gpuinfra.addons.isolation import QUEUE_LABEL
from gpuinfra.loading import cross_field_error, refuse_duplicates
from gpuinfra.versions import Versions

RELEASE = "kueue"
# A MIG profile as the device plugin's resource names carry it (3g.71gb, 1g.18gb+me).
MIG_PROFILE = r"^[1-7]g\.[0-9]+gb(\+me)?$"
API = "kueue.x-k8s.io/v1beta2"
IMAGE = "registry.k8s.io/kueue/kueue"
# The cluster's own namespaces: default, and every name Kubernetes keeps for itself with the
# kube- prefix (kube-system, kube-public, kube-node-lease and any it adds). A team's namespace
# is gpuinfra's to label (its queue, Pod Security baseline): on one of these that would fence
# the control plane's own pods, or admit every user's workloads to the queue.
CLUSTER_NAMESPACE = "default"
SYSTEM_PREFIX = "kube-"
CLUSTER_NAMESPACES_REFUSED = (
    f"not allowed: '{CLUSTER_NAMESPACE}' or a name starting with '{SYSTEM_PREFIX}', the prefix "
    "Kubernetes keeps for its own namespaces"
)


def cluster_namespace(name: str) -> bool:
    """Whether ``name`` is one of the cluster's own namespaces, never a team's."""
    return name == CLUSTER_NAMESPACE or name.startswith(SYSTEM_PREFIX)


def _own_namespace(team: str) -> str:
    if cluster_namespace(team):
        raise ValueError(
            f"'{team}' is the cluster's own namespace, not a team's "
            f"({CLUSTER_NAMESPACES_REFUSED}); give the team a namespace of its own"
        )
    return team


# A team's namespace: a Kubernetes name the team has to itself.
Team = Annotated[Name, AfterValidator(_own_namespace)]


class KueueFlavor(Settings):
    """Quota for one GPU type; nodes of that type carry gpuinfra.dev/gpu-type=<gpuType>."""

    gpu_type: Name
    gpus: int = Field(ge=0)
    cpu: Quantity
    memory: Quantity
    # GPUs this queue may borrow from the cohort beyond its own quota; None: no limit.
    gpu_borrowing_limit: int | None = Field(default=None, ge=0)
    # Quota of MIG slices by profile ("3g.71gb": 4 is nvidia.com/mig-3g.71gb), where the
    # flavor's nodes are split by a MIG layout with the mixed strategy.
    mig_slices: dict[Annotated[str, StringConstraints(pattern=MIG_PROFILE)], int] = Field(
        default_factory=dict
    )
    # Quota of EFA interfaces (vpc.amazonaws.com/efa). Kueue admits no workload asking for a
    # resource its ClusterQueue does not cover, so a Job on EFA waits forever without it.
    efa_interfaces: int = Field(default=0, ge=0)

    @field_validator("mig_slices")
    @classmethod
    def _counts(cls, value: dict[str, int]) -> dict[str, int]:
        negative = sorted(k for k, n in value.items() if n < 0)
        if negative:
            raise ValueError(f"MIG slice quotas must be 0 or more ({', '.join(negative)})")
        return value


# Kueue's WorkloadPriorityClass: an int32 value and a description of at most 2048 characters,
# as its CRD has them (the API server refuses the object otherwise).
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
MAX_DESCRIPTION = 2048


class PriorityClass(Settings):
    name: Name
    value: int = Field(ge=INT32_MIN, le=INT32_MAX)
    description: str = Field(default="", max_length=MAX_DESCRIPTION)


def _default_priorities() -> list[PriorityClass]:
    return [
        PriorityClass(name="production", value=1000, description="Serving and deadline jobs"),
        PriorityClass(name="research", value=100, description="Regular training jobs"),
        PriorityClass(name="opportunistic", value=10, description="Preemptible experiments"),
    ]


class KueueSettings(AddonSettings):
    enabled: bool = enabled_field("Install Kueue", default=True)
    namespace: Name = Field(default="kueue-system", description="Namespace of the Kueue release.")
    cluster_queue: Name = Field(
        default="gpu", description="Name of the ClusterQueue (and of each team's LocalQueue)."
    )
    cohort: Name = Field(
        default="gpuinfra",
        description="Cohort the ClusterQueue lends unused quota to and borrows from.",
    )
    flavors: list[KueueFlavor] = Field(
        default_factory=list,
        description="Quota per GPU type, each a mapping: gpu_type (the gpuinfra.dev/gpu-type node "
        "label value), gpus, cpu, memory, gpu_borrowing_limit (optional), mig_slices (optional: "
        "quota per MIG profile, e.g. {3g.71gb: 4} for nvidia.com/mig-3g.71gb), efa_interfaces "
        "(optional: the quota of EFA interfaces; a Job asking for EFA is admitted only where "
        "some flavor has it). gpus is at most what that type's nodes give, less what GPU pods "
        "outside every queue (Triton's) may hold there.",
    )
    teams: list[Team] = Field(
        default_factory=list,
        description="Team namespaces; each gets a LocalQueue pointing at the ClusterQueue.",
    )
    priority_classes: list[PriorityClass] = Field(
        default_factory=_default_priorities,
        description="WorkloadPriorityClasses, each a mapping: name, value, description.",
    )

    @model_validator(mode="after")
    def _unique(self) -> KueueSettings:
        if self.teams and not self.flavors:
            raise cross_field_error(
                "teams need at least one flavor to queue for",
                "teams",
                allowed="teams once flavors lists a GPU type",
            )
        # Each list, its names and where a name sits in an entry.
        lists: list[tuple[str, str, list[str], tuple[str, ...]]] = [
            ("flavors (gpuType)", "flavors", [f.gpu_type for f in self.flavors], ("gpu_type",)),
            ("teams", "teams", list(self.teams), ()),
            (
                "priorityClasses",
                "priority_classes",
                [p.name for p in self.priority_classes],
                ("name",),
            ),
        ]
        for what, field, names, key in lists:
            refuse_duplicates(
                names, what, field, *key, allowed=f"each {key[0] if key else 'team'} once"
            )
        return self


def values(settings: KueueSettings, versions: Versions) -> dict[str, Any]:
    del settings
    # The chart's default image is a floating staging build; pin the release image instead.
    return {
        "controllerManager": {
            "manager": {
                "image": {
                    "repository": IMAGE,
                    "tag": f"v{versions.kueue.version.lstrip('v')}",
                    "pullPolicy": "IfNotPresent",
                }
            }
        }
    }


def resource_flavor(flavor: KueueFlavor) -> dict[str, Any]:
    # Kueue adds the toleration to every admitted pod, so jobs need not know the GPU taint.
    return {
        "apiVersion": API,
        "kind": "ResourceFlavor",
        "metadata": metadata(flavor.gpu_type),
        "spec": {
            "nodeLabels": {GPU_TYPE_LABEL: flavor.gpu_type},
            "tolerations": [GPU_TOLERATION],
        },
    }


def mig_resources(settings: KueueSettings) -> list[str]:
    """The MIG slice resources some flavor gives quota of, as the device plugin names them."""
    profiles = {p for f in settings.flavors for p in f.mig_slices}
    return [f"nvidia.com/mig-{p}" for p in sorted(profiles)]


def cluster_queue(settings: KueueSettings) -> dict[str, Any]:
    # Kueue wants every flavor of a resource group to list the covered resources in order: a
    # flavor without slices of a profile lists it at 0.
    slices = mig_resources(settings)
    efa = [EFA_RESOURCE] if any(f.efa_interfaces for f in settings.flavors) else []
    flavors = []
    for flavor in sorted(settings.flavors, key=lambda f: f.gpu_type):
        gpu: dict[str, Any] = {"name": GPU_RESOURCE, "nominalQuota": flavor.gpus}
        if flavor.gpu_borrowing_limit is not None:
            gpu["borrowingLimit"] = flavor.gpu_borrowing_limit
        flavors.append(
            {
                "name": flavor.gpu_type,
                "resources": [
                    {"name": "cpu", "nominalQuota": flavor.cpu},
                    {"name": "memory", "nominalQuota": flavor.memory},
                    gpu,
                    *(
                        {
                            "name": name,
                            "nominalQuota": flavor.mig_slices.get(
                                name.removeprefix("nvidia.com/mig-"), 0
                            ),
                        }
                        for name in slices
                    ),
                    *({"name": name, "nominalQuota": flavor.efa_interfaces} for name in efa),
                ],
            }
        )
    spec: dict[str, Any] = {
        "cohortName": settings.cohort,
        # Only the team namespaces this add-on labels (each with a LocalQueue): an empty selector
        # would admit workloads from every namespace of the cluster.
        "namespaceSelector": {"matchLabels": {QUEUE_LABEL: settings.cluster_queue}},
        "queueingStrategy": "BestEffortFIFO",
        "preemption": {
            "reclaimWithinCohort": "Any",
            "withinClusterQueue": "LowerPriority",
        },
        "resourceGroups": [
            {"coveredResources": ["cpu", "memory", GPU_RESOURCE, *slices, *efa], "flavors": flavors}
        ],
    }
    return {
        "apiVersion": API,
        "kind": "ClusterQueue",
        "metadata": metadata(settings.cluster_queue),
        "spec": spec,
    }


def local_queue(settings: KueueSettings, team: str) -> dict[str, Any]:
    return {
        "apiVersion": API,
        "kind": "LocalQueue",
        "metadata": metadata(settings.cluster_queue, team),
        "spec": {"clusterQueue": settings.cluster_queue},
    }


def priority_class(priority: PriorityClass) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "apiVersion": API,
        "kind": "WorkloadPriorityClass",
        "metadata": metadata(priority.name),
        "value": priority.value,
    }
    if priority.description:
        obj["description"] = priority.description
    return obj


def render(settings: KueueSettings, versions: Versions) -> AddonRender:
    objects = [resource_flavor(f) for f in sorted(settings.flavors, key=lambda f: f.gpu_type)]
    # Without flavors there is no quota to queue for: install Kueue and its priorities only.
    if settings.flavors:
        objects.append(cluster_queue(settings))
        objects += [local_queue(settings, team) for team in sorted(settings.teams)]
    objects += [priority_class(p) for p in sorted(settings.priority_classes, key=lambda p: p.name)]
    return AddonRender(
        name="kueue",
        release=RELEASE,
        namespace=settings.namespace,
        chart=Chart.of(versions.kueue),
        values=values(settings, versions),
        objects=objects,
    )

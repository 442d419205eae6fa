"""Kueue: GPU quota per GPU type, shared through a cohort, queued per team namespace.

Objects use ``kueue.x-k8s.io/v1beta2``, the version Kueue 0.19 stores.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, model_validator

from gpuinfra.addons.base import (
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
from gpuinfra.versions import Versions

RELEASE = "kueue"
API = "kueue.x-k8s.io/v1beta2"
IMAGE = "registry.k8s.io/kueue/kueue"


class KueueFlavor(Settings):
    """Quota for one GPU type; nodes of that type carry gpuinfra.dev/gpu-type=<gpuType>."""

    gpu_type: Name
    gpus: int = Field(ge=0)
    cpu: Quantity
    memory: Quantity
    # GPUs this queue may borrow from the cohort beyond its own quota; None: no limit.
    gpu_borrowing_limit: int | None = Field(default=None, ge=0)


class PriorityClass(Settings):
    name: Name
    value: int
    description: str = ""


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
        "label value), gpus, cpu, memory, gpu_borrowing_limit (optional).",
    )
    teams: list[Name] = Field(
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
            raise ValueError("teams need at least one flavor to queue for")
        for what, names in (
            ("flavors (gpuType)", [f.gpu_type for f in self.flavors]),
            ("teams", self.teams),
            ("priorityClasses", [p.name for p in self.priority_classes]),
        ):
            dupes = sorted({n for n in names if names.count(n) > 1})
            if dupes:
                raise ValueError(f"duplicate {what}: {', '.join(dupes)}")
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


def cluster_queue(settings: KueueSettings) -> dict[str, Any]:
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
            {"coveredResources": ["cpu", "memory", GPU_RESOURCE], "flavors": flavors}
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

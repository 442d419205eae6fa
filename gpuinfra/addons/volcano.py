"""Volcano: gang scheduling and weighted, reclaimable queues for batch training jobs."""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal, cast

import yaml
from pydantic import Field, ValidatorFunctionWrapHandler, WrapValidator, model_validator

from gpuinfra.addons.base import (
    QUANTITY_PATTERN,
    AddonRender,
    AddonSettings,
    Chart,
    Name,
    Settings,
    enabled_field,
    metadata,
)
from gpuinfra.errors import excerpt
from gpuinfra.loading import cross_field_error, refuse_duplicates
from gpuinfra.versions import Versions

RELEASE = "volcano"
QUEUE_API = "scheduling.volcano.sh/v1beta1"

Action = Literal["enqueue", "allocate", "preempt", "reclaim", "backfill"]
DEFAULT_ACTIONS: tuple[Action, ...] = ("enqueue", "allocate", "reclaim", "backfill")
_QUANTITY = re.compile(QUANTITY_PATTERN)


def _amount(value: Any, handler: ValidatorFunctionWrapHandler) -> str | int:
    # Checked before pydantic tries "str | int" member by member, which would give one line
    # for each member it tried.
    if (
        isinstance(value, bool)
        or not isinstance(value, str | int)
        or not _QUANTITY.fullmatch(str(value))
    ):
        raise ValueError(
            f"{excerpt(repr(value))} is not a resource quantity (allowed: a whole number such "
            "as 8, or a Kubernetes quantity string such as '500m' or '64Gi')"
        )
    return cast("str | int", handler(value))


# A resource amount: 8 as YAML reads it, or a quantity string ("500m", "64Gi").
Amount = Annotated[str | int, WrapValidator(_amount)]


class VolcanoQueue(Settings):
    name: Name
    weight: int = Field(default=1, ge=1, le=65535)
    # Upper bound per resource (nvidia.com/gpu, cpu, memory); empty means unbounded.
    capability: dict[str, Amount] = Field(default_factory=dict)
    # Whether other queues may reclaim resources this queue uses beyond its share.
    reclaimable: bool = True


class VolcanoSettings(AddonSettings):
    enabled: bool = enabled_field("Install Volcano", default=False)
    namespace: Name = Field(
        default="volcano-system", description="Namespace of the Volcano release."
    )
    # "reclaim" is what lets a queue take back its share from reclaimable queues.
    actions: list[Action] = Field(
        default_factory=lambda: list(DEFAULT_ACTIONS),
        min_length=1,
        description="Scheduler actions in order; must include allocate.",
    )
    binpack: bool = Field(
        default=True,
        description="Pack GPU pods onto as few nodes as possible, leaving whole nodes free for "
        "large jobs.",
    )
    queues: list[VolcanoQueue] = Field(
        default_factory=list,
        description="Queues, each a mapping: name, weight (1-65535), capability ({resource: "
        "quantity}, empty for unbounded), reclaimable (bool).",
    )

    @model_validator(mode="after")
    def _unique(self) -> VolcanoSettings:
        refuse_duplicates(
            [q.name for q in self.queues],
            "queue names",
            "queues",
            "name",
            allowed="each queue name once",
        )
        if "allocate" not in self.actions:
            raise cross_field_error(
                "actions must include 'allocate', or nothing is ever scheduled",
                "actions",
                allowed="a list with 'allocate'",
            )
        return self


def scheduler_config(settings: VolcanoSettings) -> str:
    """volcano-scheduler.conf: the upstream tiers, with binpack optional."""
    second = [
        {"name": "overcommit"},
        {"name": "drf", "enablePreemptable": False},
        {"name": "predicates"},
        {"name": "proportion"},
        {"name": "nodeorder"},
    ]
    if settings.binpack:
        second.append({"name": "binpack"})
    config = {
        "actions": ", ".join(settings.actions),
        "tiers": [
            {
                "plugins": [
                    {"name": "priority"},
                    {"name": "gang", "enablePreemptable": False},
                    {"name": "conformance"},
                ]
            },
            {"plugins": second},
        ],
    }
    return yaml.safe_dump(config, sort_keys=False)


def values(settings: VolcanoSettings, versions: Versions) -> dict[str, Any]:
    return {
        "basic": {
            "image_tag_version": f"v{versions.volcano.version.lstrip('v')}",
            "image_pull_policy": "IfNotPresent",
        },
        "custom": {"scheduler_config_override": scheduler_config(settings)},
    }


def queue(q: VolcanoQueue) -> dict[str, Any]:
    spec: dict[str, Any] = {"weight": q.weight, "reclaimable": q.reclaimable}
    if q.capability:
        spec["capability"] = dict(sorted(q.capability.items()))
    return {"apiVersion": QUEUE_API, "kind": "Queue", "metadata": metadata(q.name), "spec": spec}


def render(settings: VolcanoSettings, versions: Versions) -> AddonRender:
    return AddonRender(
        name="volcano",
        release=RELEASE,
        namespace=settings.namespace,
        chart=Chart.of(versions.volcano),
        values=values(settings, versions),
        objects=[queue(q) for q in sorted(settings.queues, key=lambda q: q.name)],
    )

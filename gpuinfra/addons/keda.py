"""KEDA: idle GPU Deployments in dev and test namespaces scaled to zero.

Each workload listed in ``idle_reclaim`` gets a ``ScaledObject`` whose Prometheus trigger reads
the GPU utilisation DCGM attributes to the Deployment's pods. While the utilisation is above the
threshold the trigger is active and the Deployment keeps its replicas; once it has stayed at or
below the threshold for ``idle_hours``, KEDA scales the Deployment to zero. The reminder two
hours in is the Prometheus stack's ``GpuIdle`` alert. Decision 0055 gives the KEDA semantics
this relies on.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, model_validator

from gpuinfra.addons.base import (
    PROMETHEUS_RELEASE,
    AddonRender,
    AddonSettings,
    Chart,
    Name,
    ServiceUrl,
    Settings,
    enabled_field,
    metadata,
)
from gpuinfra.loading import cross_field_error
from gpuinfra.versions import Versions

RELEASE = "keda"
SCALED_OBJECT_API = "keda.sh/v1alpha1"
# kube-prometheus-stack's Prometheus Service: "<release>-prometheus", port 9090.
PROMETHEUS_PORT = 9090


def prometheus_address(namespace: str) -> str:
    """The in-cluster URL of the Prometheus the Prometheus stack add-on creates in ``namespace``."""
    return f"http://{PROMETHEUS_RELEASE}-prometheus.{namespace}.svc:{PROMETHEUS_PORT}"


class IdleWorkload(Settings):
    namespace: Name
    deployment: Name
    # Replicas while busy: KEDA holds the Deployment here (minReplicaCount = maxReplicaCount),
    # so it only ever decides between these and zero.
    replicas: int = Field(default=1, ge=1, le=100)


class KedaSettings(AddonSettings):
    enabled: bool = enabled_field("Install KEDA and the idle-reclaim ScaledObjects", default=False)
    namespace: Name = Field(default="keda", description="Namespace of the KEDA release.")
    reclaim_namespaces: list[Name] = Field(
        default_factory=lambda: ["dev", "test"],
        min_length=1,
        description="Namespaces whose GPU Deployments may be scaled to zero when idle.",
    )
    idle_reclaim: list[IdleWorkload] = Field(
        default_factory=list,
        description="GPU Deployments to scale to zero when idle, each a mapping: namespace, "
        "deployment, replicas (while busy, 1-100).",
    )
    idle_threshold_percent: float = Field(
        default=5.0,
        gt=0,
        lt=100,
        description="GPU utilisation (percent, mean over the Deployment's GPUs) at or below "
        "which a Deployment counts as idle.",
    )
    idle_hours: float = Field(
        default=6.0,
        ge=1,
        le=168,
        description="Hours a Deployment stays idle before it is scaled to zero.",
    )
    polling_seconds: int = Field(
        default=60, ge=10, le=600, description="How often KEDA asks Prometheus (seconds)."
    )
    prometheus_address: ServiceUrl = Field(
        default=prometheus_address("monitoring"),
        pattern=r"^https?://[^\s/]+(:\d+)?(/\S*)?$",
        description="URL of the Prometheus the triggers read: the Prometheus stack add-on's "
        "Service kube-prometheus-stack-prometheus, port 9090, in that add-on's namespace.",
    )

    @model_validator(mode="after")
    def _workloads(self) -> KedaSettings:
        seen: set[tuple[str, str]] = set()
        for i, workload in enumerate(self.idle_reclaim):
            key = (workload.namespace, workload.deployment)
            if key in seen:
                raise cross_field_error(
                    f"idle_reclaim lists {'/'.join(key)} twice",
                    "idle_reclaim",
                    i,
                    allowed="each namespace and deployment once",
                )
            seen.add(key)
            if workload.namespace not in self.reclaim_namespaces:
                raise cross_field_error(
                    f"idle_reclaim: {'/'.join(key)} is not in a reclaim namespace "
                    f"(allowed: {', '.join(self.reclaim_namespaces)})",
                    "idle_reclaim",
                    i,
                    "namespace",
                )
        return self


def utilisation_query(workload: IdleWorkload) -> str:
    """Mean GPU utilisation of the Deployment's pods (pods are named <deployment>-<rs>-<id>),
    or 0 once the Deployment asks for no replicas (kube-state-metrics).

    Running pods without utilisation series (the DCGM exporter down or restarting) give no
    result, which KEDA reads as an error: it leaves the replicas as they are and marks the
    ScaledObject not ready, instead of taking a busy workload for an idle one."""
    pods = f"{workload.deployment}-[a-z0-9]+-[a-z0-9]+"
    where = f'namespace="{workload.namespace}"'
    return (
        f'avg(DCGM_FI_DEV_GPU_UTIL{{{where},pod=~"{pods}"}})'
        f' or (sum(kube_deployment_spec_replicas{{{where},deployment="{workload.deployment}"}}) == 0)'
    )


def scaled_object(settings: KedaSettings, workload: IdleWorkload) -> dict[str, Any]:
    idle = round(settings.idle_hours * 3600)
    threshold = f"{settings.idle_threshold_percent:g}"
    return {
        "apiVersion": SCALED_OBJECT_API,
        "kind": "ScaledObject",
        "metadata": metadata(f"{workload.deployment}-idle-reclaim", workload.namespace),
        "spec": {
            "scaleTargetRef": {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "name": workload.deployment,
            },
            "pollingInterval": settings.polling_seconds,
            # Scaling to zero waits this long after the trigger was last active ...
            "cooldownPeriod": idle,
            # ... and, for a ScaledObject that has never seen its trigger active, this long
            # after its creation (without it KEDA would scale a quiet Deployment at once).
            "initialCooldownPeriod": idle,
            "idleReplicaCount": 0,
            "minReplicaCount": workload.replicas,
            "maxReplicaCount": workload.replicas,
            "triggers": [
                {
                    "type": "prometheus",
                    "name": "gpu-utilisation",
                    "metadata": {
                        "serverAddress": settings.prometheus_address,
                        "query": utilisation_query(workload),
                        # The HPA target while active; with min = max replicas it never moves.
                        "threshold": threshold,
                        # Active (busy) only above this; at or below it the idle clock runs.
                        "activationThreshold": threshold,
                        # No result is an error, not 0: see utilisation_query.
                        "ignoreNullValues": "false",
                    },
                }
            ],
        },
    }


def values(settings: KedaSettings, versions: Versions) -> dict[str, Any]:
    del settings, versions
    return {
        # The chart renders its CRDs as templates: helm upgrade keeps them at the chart's.
        "crds": {"install": True},
        "image": {"pullPolicy": "IfNotPresent"},
        # One scale-to-zero per Deployment, triggered from Prometheus: no CloudEvents.
        "operator": {"replicaCount": 1},
    }


def render(settings: KedaSettings, versions: Versions) -> AddonRender:
    return AddonRender(
        name="keda",
        release=RELEASE,
        namespace=settings.namespace,
        chart=Chart.of(versions.keda),
        values=values(settings, versions),
        objects=[
            scaled_object(settings, w)
            for w in sorted(settings.idle_reclaim, key=lambda w: (w.namespace, w.deployment))
        ],
    )

"""ClusterAddons: the in-cluster software, applied from the add-on renders of the core.

Every Helm value and object comes from ``gpuinfra.addons.render_all``; this component only
turns each render into a Helm release at the pinned chart version and one resource per extra
object. On EKS the GPU AMI ships the NVIDIA driver and container toolkit, so the GPU Operator
must run in host-driver mode: a render that would start driver or toolkit containers is refused.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from components.validation import raise_findings
from gpuinfra.addons import AddonRender
from gpuinfra.addons.base import MANAGED_BY
from gpuinfra.config import Finding

GPU_OPERATOR = "gpu_operator"


@dataclass
class ClusterAddonsArgs:
    renders: list[AddonRender]
    provider: k8s.Provider
    # The GPU AMI ships driver and toolkit; only operator-managed images would set this False.
    host_driver: bool = True


class ClusterAddons(pulumi.ComponentResource):
    releases: dict[str, k8s.helm.v3.Release]

    def __init__(
        self, name: str, args: ClusterAddonsArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        raise_findings("ClusterAddons", name, _findings(args))
        super().__init__("gpuinfra:addons:ClusterAddons", name, None, opts)
        self.releases = {}
        namespaces: dict[str, k8s.core.v1.Namespace] = {}
        # Each add-on waits for the one before it: the Prometheus stack installs the
        # ServiceMonitor and PrometheusRule CRDs the others use.
        previous: list[pulumi.Resource] = []
        for render in args.renders:
            on_cluster = pulumi.ResourceOptions(
                parent=self, provider=args.provider, depends_on=list(previous)
            )
            applied: list[pulumi.Resource] = []
            if render.namespace not in namespaces:
                namespaces[render.namespace] = k8s.core.v1.Namespace(
                    f"{name}-ns-{render.namespace}",
                    metadata={"name": render.namespace, "labels": dict(MANAGED_BY)},
                    opts=on_cluster,
                )
            applied.append(namespaces[render.namespace])
            if render.chart is not None:
                release = k8s.helm.v3.Release(
                    f"{name}-{render.name.replace('_', '-')}",
                    _chart_args(render),
                    opts=pulumi.ResourceOptions.merge(
                        on_cluster, pulumi.ResourceOptions(depends_on=list(applied))
                    ),
                )
                self.releases[render.name] = release
                applied.append(release)
            after_chart = pulumi.ResourceOptions.merge(
                on_cluster, pulumi.ResourceOptions(depends_on=list(applied))
            )
            for obj in render.objects:
                applied.append(_object(name, render, obj, after_chart))
            previous = applied
        self.register_outputs({"releases": sorted(self.releases)})


def _chart_args(render: AddonRender) -> k8s.helm.v3.ReleaseArgs:
    assert render.chart is not None
    chart = render.chart
    repository: k8s.helm.v3.RepositoryOptsArgs | None
    if chart.repository.startswith("oci://"):
        # OCI charts are addressed by URL; Helm has no repository index for them.
        chart_ref, repository = f"{chart.repository.rstrip('/')}/{chart.name}", None
    else:
        chart_ref, repository = chart.name, k8s.helm.v3.RepositoryOptsArgs(repo=chart.repository)
    return k8s.helm.v3.ReleaseArgs(
        name=render.release,
        chart=chart_ref,
        version=chart.version,
        repository_opts=repository,
        namespace=render.namespace,
        values=render.values,
        atomic=True,
        cleanup_on_fail=True,
        timeout=900,
    )


def _object(
    name: str, render: AddonRender, obj: dict[str, Any], opts: pulumi.ResourceOptions
) -> pulumi.CustomResource:
    """Any Kubernetes object, core or custom, registered as pulumi-kubernetes registers it.

    The provider's type token is ``kubernetes:<group or core>/<version>:<Kind>`` and its
    inputs are the object itself, which is what the typed classes (ConfigMap, and
    apiextensions.CustomResource for CRD kinds) send; one path serves both, and fields
    besides ``spec`` (a ConfigMap's ``data``) pass through.
    """
    group, _, version = str(obj["apiVersion"]).rpartition("/")
    token = f"kubernetes:{group or 'core'}/{version}:{obj['kind']}"
    meta = obj["metadata"]
    addon = render.name.replace("_", "-")
    parts = [name, addon, str(obj["kind"]).lower(), meta.get("namespace"), meta["name"]]
    return pulumi.CustomResource(token, "-".join(p for p in parts if p), dict(obj), opts)


def _findings(args: ClusterAddonsArgs) -> list[Finding]:
    found: list[Finding] = []
    for i, render in enumerate(args.renders):
        for obj in render.objects:
            if obj.get("kind") == "Namespace":
                found.append(
                    (("renders", i, "objects"), "namespaces are created by ClusterAddons itself")
                )
            elif (
                not {"apiVersion", "kind", "metadata"} <= obj.keys()
                or "name" not in obj["metadata"]
            ):
                found.append(
                    (
                        ("renders", i, "objects"),
                        "every object needs apiVersion, kind and metadata.name",
                    )
                )
        if render.name != GPU_OPERATOR or not args.host_driver:
            continue
        for operand in ("driver", "toolkit"):
            enabled = (render.values.get(operand) or {}).get("enabled", True)
            if enabled is not False:
                found.append(
                    (
                        ("renders", i, "values", operand, "enabled"),
                        f"the EKS GPU AMI ships the NVIDIA {operand}; set the GPU Operator to "
                        "host-driver mode (gpuOperator.driverMode: host)",
                    )
                )
    names = [r.name for r in args.renders]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        found.append((("renders",), f"add-ons rendered twice: {', '.join(dupes)}"))
    return found

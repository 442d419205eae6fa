"""ClusterAddons: the in-cluster software, applied from the add-on renders of the core.

Every Helm value and object comes from ``gpuinfra.addons.render_all``; this component only
turns each render into a Helm release at the pinned chart version and one resource per extra
object, after the Namespaces they name and the Secrets the render declares (passwords generated
by pulumi-random, kept secret in state). On EKS the GPU AMI ships the NVIDIA driver and
container toolkit, so the GPU Operator must run in host-driver mode: a render that would start
driver or toolkit containers is refused.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_kubernetes as k8s
import pulumi_random as random

from components.validation import raise_findings
from gpuinfra.addons import AddonRender
from gpuinfra.addons.base import MANAGED_BY, GeneratedSecret, secret_config_keys
from gpuinfra.config import Finding

GPU_OPERATOR = "gpu_operator"
# The stack's own config namespace (``gpuinfra:<key>``).
CONFIG_NAMESPACE = "gpuinfra"


def missing_secret_config(renders: list[AddonRender]) -> str | None:
    """One line naming the ``pulumi config set --secret`` commands still to run, or None."""
    config = pulumi.Config(CONFIG_NAMESPACE)
    missing = [k for k in secret_config_keys(renders) if config.get_secret(k) is None]
    if not missing:
        return None
    commands = "; ".join(
        f"pulumi config set --secret {CONFIG_NAMESPACE}:{k} <value>" for k in missing
    )
    return f"the stack's Secrets read secret config that is not set: run {commands}"


@dataclass
class ClusterAddonsArgs:
    renders: list[AddonRender]
    provider: k8s.Provider
    # The GPU AMI ships driver and toolkit; only operator-managed images would set this False.
    host_driver: bool = True


class ClusterAddons(pulumi.ComponentResource):
    releases: dict[str, k8s.helm.v3.Release]
    # The generated Secrets, by "<namespace>/<name>".
    secrets: dict[str, k8s.core.v1.Secret]

    def __init__(
        self, name: str, args: ClusterAddonsArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        raise_findings("ClusterAddons", name, _findings(args))
        super().__init__("gpuinfra:addons:ClusterAddons", name, None, opts)
        self.releases = {}
        self.secrets = {}
        namespaces: dict[str, k8s.core.v1.Namespace] = {}
        # Each add-on waits for the one before it: the Prometheus stack installs the
        # ServiceMonitor and PrometheusRule CRDs the others use.
        previous: list[pulumi.Resource] = []
        for render in args.renders:
            on_cluster = pulumi.ResourceOptions(
                parent=self, provider=args.provider, depends_on=list(previous)
            )

            def namespace(
                ns: str,
                opts: pulumi.ResourceOptions = on_cluster,
                render: AddonRender = render,
            ) -> pulumi.Resource:
                # Once each, where first named: as a release's, a Secret's or an object's
                # namespace (Kueue's LocalQueues live in the team namespaces).
                if ns not in namespaces:
                    labels = {**MANAGED_BY, **render.namespace_labels.get(ns, {})}
                    namespaces[ns] = k8s.core.v1.Namespace(
                        f"{name}-ns-{ns}",
                        metadata={"name": ns, "labels": labels},
                        opts=opts,
                    )
                return namespaces[ns]

            applied: list[pulumi.Resource] = [namespace(render.namespace)]
            # The release reads its Secrets at install (Grafana's admin password).
            for secret in render.secrets:
                made = _secret(name, render, secret, namespace(secret.namespace), on_cluster, self)
                self.secrets[f"{secret.namespace}/{secret.name}"] = made
                applied.append(made)
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
            after_chart = list(applied)
            for obj in render.objects:
                ns = obj["metadata"].get("namespace")
                own = [namespace(ns)] if ns else []
                opts = pulumi.ResourceOptions.merge(
                    on_cluster, pulumi.ResourceOptions(depends_on=[*after_chart, *own])
                )
                applied.append(_object(name, render, obj, opts))
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


def _secret(
    name: str,
    render: AddonRender,
    secret: GeneratedSecret,
    namespace: pulumi.Resource,
    opts: pulumi.ResourceOptions,
    parent: pulumi.Resource,
) -> k8s.core.v1.Secret:
    """An Opaque Secret with its fixed keys, a generated password for each generated key and
    the stack's secret config value for each key read from config."""
    addon = render.name.replace("_", "-")
    data: dict[str, pulumi.Input[str]] = dict(secret.fixed)
    config = pulumi.Config(CONFIG_NAMESPACE)
    for key, config_key in sorted(secret.from_config.items()):
        # A Pulumi secret from the first to the last step: never plain in state or a plan.
        data[key] = config.require_secret(config_key)
    for key, length in sorted(secret.generated.items()):
        password = random.RandomPassword(
            f"{name}-{addon}-password-{secret.namespace}-{secret.name}-{key}",
            length=length,
            special=False,
            opts=pulumi.ResourceOptions(parent=parent),
        )
        data[key] = pulumi.Output.secret(password.result)
    return k8s.core.v1.Secret(
        f"{name}-{addon}-secret-{secret.namespace}-{secret.name}",
        metadata={
            "name": secret.name,
            "namespace": secret.namespace,
            "labels": dict(MANAGED_BY),
        },
        type="Opaque",
        string_data=data,
        opts=pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(depends_on=[namespace])),
    )


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
        for j, secret in enumerate(render.secrets):
            keys = [*secret.fixed, *secret.generated, *secret.from_config]
            both = sorted({k for k in keys if keys.count(k) > 1})
            if both:
                found.append(
                    (
                        ("renders", i, "secrets", j),
                        f"Secret {secret.name}: keys given twice (fixed, generated or from config): {', '.join(both)}",
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

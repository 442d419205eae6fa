"""Whether a declared cluster can run what it declares: rules over the whole desired state.

Each add-on's objects pass their own schema; these rules look across them and the nodes:

- **scheduling**: every pod template the project deploys fits at least one kind of node (node
  selector against the node's labels, tolerations against its taints, requests against what it
  can allocate);
- **quotas**: a Kueue ResourceFlavor selects some node, and the ClusterQueue's nominal quota per
  flavor is no more than the nodes it selects can give at their largest size; GPU resources
  those nodes offer that the queue does not cover, and GPU workloads outside every queue, are
  reported;
- **autoscaling**: a HorizontalPodAutoscaler's metrics are served by something installed;
- **references**: every namespaced object's namespace is created by the same apply.

The nodes come from the stack's node pools (their labels and taint as the node pool component
sets them, allocatable from the instance catalog less the kubelet's reserve). The rules take
plain data, so the same functions serve a site's host groups.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any, Literal

from gpuinfra import addons, autoscaler, catalog, chartdata, gpus, paths
from gpuinfra import efa as efa_mod
from gpuinfra import site as site_mod
from gpuinfra import versions as versions_mod
from gpuinfra.addons import AddonsSettings
from gpuinfra.addons.base import (
    EFA_RESOURCE,
    GPU_RESOURCE,
    GPU_TAINT,
    GPU_TYPE_LABEL,
    AddonRender,
    quantity_amount,
)
from gpuinfra.addons.gpu_operator import (
    MIG_ALL_DISABLED,
    MIG_CONFIG_LABEL,
    SMOKE_TEST,
    GpuOperatorSettings,
)
from gpuinfra.addons.keda import prometheus_address
from gpuinfra.addons.logs import loki_push_address, loki_query_address
from gpuinfra.config import (
    POOL_LABEL,
    SYSTEM_POOL,
    StackConfig,
    system_type_problem,
    system_vcpus,
)
from gpuinfra.errors import ConfigError, Problem
from gpuinfra.loading import display_path, load_yaml
from gpuinfra.site import Site
from gpuinfra.suggest import allowed, did_you_mean
from gpuinfra.versions import Versions

Severity = Literal["error", "warning"]
WORKLOAD_KINDS = ("Deployment", "StatefulSet", "DaemonSet", "Job")
_NAME_LABEL = "app.kubernetes.io/name"
# Kinds that live outside any namespace (of those the add-ons emit or could).
CLUSTER_SCOPED = {
    "Namespace",
    "ClusterRole",
    "ClusterRoleBinding",
    "CustomResourceDefinition",
    "PriorityClass",
    "StorageClass",
    "IngressClass",
    "RuntimeClass",
    "ResourceFlavor",
    "ClusterQueue",
    "WorkloadPriorityClass",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
    "Queue",  # Volcano's queues are cluster-scoped
}
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
# API groups the cluster serves without a CRD (and the Pulumi provider's own pseudo-group).
BUILTIN_GROUPS = {
    "core",
    "apps",
    "batch",
    "autoscaling",
    "policy",
    "rbac.authorization.k8s.io",
    "storage.k8s.io",
    "networking.k8s.io",
    "scheduling.k8s.io",
    "node.k8s.io",
    "apiextensions.k8s.io",
    "admissionregistration.k8s.io",
    "coordination.k8s.io",
    "discovery.k8s.io",
    "helm.sh",
}
# API groups an apply may use without an add-on whose chart installs their CRDs: the built-in
# ones and those the cluster brings (the Gateway API comes with the cluster's gateway). Both
# paths' `order` rules read this.
CLUSTER_GROUPS = frozenset(BUILTIN_GROUPS) | chartdata.PROVIDED_GROUPS
ADDONS_PLAYBOOK = "playbooks/addons.yml"
# What serves each kind of HPA metric. Resource metrics come from the metrics API
# (metrics-server); the others from a custom or external metrics adapter.
METRIC_SERVERS = {
    "Resource": ("metrics-server",),
    "ContainerResource": ("metrics-server",),
    "Pods": ("prometheus-adapter",),
    "Object": ("prometheus-adapter",),
    "External": ("prometheus-adapter",),
}


@dataclass(frozen=True)
class Finding:
    severity: Severity
    rule: str
    object: str
    path: str
    message: str

    def document(self) -> dict[str, str]:
        return {
            "severity": self.severity,
            "rule": self.rule,
            "object": self.object,
            "path": self.path,
            "message": self.message,
        }


@dataclass(frozen=True)
class Taint:
    key: str
    value: str
    effect: str


@dataclass(frozen=True)
class Nodes:
    """One kind of node: a node pool or a host group, and how many of it there can be."""

    name: str
    labels: Mapping[str, str]
    taints: tuple[Taint, ...]
    allocatable: Mapping[str, float]
    count: int
    # Why a GPU reaches no container here when the GPU Operator hands devices out through CDI
    # and the pod names no runtime class ('' where it does).
    cdi_problem: str = ""
    # The MIG layout its GPUs are split into ('' for none), and the MIG mode its node check
    # expects (None where no node check is configured).
    mig_layout: str = ""
    expected_mig_mode: str | None = None
    # Why its nvidia.com/mig.config label names no layout the GPU Operator has ('' where it
    # names one, or none).
    mig_label_problem: str = ""
    # Why its GPUs cannot be split by its MIG layout ('' where they can), and the key that
    # chose the layout.
    mig_problem: str = ""
    mig_key: str = ""
    # Its GPU model (lower case, as gpus.GPU_MIN_BRANCH names it; '' where unknown), the driver
    # build it runs and where that build is pinned ('' for nodes without GPUs).
    gpu: str = ""
    driver: str = ""
    driver_key: str = ""
    # The fewest there can be (a pool's minSize; None where the count is fixed, a site's host),
    # and the node-template tags the autoscaler reads for it (None: no autoscaler tags).
    min_count: int | None = None
    template_tags: Mapping[str, str] | None = None


@dataclass(frozen=True)
class State:
    renders: tuple[AddonRender, ...]
    nodes: tuple[Nodes, ...]
    # Where a label on nodes is set, for the messages.
    label_hint: str = "a node pool's labels"
    # Whether the GPU Operator's device plugin hands devices out through CDI.
    cdi: bool = False
    # The add-on roles in the order the Ansible play runs them (sites; empty for stacks, whose
    # order the review path checks from the stack program's registrations).
    play: tuple[str, ...] = ()
    # Whether the apply creates the cluster itself (a stack): then nothing can exist in it
    # before the apply, and a prerequisite is an error.
    new_cluster: bool = False
    # Cluster-scoped objects the apply creates besides the add-ons' (the stack's StorageClass).
    created: frozenset[tuple[str, str, str]] = frozenset()
    # Whether a node autoscaler runs (a stack's cluster.autoscaler; None on sites, whose hosts
    # are the nodes there are).
    autoscaler: bool | None = None
    # The environment (a stack's; a site's gpuinfra_environment, '' where it names none).
    environment: str = ""


# --- what the nodes offer -------------------------------------------------------------------------

MIB = 1024 * 1024
# The EKS AL2023 AMIs reserve CPU for the kubelet in steps (6% of the first core, 1% of the
# second, 0.5% of the next two, 0.25% of the rest) and memory as 255 MiB + 11 MiB per pod, plus a
# 100 MiB hard eviction threshold. 110 pods per node is the kubelet default the AMI keeps for
# instances under 30 vCPU; larger ones get more pods and so a little more reserve, which this
# approximation leaves out.
MAX_PODS = 110


def kube_reserved_cpu(vcpu: int) -> float:
    steps = ((1, 0.06), (1, 0.01), (2, 0.005))
    reserved, left = 0.0, vcpu
    for cores, share in steps:
        used = min(cores, left)
        reserved += used * share
        left -= used
    return reserved + left * 0.0025


# The CPU node group's families (config.SYSTEM_INSTANCE_FAMILIES) give a fixed memory per vCPU:
# 4 GiB for m, 2 GiB for c, 8 GiB for r.
_MIB_PER_VCPU = {"m": 4096, "c": 2048, "r": 8192}


def _size(instance_type: str) -> tuple[int, int, int]:
    """vCPUs, memory in MiB and GPUs of ``instance_type``."""
    gpu = catalog.instance_types().get(instance_type)
    if gpu is not None:
        return gpu.vcpu, gpu.memory_mib, gpu.gpu_count
    vcpu = system_vcpus(instance_type)
    if vcpu is None:
        raise ValueError(system_type_problem(instance_type))
    return vcpu, vcpu * _MIB_PER_VCPU[instance_type[0]], 0


def allocatable(instance_type: str, *, efa: bool = False) -> dict[str, float]:
    """What one node of ``instance_type`` can give pods: CPU cores, memory bytes, GPUs, and in an
    EFA pool its EFA interfaces (the stack runs the EFA device plugin on those nodes)."""
    vcpu, memory_mib, gpus = _size(instance_type)
    reserved_mib = 255 + 11 * MAX_PODS + 100
    offer = {
        "cpu": vcpu - kube_reserved_cpu(vcpu),
        "memory": float((memory_mib - reserved_mib) * MIB),
    }
    if gpus:
        offer[GPU_RESOURCE] = float(gpus)
    if efa:
        offer[EFA_RESOURCE] = float(catalog.instance_types()[instance_type].efa_interfaces)
    return offer


def pool_labels(
    name: str, instance_type: str, extra: Mapping[str, str], *, efa: bool = False
) -> dict[str, str]:
    """The labels a GPU node pool's nodes carry (the node pool component sets these)."""
    spec = catalog.instance_types()[instance_type]
    return {**extra, GPU_TYPE_LABEL: spec.gpu_name, POOL_LABEL: name, **efa_mod.node_labels(efa)}


def pool_template_tags(
    name: str, instance_type: str, extra: Mapping[str, str], *, efa: bool = False
) -> dict[str, str]:
    """The node-template tags the node pool component puts on its Auto Scaling group."""
    return autoscaler.template_tags(
        pool_labels(name, instance_type, extra, efa=efa),
        [(GPU_TAINT["key"], GPU_TAINT["value"], GPU_TAINT["effect"])],
        # The extended resources, which the node's device plugins announce.
        {
            k: int(n)
            for k, n in allocatable(instance_type, efa=efa).items()
            if k not in ("cpu", "memory")
        },
    )


def stack_nodes(cfg: StackConfig, versions: Versions | None = None) -> tuple[Nodes, ...]:
    """The stack's node pools, and the CPU node group gpuinfra adds beside them.

    GPU nodes run the EKS GPU AMI, whose driver the node check adopts as
    ``nvidia_driver.preinstalled``."""
    gpu_taint = Taint(GPU_TAINT["key"], GPU_TAINT["value"], GPU_TAINT["effect"])
    driver = (versions or versions_mod.pinned()).driver("preinstalled").version
    pools = [
        Nodes(
            name=f"node pool {pool.name}",
            labels=pool_labels(pool.name, pool.instance_type, pool.labels, efa=pool.efa),
            taints=(gpu_taint,),
            allocatable=_split(
                allocatable(pool.instance_type, efa=pool.efa), pool.labels, cfg.addons.gpu_operator
            ),
            count=pool.max_size,
            mig_layout=_layout(pool.labels, cfg.addons.gpu_operator),
            mig_problem=_mig_problem(
                pool.labels,
                cfg.addons.gpu_operator,
                catalog.instance_types()[pool.instance_type].gpu_name,
                catalog.instance_types()[pool.instance_type].gpu_memory_mib_per_gpu // 1024,
            ),
            mig_key=f"labels.{MIG_CONFIG_LABEL}"
            if MIG_CONFIG_LABEL in pool.labels
            else "gpuOperator.migDefaultProfile",
            gpu=catalog.instance_types()[pool.instance_type].gpu_name,
            driver=driver,
            driver_key="nvidia_driver.preinstalled (the EKS GPU AMI's driver)",
            min_count=pool.min_size,
            template_tags=pool_template_tags(
                pool.name, pool.instance_type, pool.labels, efa=pool.efa
            )
            if cfg.cluster.autoscaler
            else None,
        )
        for pool in cfg.node_pools
    ]
    system = Nodes(
        name=f"node group {SYSTEM_POOL}",
        labels={POOL_LABEL: SYSTEM_POOL},
        taints=(),
        allocatable=allocatable(cfg.cluster.system_instance_type),
        count=cfg.cluster.system_node_count,
    )
    return (system, *pools)


UNKNOWN = float("inf")


def _count(value: Any) -> int | None:
    """A count set in an inventory (an int, or digits in a string), or None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.strip().isdigit():
        return int(value)
    return None


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split(".")[:2] if part.isdigit())


def _host_containerd(
    variables: Mapping[str, Any], containerd: str, versions: Versions | None
) -> str:
    """The containerd a host runs: Docker's pin where its site chooses that source."""
    source = variables.get("nvidia_container_toolkit_containerd_source", "distro")
    if source == "docker" and versions is not None:
        return versions.containerd_docker.version
    return containerd


def _cdi_problem(variables: Mapping[str, Any], containerd: str) -> str:
    """Why the host's runtime gives a CDI-handed GPU to no pod without a runtime class."""
    runtimes = variables.get("nvidia_container_toolkit_runtimes", ["containerd"])
    if "containerd" not in (runtimes or []) or _version(containerd) >= (1, 7):
        return ""
    if variables.get("nvidia_container_toolkit_default_runtime") is True:
        return ""
    return (
        f"containerd {containerd} has no CDI support (1.7 added it) and nvidia is not its default "
        "runtime, so the GPU the device plugin hands out through CDI reaches no container: set "
        "nvidia_container_toolkit_default_runtime: true, or give the pod runtimeClassName: nvidia"
    )


def _mig_offer(gpus: float, layout: Mapping[str, int], strategy: str) -> dict[str, float]:
    """What a node offers once every GPU is split by ``layout`` (mig-parted's devices: all)."""
    if strategy == "mixed":
        return {GPU_RESOURCE: 0.0} | {
            f"nvidia.com/mig-{profile}": count * gpus for profile, count in layout.items()
        }
    # single: each slice is one nvidia.com/gpu.
    return {GPU_RESOURCE: sum(layout.values()) * gpus}


def _layout(labels: Mapping[str, str], operator: GpuOperatorSettings | None) -> str:
    """The MIG layout a node's GPUs are split into: its nvidia.com/mig.config label (which the
    GPU Operator's MIG manager applies), else the operator's default; '' for none."""
    if operator is None or not operator.enabled or operator.mig_strategy == "none":
        return ""
    layout = labels.get(MIG_CONFIG_LABEL, operator.mig_default_profile)
    return "" if layout == MIG_ALL_DISABLED or layout not in operator.mig_profiles else layout


def _mig_label_problem(labels: Mapping[str, str], operator: GpuOperatorSettings | None) -> str:
    layout = labels.get(MIG_CONFIG_LABEL)
    if operator is None or not operator.enabled or layout is None:
        return ""
    layouts = [MIG_ALL_DISABLED, *operator.mig_profiles]
    if layout in layouts:
        return ""
    return (
        f"{MIG_CONFIG_LABEL}={layout} names no MIG layout of gpu_operator_mig_profiles"
        f"{did_you_mean(layout, layouts)} (allowed: {allowed(layouts)}): the MIG manager "
        "would fail on the host and leave its GPUs as they are"
    )


def _mig_problem(
    labels: Mapping[str, str],
    operator: GpuOperatorSettings | None,
    gpu: str,
    memory_gib: int | None,
) -> str:
    """Why the GPUs of a node cannot be split by its MIG layout; '' where they can, or where
    no layout applies."""
    layout = _layout(labels, operator)
    if not layout or operator is None:
        return ""
    return gpus.mig_layout_problem(gpu, memory_gib, layout, operator.mig_profiles[layout])


def _split(
    offer: Mapping[str, float], labels: Mapping[str, str], operator: GpuOperatorSettings | None
) -> dict[str, float]:
    """What a node offers once its MIG layout (if any) splits its GPUs, and time-slicing shares
    each nvidia.com/gpu (a whole GPU, or a slice under the single strategy) between pods."""
    layout = _layout(labels, operator)
    split = dict(offer)
    if layout and operator is not None:
        gpus = offer.get(GPU_RESOURCE, 0.0)
        split |= _mig_offer(gpus, operator.mig_profiles[layout], operator.mig_strategy)
    if operator is not None and operator.enabled and GPU_RESOURCE in split:
        split[GPU_RESOURCE] *= operator.time_slicing_replicas
    return split


def site_nodes(
    site: Site,
    containerd: str = "",
    operator: GpuOperatorSettings | None = None,
    versions: Versions | None = None,
) -> tuple[Nodes, ...]:
    """A site's Kubernetes nodes: one per GPU host, and the nodes the inventory does not list.

    A GPU host is one with ``gpuinfra_k8s_node``. Its labels and taint are what
    roles/gpu_node_registration has its kubelet register; its GPUs are the node check's
    ``gpu_node_check_expected_gpu_count`` (not checked where that is unset). A site does not
    declare CPU or memory, so those are not checked; nor the nodes without GPUs that the
    inventory leaves out (the control plane and CPU workers), which are taken to run anything
    that asks for no GPU.
    """
    gpu_taint = Taint(GPU_TAINT["key"], GPU_TAINT["value"], GPU_TAINT["effect"])
    nodes = [
        Nodes(
            name="the nodes the inventory does not list",
            labels={},
            taints=(),
            allocatable={"cpu": UNKNOWN, "memory": UNKNOWN},
            count=1,
        )
    ]
    for host in sorted(site.hosts.values(), key=lambda h: h.name):
        variables = host.vars
        if variables.get("gpuinfra_k8s_node") is not True:
            continue
        labels = dict(variables.get("gpu_node_registration_labels") or {})
        gpu_type = variables.get("gpu_node_registration_gpu_type")
        if isinstance(gpu_type, str) and gpu_type:
            labels[GPU_TYPE_LABEL] = gpu_type
        tainted = variables.get("gpu_node_registration_taint", True) is not False
        gpus = _count(variables.get("gpu_node_check_expected_gpu_count"))
        # An unknown count splits into an unknown number of each slice (inf times a count).
        offer = _split({GPU_RESOURCE: UNKNOWN if gpus is None else float(gpus)}, labels, operator)
        layout = _layout(labels, operator)
        gpu_model = gpu_type.lower() if isinstance(gpu_type, str) else ""
        mode = variables.get("gpu_node_check_mig_mode")
        source = str(variables.get("nvidia_driver_source", "distro"))
        driver = ""
        if versions is not None and source in type(versions.nvidia_driver).model_fields:
            driver = versions.driver(source).version
        nodes.append(
            Nodes(
                name=f"host {host.name}",
                labels=labels,
                taints=(gpu_taint,) if tainted else (),
                allocatable={"cpu": UNKNOWN, "memory": UNKNOWN, **offer},
                count=1,
                cdi_problem=_cdi_problem(
                    variables, _host_containerd(variables, containerd, versions)
                )
                if containerd
                else "",
                mig_layout=layout,
                expected_mig_mode=mode if isinstance(mode, str) else None,
                mig_label_problem=_mig_label_problem(labels, operator),
                mig_problem=_mig_problem(labels, operator, gpu_model, None),
                mig_key="gpu_node_registration_labels"
                if MIG_CONFIG_LABEL in labels
                else "gpu_operator_mig_default_profile",
                gpu=gpu_model,
                driver=driver,
                driver_key=f"nvidia_driver.{source}",
            )
        )
    return tuple(nodes)


# --- quantities -----------------------------------------------------------------------------------


def quantity(value: Any) -> float:
    """A Kubernetes quantity ("500m", "64Gi", 8, the exponent form "1E3") as a number."""
    text = str(value).strip()
    amount = quantity_amount(text)
    return float(amount) if amount is not None else float(text)


def _exact(value: Any) -> Decimal | float:
    """A quantity for a message, exactly: as a float, 99999999999999999999 reads 1e+20."""
    text = str(value).strip()
    if re.fullmatch(r"[0-9]+(\.[0-9]+)?", text):
        # Digits alone, read as written (a suffix's arithmetic rounds to 28 digits).
        return Decimal(text)
    amount = quantity_amount(text)
    return amount if amount is not None else quantity(value)


def _shown(resource: str, amount: float | Decimal) -> str:
    if amount == UNKNOWN:
        return "unknown"
    if resource == "memory":
        return f"{float(amount) / 1024**3:.1f}Gi"
    if isinstance(amount, Decimal):
        whole = amount.is_finite() and amount == amount.to_integral_value()
    else:
        whole = amount.is_integer()
    # A whole number in full: "1234567", not "1.23457e+06".
    return str(int(amount)) if whole else f"{amount:g}"


# --- the rules ------------------------------------------------------------------------------------


def _objects(state: State) -> Iterator[tuple[AddonRender, dict[str, Any]]]:
    for render in state.renders:
        for obj in render.objects:
            yield render, obj


def _label(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata", {})
    where = f"{meta['namespace']}/" if meta.get("namespace") else ""
    return f"{obj.get('kind')} {where}{meta.get('name')}"


def _tolerates(tolerations: Iterable[Mapping[str, Any]], taint: Taint) -> bool:
    for tol in tolerations:
        if tol.get("effect") not in (None, "", taint.effect):
            continue
        if tol.get("operator") == "Exists" and tol.get("key") in (None, "", taint.key):
            return True
        if tol.get("key") == taint.key and tol.get("value", "") == taint.value:
            return True
    return False


def _requests(pod: Mapping[str, Any]) -> dict[str, float]:
    """What one pod asks for: the sum over its containers (a limit stands in for a request)."""
    total: dict[str, float] = {}
    for container in pod.get("containers", []):
        resources = container.get("resources", {})
        asked = {**resources.get("limits", {}), **resources.get("requests", {})}
        for name, value in asked.items():
            total[name] = total.get(name, 0.0) + quantity(value)
    return total


# Labels the kubelet puts on every node this project runs (x86_64 Linux).
WELL_KNOWN_LABELS = {"kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64"}


def _misfit(pod: Mapping[str, Any], nodes: Nodes, cdi: bool = False) -> str:
    """Why a pod cannot run on ``nodes``, or ''."""
    selector = pod.get("nodeSelector") or {}
    labels = {**WELL_KNOWN_LABELS, **nodes.labels}
    wrong = {k: v for k, v in selector.items() if labels.get(k) != v}
    if wrong:
        have = ", ".join(f"{k}={labels[k]}" for k in wrong if k in labels)
        return f"labels {have or 'none of ' + ', '.join(wrong)}"
    untolerated = [
        t
        for t in nodes.taints
        if t.effect in ("NoSchedule", "NoExecute")
        and not _tolerates(pod.get("tolerations") or [], t)
    ]
    if untolerated:
        t = untolerated[0]
        return f"taint {t.key}={t.value}:{t.effect} not tolerated"
    requests = _requests(pod)
    for resource, amount in sorted(requests.items()):
        offered = nodes.allocatable.get(resource, 0.0)
        if amount > offered:
            return (
                f"{resource} {_shown(resource, amount)} requested, "
                f"{_shown(resource, offered)} allocatable"
            )
    asks_gpu = any(_gpu_resource(r) for r in requests)
    if cdi and asks_gpu and nodes.cdi_problem and not pod.get("runtimeClassName"):
        return nodes.cdi_problem
    return ""


def fit(pod: Mapping[str, Any], state: State) -> list[tuple[Nodes, str]]:
    """Each kind of node with why ``pod`` cannot run there ('' where it can): the scheduling
    rule's test, which a workload gpuinfra prints for the cluster's users meets too."""
    return [(nodes, _misfit(pod, nodes, state.cdi)) for nodes in state.nodes]


def pods_per_node(pod: Mapping[str, Any], nodes: Nodes) -> float:
    """How many such pods one node of ``nodes`` holds at once, by what they request of what it
    can allocate (UNKNOWN where nothing it requests bounds them)."""
    most = UNKNOWN
    for resource, amount in _requests(pod).items():
        offered = nodes.allocatable.get(resource, 0.0)
        if amount > 0 and offered != UNKNOWN:
            most = min(most, float(offered // amount))
    return most


def scheduling(state: State) -> list[Finding]:
    found = []
    for _render, obj in _objects(state):
        if obj.get("kind") not in WORKLOAD_KINDS:
            continue
        pod = obj.get("spec", {}).get("template", {}).get("spec", {})
        misfits = {nodes.name: reason for nodes, reason in fit(pod, state)}
        if any(reason == "" for reason in misfits.values()):
            continue
        selector = ", ".join(f"{k}={v}" for k, v in pod.get("nodeSelector", {}).items())
        why = "; ".join(f"{name}: {reason}" for name, reason in misfits.items()) or "no nodes"
        found.append(
            Finding(
                "error",
                "scheduling",
                _label(obj),
                "spec.template.spec",
                f"no declared node can run it ({why})"
                + (
                    f"; its node selector {selector} must match {state.label_hint}"
                    if selector and all(r.startswith("labels") for r in misfits.values())
                    else ""
                ),
            )
        )
    return found


@dataclass(frozen=True)
class ChartPod:
    """Where a chart's values place one of its pods. Each field lists value paths: the first
    one set wins (Volcano's per-component keys fall back to its default_* keys)."""

    component: str
    node_selector: tuple[str, ...]
    tolerations: tuple[str, ...]
    resources: tuple[str, ...] = ()
    # A path whose false value turns the component off.
    enabled: str = ""
    # A DaemonSet that must run on every GPU node (the GPU Operator's operands and the NFD
    # worker that labels the node for them); otherwise one pod that must fit some node.
    every_gpu_node: bool = False


def _volcano(part: str) -> ChartPod:
    return ChartPod(
        f"Volcano {part}",
        (f"custom.{part}_ns", "custom.default_ns"),
        (f"custom.{part}_tolerations", "custom.default_tolerations"),
        (f"custom.{part}_resources",),
        enabled=f"custom.{part}_enable",
    )


# The chart pods the add-ons' values place, by chart; value paths from each chart's values.yaml.
CHART_PODS: dict[str, tuple[ChartPod, ...]] = {
    "gpu-operator": (
        ChartPod(
            "GPU Operator controller",
            ("operator.nodeSelector",),
            ("operator.tolerations",),
            ("operator.resources",),
        ),
        ChartPod(
            "GPU Operator operands (driver, toolkit, device plugin, DCGM exporter)",
            (),
            ("daemonsets.tolerations",),
            every_gpu_node=True,
        ),
        ChartPod(
            "node-feature-discovery worker",
            ("node-feature-discovery.worker.nodeSelector",),
            ("node-feature-discovery.worker.tolerations",),
            enabled="nfd.enabled",
            every_gpu_node=True,
        ),
    ),
    "kueue": (
        ChartPod(
            "Kueue controller",
            ("controllerManager.nodeSelector",),
            ("controllerManager.tolerations",),
            ("controllerManager.manager.resources",),
        ),
    ),
    "volcano": (_volcano("scheduler"), _volcano("controller"), _volcano("admission")),
    "kube-prometheus-stack": (
        ChartPod(
            "Prometheus",
            ("prometheus.prometheusSpec.nodeSelector",),
            ("prometheus.prometheusSpec.tolerations",),
            ("prometheus.prometheusSpec.resources",),
            enabled="prometheus.enabled",
        ),
        ChartPod(
            "Alertmanager",
            ("alertmanager.alertmanagerSpec.nodeSelector",),
            ("alertmanager.alertmanagerSpec.tolerations",),
            ("alertmanager.alertmanagerSpec.resources",),
            enabled="alertmanager.enabled",
        ),
        ChartPod(
            "Grafana",
            ("grafana.nodeSelector",),
            ("grafana.tolerations",),
            ("grafana.resources",),
            enabled="grafana.enabled",
        ),
        ChartPod(
            "Prometheus Operator",
            ("prometheusOperator.nodeSelector",),
            ("prometheusOperator.tolerations",),
            ("prometheusOperator.resources",),
            enabled="prometheusOperator.enabled",
        ),
    ),
}
_UNSET = object()


def _at(values: Mapping[str, Any], path: str) -> Any:
    node: Any = values
    for key in path.split("."):
        if not isinstance(node, Mapping) or key not in node:
            return _UNSET
        node = node[key]
    return node


def _value(render: AddonRender, defaults: Mapping[str, Any], paths: Iterable[str]) -> Any:
    """The first of ``paths`` set, as Helm merges them: a map set in the add-on's values merges
    into the chart's default map; anything else replaces it."""
    for path in paths:
        ours, theirs = _at(render.values, path), _at(defaults, path)
        if isinstance(ours, Mapping) and isinstance(theirs, Mapping):
            return {**theirs, **ours}
        if ours is not _UNSET and ours is not None:
            return ours
        if theirs is not _UNSET and theirs is not None:
            return theirs
    return None


def chart_pods(state: State) -> list[Finding]:
    """The charts' own pods that the add-ons' values place: each controller fits some node, and
    each per-node agent of the GPU Operator tolerates every GPU node."""
    found = []
    for render in state.renders:
        if render.chart is None or render.chart.name not in CHART_PODS:
            continue
        defaults = chartdata.load_values(render.chart.name, render.chart.version)
        for part in CHART_PODS[render.chart.name]:
            if part.enabled and _value(render, defaults, (part.enabled,)) is False:
                continue
            pod = {
                "nodeSelector": _value(render, defaults, part.node_selector) or {},
                "tolerations": _value(render, defaults, part.tolerations) or [],
                "containers": [{"resources": _value(render, defaults, part.resources) or {}}],
            }
            where = f"{render.release} ({render.chart.name})"
            if part.every_gpu_node:
                missed = [
                    (n.name, reason)
                    for n in state.nodes
                    if any(_gpu_resource(r) for r in n.allocatable) and (reason := _misfit(pod, n))
                ]
                if missed:
                    shown = "; ".join(f"{name}: {reason}" for name, reason in missed)
                    found.append(
                        Finding(
                            "error",
                            "scheduling",
                            where,
                            part.tolerations[0],
                            f"the {part.component} cannot run on every GPU node ({shown}), so "
                            "those nodes never offer their GPUs: tolerate their taints there",
                        )
                    )
                continue
            misfits = {n.name: _misfit(pod, n) for n in state.nodes}
            if all(misfits.values()):
                why = "; ".join(f"{name}: {reason}" for name, reason in misfits.items())
                found.append(
                    Finding(
                        "error",
                        "scheduling",
                        where,
                        part.node_selector[0] if part.node_selector else part.tolerations[0],
                        f"no declared node can run the {part.component} ({why}): change its "
                        "node selector, tolerations or resources, or the nodes",
                    )
                )
    return found


def _selected(nodes: Iterable[Nodes], node_labels: Mapping[str, str]) -> list[Nodes]:
    return [n for n in nodes if all(n.labels.get(k) == v for k, v in node_labels.items())]


def quotas(state: State) -> list[Finding]:
    flavors = {
        obj["metadata"]["name"]: obj
        for _render, obj in _objects(state)
        if obj.get("kind") == "ResourceFlavor"
    }
    found: list[Finding] = []
    queued = False
    for _render, obj in _objects(state):
        if obj.get("kind") != "ClusterQueue":
            continue
        queued = True
        for g, group in enumerate(obj.get("spec", {}).get("resourceGroups", [])):
            covered = set(group.get("coveredResources", []))
            for f, flavor in enumerate(group.get("flavors", [])):
                found += _flavor_findings(obj, flavors, flavor, covered, g, f, state)
    if queued:
        found += _outside_queues(state)
    return found + _volcano_queues(state)


def _volcano_queues(state: State) -> list[Finding]:
    """Volcano queues are cluster-wide: a capability above what every node together can give is
    never reached; GPUs Kueue and Volcano both hand out are counted twice."""
    total: dict[str, float] = {}
    for nodes in state.nodes:
        for resource, amount in nodes.allocatable.items():
            total[resource] = total.get(resource, 0.0) + amount * nodes.count
    found = []
    volcano_gpus = 0.0
    for _render, obj in _objects(state):
        if obj.get("kind") != "Queue" or not str(obj.get("apiVersion", "")).startswith(
            "scheduling.volcano.sh/"
        ):
            continue
        for resource, value in sorted(obj.get("spec", {}).get("capability", {}).items()):
            amount = quantity(value)
            if _gpu_resource(resource):
                volcano_gpus += amount
            if amount > total.get(resource, 0.0):
                found.append(
                    Finding(
                        "error",
                        "quotas",
                        _label(obj),
                        f"spec.capability.{resource}",
                        f"caps {resource} at {_shown(resource, _exact(value))}, the cluster "
                        f"can give {_shown(resource, total.get(resource, 0.0))} at its largest: "
                        "lower it",
                    )
                )
    kueue_gpus = sum(q for (_flavor, r), q in _kueue_grants(state).items() if r == GPU_RESOURCE)
    gpus = total.get(GPU_RESOURCE, 0.0)
    if volcano_gpus and kueue_gpus and volcano_gpus + kueue_gpus > gpus:
        found.append(
            Finding(
                "warning",
                "quotas",
                "Volcano queues and the Kueue ClusterQueue",
                "spec.capability",
                f"together they hand out {_shown(GPU_RESOURCE, volcano_gpus + kueue_gpus)} GPUs "
                f"of {_shown(GPU_RESOURCE, gpus)}: neither sees what the other admitted, so jobs "
                "admitted by one can wait for GPUs the other holds; split the GPUs between them",
            )
        )
    return found


def _flavor_findings(
    queue: Mapping[str, Any],
    flavors: Mapping[str, Mapping[str, Any]],
    flavor: Mapping[str, Any],
    covered: set[str],
    g: int,
    f: int,
    state: State,
) -> list[Finding]:
    name = flavor.get("name", "")
    path = f"spec.resourceGroups[{g}].flavors[{f}]"
    node_labels = flavors.get(name, {}).get("spec", {}).get("nodeLabels", {})
    selected = _selected(state.nodes, node_labels)
    shown = ", ".join(f"{k}={v}" for k, v in node_labels.items())
    if not selected:
        return [
            Finding(
                "error",
                "quotas",
                _label(queue),
                path,
                f"flavor {name} selects nodes labelled {shown}, and no declared node has them: "
                f"its quota can never be used; set {shown} in {state.label_hint} or drop the "
                "flavor",
            )
        ]
    found = []
    for r, resource in enumerate(flavor.get("resources", [])):
        rname = resource.get("name", "")
        written = resource.get("nominalQuota", 0)
        nominal = quantity(written)
        capacity = sum(n.allocatable.get(rname, 0.0) * n.count for n in selected)
        if nominal > capacity:
            pools = ", ".join(f"{n.name} (up to {n.count})" for n in selected)
            found.append(
                Finding(
                    "error",
                    "quotas",
                    _label(queue),
                    f"{path}.resources[{r}].nominalQuota",
                    f"flavor {name} grants {_shown(rname, _exact(written))} "
                    f"{rname}, the nodes it selects can give {_shown(rname, capacity)} at their "
                    f"largest ({pools}): lower the quota or raise the pools' maxSize",
                )
            )
    offered = {
        k
        for n in selected
        for k, v in n.allocatable.items()
        if v and (_gpu_resource(k) or k == EFA_RESOURCE)
    }
    for rname in sorted(offered - covered):
        found.append(
            Finding(
                "warning",
                "quotas",
                _label(queue),
                f"spec.resourceGroups[{g}].coveredResources",
                f"the nodes flavor {name} selects offer {rname}, which the queue does not cover: "
                "workloads asking for it are never admitted",
            )
        )
    return found


def _gpu_resource(name: str) -> bool:
    return name == GPU_RESOURCE or name.startswith("nvidia.com/mig-")


def _kueue_grants(state: State) -> dict[tuple[str, str], float]:
    """The nominal quota of each (flavor, resource), summed over every ClusterQueue."""
    granted: dict[tuple[str, str], float] = {}
    for _render, queue in _objects(state):
        if queue.get("kind") != "ClusterQueue":
            continue
        for group in queue.get("spec", {}).get("resourceGroups", []):
            for flavor in group.get("flavors", []):
                for resource in flavor.get("resources", []):
                    key = (flavor.get("name", ""), resource.get("name", ""))
                    granted[key] = granted.get(key, 0.0) + quantity(resource.get("nominalQuota", 0))
    return granted


# KEDA's maxReplicaCount when a ScaledObject does not set it.
KEDA_MAX_REPLICAS = 100


def _most_replicas(state: State, obj: Mapping[str, Any]) -> int:
    """The most pods a Deployment, StatefulSet or Job runs at once: its replicas (a Job's
    parallelism), or the most an autoscaler that targets it may give."""
    spec = obj.get("spec", {})
    if obj.get("kind") == "Job":
        return _count(spec.get("parallelism", 1)) or 0
    most = _count(spec.get("replicas", 1)) or 0
    key = (obj.get("metadata", {}).get("namespace"), obj.get("metadata", {}).get("name"))
    for _render, scaler in _objects(state):
        scaler_spec = scaler.get("spec", {})
        target = (
            scaler.get("metadata", {}).get("namespace"),
            scaler_spec.get("scaleTargetRef", {}).get("name"),
        )
        if target != key:
            continue
        if scaler.get("kind") == "HorizontalPodAutoscaler":
            most = max(most, _count(scaler_spec.get("maxReplicas")) or 0)
        elif scaler.get("kind") == "ScaledObject":
            most = max(most, _count(scaler_spec.get("maxReplicaCount", KEDA_MAX_REPLICAS)) or 0)
    return most


@dataclass(frozen=True)
class _Outside:
    """A workload that asks for GPUs without a queue: the nodes it fits and what it holds."""

    obj: Mapping[str, Any]
    nodes: tuple[Nodes, ...]
    # Per GPU resource, the most it holds at once on those nodes.
    holds: Mapping[str, float]


def _outside(state: State) -> list[_Outside]:
    found = []
    for _render, obj in _objects(state):
        if obj.get("kind") not in WORKLOAD_KINDS:
            continue
        template = obj.get("spec", {}).get("template", {})
        pod = template.get("spec", {})
        per_pod = {r: v for r, v in _requests(pod).items() if _gpu_resource(r) and v}
        labels = {
            **obj.get("metadata", {}).get("labels", {}),
            **template.get("metadata", {}).get("labels", {}),
        }
        # The GPU Operator's smoke test holds one GPU for seconds right after an install, in
        # the operator's namespace where no queue is; counting it against quotas means nothing.
        if not per_pod or QUEUE_LABEL in labels or labels.get(_NAME_LABEL) == SMOKE_TEST:
            continue
        fits = tuple(n for n in state.nodes if not _misfit(pod, n))
        # A DaemonSet runs one pod on every node it fits.
        pods = (
            sum(n.count for n in fits)
            if obj.get("kind") == "DaemonSet"
            else _most_replicas(state, obj)
        )
        found.append(_Outside(obj, fits, {r: v * pods for r, v in per_pod.items()}))
    return found


def _outside_queues(state: State) -> list[Finding]:
    """GPU pods outside every queue take GPUs from the nodes a Kueue flavor hands out. Where
    the flavor's quotas and what those pods may hold together exceed what the nodes give, jobs
    Kueue admits wait for GPUs the pods hold: the quota should leave room for them."""
    flavors = {
        obj["metadata"]["name"]: _selected(state.nodes, obj.get("spec", {}).get("nodeLabels", {}))
        for _render, obj in _objects(state)
        if obj.get("kind") == "ResourceFlavor"
    }
    granted = _kueue_grants(state)
    outside = _outside(state)
    found = []
    for workload in outside:
        for (flavor, resource), quota in sorted(granted.items()):
            held = workload.holds.get(resource)
            nodes = flavors.get(flavor, [])
            handed_out = {n.name for n in nodes}
            if held is None or not quota or not handed_out & {n.name for n in workload.nodes}:
                continue
            # Every such pod that may land on these nodes, counted as if all of it did.
            beside = sum(
                other.holds.get(resource, 0.0)
                for other in outside
                if handed_out & {n.name for n in other.nodes}
            )
            capacity = sum(n.allocatable.get(resource, 0.0) * n.count for n in nodes)
            if quota + beside <= capacity:
                continue
            room = max(capacity - beside, 0.0)
            found.append(
                Finding(
                    "warning",
                    "quotas",
                    _label(workload.obj),
                    "spec.template.spec",
                    f"holds up to {_shown(resource, held)} {resource} outside Kueue's accounting "
                    f"(no {QUEUE_LABEL} label) on the nodes flavor {flavor} selects, which give "
                    f"{_shown(resource, capacity)} at their largest, while Kueue grants "
                    f"{_shown(resource, quota)} there: jobs it admits can wait for GPUs these "
                    f"pods hold; lower flavor {flavor}'s {resource} quota to "
                    f"{_shown(resource, room)}",
                )
            )
    return found


def autoscaling(state: State) -> list[Finding]:
    installed = {r.release for r in state.renders} | {
        r.name.replace("_", "-") for r in state.renders
    }
    found = []
    for _render, obj in _objects(state):
        if obj.get("kind") != "HorizontalPodAutoscaler":
            continue
        for m, metric in enumerate(obj.get("spec", {}).get("metrics", [])):
            servers = METRIC_SERVERS.get(metric.get("type", ""), ())
            if not installed.intersection(servers):
                found.append(
                    Finding(
                        "error",
                        "autoscaling",
                        _label(obj),
                        f"spec.metrics[{m}]",
                        f"a {metric.get('type')} metric needs {' or '.join(servers)}, which "
                        "nothing installs: the autoscaler never scales; install one or turn "
                        "autoscaling off",
                    )
                )
    return found


# Objects every cluster has: (kind, name), any namespace.
BUILT_IN = {
    ("ServiceAccount", "default"),
    ("PriorityClass", "system-node-critical"),
    ("PriorityClass", "system-cluster-critical"),
}


def _pod_references(pod: Mapping[str, Any]) -> Iterator[tuple[str, str, str]]:
    """(kind, name, path) of everything a pod spec reads from its namespace."""
    for v, volume in enumerate(pod.get("volumes") or []):
        where = f"volumes[{v}]"
        if "secret" in volume:
            yield "Secret", volume["secret"].get("secretName", ""), f"{where}.secret"
        if "configMap" in volume:
            yield "ConfigMap", volume["configMap"].get("name", ""), f"{where}.configMap"
        if "persistentVolumeClaim" in volume:
            claim = volume["persistentVolumeClaim"].get("claimName", "")
            yield "PersistentVolumeClaim", claim, f"{where}.persistentVolumeClaim"
    for c, container in enumerate([*pod.get("initContainers", []), *pod.get("containers", [])]):
        where = f"containers[{c}]"
        for e, env in enumerate(container.get("env") or []):
            source = env.get("valueFrom") or {}
            for key, kind in (("secretKeyRef", "Secret"), ("configMapKeyRef", "ConfigMap")):
                if key in source:
                    yield kind, source[key].get("name", ""), f"{where}.env[{e}].valueFrom.{key}"
        for e, env in enumerate(container.get("envFrom") or []):
            for key, kind in (("secretRef", "Secret"), ("configMapRef", "ConfigMap")):
                if key in env:
                    yield kind, env[key].get("name", ""), f"{where}.envFrom[{e}].{key}"
    if pod.get("serviceAccountName"):
        yield "ServiceAccount", pod["serviceAccountName"], "serviceAccountName"
    if pod.get("priorityClassName"):
        yield "PriorityClass", pod["priorityClassName"], "priorityClassName"
    for s, secret in enumerate(pod.get("imagePullSecrets") or []):
        yield "Secret", secret.get("name", ""), f"imagePullSecrets[{s}]"


def _value_references(values: Any, path: str = "") -> Iterator[tuple[str, str, str]]:
    """(kind, name, path) of what a chart's values read: existingSecret, the Secrets Prometheus
    and Alertmanager mount, a volume claim's StorageClass."""
    if isinstance(values, Mapping):
        for key, value in values.items():
            where = f"{path}.{key}" if path else str(key)
            if key == "existingSecret" and isinstance(value, str) and value:
                yield "Secret", value, where
            elif key == "secrets" and isinstance(value, list) and "Spec" in path:
                yield from (("Secret", str(name), where) for name in value)
            elif key == "storageClassName" and isinstance(value, str) and value:
                yield "StorageClass", value, where
            else:
                yield from _value_references(value, where)
    elif isinstance(values, list):
        for i, value in enumerate(values):
            yield from _value_references(value, f"{path}[{i}]")


def _missing_namespaces(state: State) -> list[Finding]:
    """Every namespaced object names its namespace. Both paths create every namespace an object
    names (ClusterAddons, and the add-on roles' prepare step), so naming one is enough; the order
    rules check that the object waits for it."""
    return [
        Finding(
            "error",
            "references",
            _label(obj),
            "metadata.namespace",
            f"a {obj.get('kind', '')} lives in a namespace; name one",
        )
        for _render, obj in _objects(state)
        if obj.get("kind", "") not in CLUSTER_SCOPED
        and not obj.get("metadata", {}).get("namespace")
    ]


def references(state: State) -> list[Finding]:
    """Every Secret, ConfigMap, ServiceAccount, PersistentVolumeClaim, PriorityClass and
    StorageClass an add-on reads is created by the same apply, or is a prerequisite the add-on
    declares (which the Ansible path checks before applying anything, and which cannot exist
    before an apply that creates the cluster)."""
    created = set(state.created)
    for _render, obj in _objects(state):
        meta = obj.get("metadata", {})
        namespace = "" if obj.get("kind") in CLUSTER_SCOPED else meta.get("namespace", "")
        created.add((str(obj.get("kind")), namespace, str(meta.get("name"))))
    for render in state.renders:
        if state.new_cluster:
            created.update(("Secret", s.namespace, s.name) for s in render.secrets)
    found = _missing_namespaces(state)
    for render in state.renders:
        external = {
            (p.kind, p.namespace, p.name): p
            for p in (render.prerequisites if state.new_cluster else render.site_prerequisites())
        }
        refs = [
            (render.namespace, f"{render.release} values", r)
            for r in _value_references(render.values)
        ]
        for obj in render.objects:
            if obj.get("kind") in WORKLOAD_KINDS:
                pod = obj.get("spec", {}).get("template", {}).get("spec", {})
                namespace = obj.get("metadata", {}).get("namespace", "")
                refs += [(namespace, _label(obj), r) for r in _pod_references(pod)]
        for namespace, reader, (kind, name, path) in refs:
            key = (kind, "" if kind in CLUSTER_SCOPED else namespace, name)
            if key in created or (kind, name) in BUILT_IN:
                continue
            prerequisite = external.get(key)
            shown = f"{kind} {key[1] + '/' if key[1] else ''}{name}"
            if prerequisite is not None and not state.new_cluster:
                continue  # the role's preflight checks it
            if prerequisite is not None:
                message = (
                    f"reads {shown}, which no apply of gpuinfra creates, and this apply creates "
                    "the cluster: it cannot exist before the first run; let gpuinfra create it "
                    "or leave the setting unset"
                )
            else:
                message = (
                    f"reads {shown}, which nothing in this apply creates and no add-on declares "
                    "as a prerequisite: on a new cluster its pods never start"
                )
            found.append(Finding("error", "references", reader, path, message))
    return found


def node_checks(state: State) -> list[Finding]:
    """The node check expects the MIG mode the GPU Operator gives the node's GPUs, and the
    layout a host's label names is one the GPU Operator has (a stack's config check refuses
    a node pool's)."""
    found = []
    for nodes in state.nodes:
        if nodes.mig_label_problem:
            found.append(
                Finding(
                    "error",
                    "node_checks",
                    nodes.name,
                    "gpu_node_registration_labels",
                    nodes.mig_label_problem,
                )
            )
            continue
        expected = nodes.expected_mig_mode
        if nodes.mig_layout and expected == "disabled":
            message = (
                f"the GPU Operator splits its GPUs by the MIG layout {nodes.mig_layout}, and its "
                "node check expects MIG disabled: every check of it would fail; set "
                "gpu_node_check_mig_mode: enabled (or any) for it, or label it "
                f"{MIG_CONFIG_LABEL}={MIG_ALL_DISABLED}"
            )
        elif not nodes.mig_layout and expected == "enabled":
            message = (
                "its node check expects MIG enabled, and no MIG layout applies to it: set "
                f"gpu_node_check_mig_mode: disabled, or label it {MIG_CONFIG_LABEL}=<layout>"
            )
        else:
            continue
        found.append(
            Finding("error", "node_checks", nodes.name, "gpu_node_check_mig_mode", message)
        )
    return found


def mig(state: State) -> list[Finding]:
    """Each GPU node's MIG layout is one its GPU model can take: a model with MIG, profiles it
    offers, no more of each than one GPU holds, and no more slices than it has. mig-parted
    checks placement on the node itself; a layout it refuses leaves the GPUs whole, so what the
    layout promises (nvidia.com/mig-* or the sliced nvidia.com/gpu count) never appears."""
    return [
        Finding("error", "mig", nodes.name, nodes.mig_key, nodes.mig_problem)
        for nodes in state.nodes
        if nodes.mig_problem
    ]


def _image_tag(pod: Mapping[str, Any]) -> str:
    images = [c.get("image", "") for c in pod.get("containers", [])]
    return next((i.rpartition(":")[2] for i in images if ":" in i), "")


def drivers(state: State) -> list[Finding]:
    """Each GPU node's driver supports its GPU model, and runs the CUDA of the NGC images
    (Triton's) that can be scheduled on it."""
    found = []
    for nodes in state.nodes:
        branch = versions_mod.parse(nodes.driver)[:1]
        needed = gpus.GPU_MIN_BRANCH.get(nodes.gpu)
        if branch and needed and branch[0] < needed:
            found.append(
                Finding(
                    "error",
                    "drivers",
                    nodes.name,
                    nodes.driver_key,
                    f"the {nodes.gpu.upper()} needs driver branch {needed} or newer "
                    f"({gpus.GPU_TABLE_SOURCE}); the pinned build is {nodes.driver}: pin a "
                    "newer branch for it, or use another install source",
                )
            )
    for _render, obj in _objects(state):
        if obj.get("kind") not in WORKLOAD_KINDS:
            continue
        pod = obj.get("spec", {}).get("template", {}).get("spec", {})
        needs = gpus.image_driver(_image_tag(pod))
        if needs is None or not any(_gpu_resource(r) for r in _requests(pod)):
            continue
        for nodes in state.nodes:
            if not nodes.driver or _misfit(pod, nodes):
                continue
            if not gpus.runs_image(nodes.driver, nodes.gpu, needs):
                forward = ", ".join(f"{b}+" for b in needs.forward_compatible)
                found.append(
                    Finding(
                        "error",
                        "drivers",
                        _label(obj),
                        "spec.template.spec.containers[].image",
                        f"its image {_image_tag(pod)} is built on CUDA {needs.cuda}, which needs "
                        f"driver {needs.native} or newer (on a data center GPU also {forward}; "
                        f"{gpus.IMAGE_TABLE_SOURCE}); {nodes.name} runs {nodes.driver} "
                        f"({nodes.driver_key}) on "
                        f"{('a ' + nodes.gpu.upper()) if nodes.gpu else 'a GPU of unknown model'}: "
                        "pin a newer driver, or select other nodes",
                    )
                )
    return found


def _group(api_version: str) -> str:
    return api_version.rpartition("/")[0] or "core"


def play_order(state: State) -> list[Finding]:
    """On the Ansible path each role applies its custom resources after its own chart; a kind
    whose CRD another add-on's chart installs needs that add-on's role earlier in the play."""
    if not state.play:
        return []
    position = {role: i for i, role in enumerate(state.play)}
    owners: dict[tuple[str, str], str] = {}
    for render in state.renders:
        if render.chart is not None:
            for api_version, kinds in chartdata.load_crds(
                render.chart.name, render.chart.version
            ).items():
                owners.update({(api_version, kind): render.name for kind in kinds})
    found = []
    for render in state.renders:
        if render.name not in position:
            found.append(
                Finding(
                    "error",
                    "order",
                    f"role {render.name}",
                    ADDONS_PLAYBOOK,
                    f"the add-on is enabled and {ADDONS_PLAYBOOK} does not run its role",
                )
            )
            continue
        for obj in render.objects:
            api_version = str(obj.get("apiVersion", ""))
            if _group(api_version) in CLUSTER_GROUPS:
                continue
            owner = owners.get((api_version, str(obj.get("kind"))))
            if owner is None:
                message = (
                    f"no add-on enabled here installs the CRD of {api_version} "
                    f"{obj.get('kind')}: enable the add-on whose chart carries it"
                )
            elif position.get(owner, len(position)) > position[render.name]:
                message = (
                    f"role {render.name} applies it before role {owner} installs its CRD: the API "
                    f"server does not know the kind yet; run {owner} first in {ADDONS_PLAYBOOK}"
                )
            else:
                continue
            found.append(Finding("error", "order", _label(obj), "apiVersion", message))
    return found


def _pod(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    spec: Mapping[str, Any] = obj.get("spec", {}).get("template", {}).get("spec", {})
    return spec


def idle_reclaim(state: State) -> list[Finding]:
    """KEDA's ScaledObjects read the Prometheus the Prometheus stack creates, target a GPU
    Deployment no other autoscaler drives, and (on a stack) nodes follow them to zero."""
    found: list[Finding] = []

    def flag(severity: Severity, where: str, path: str, message: str) -> None:
        found.append(Finding(severity, "idle_reclaim", where, path, message))

    prometheus = next((r for r in state.renders if r.name == "prometheus_stack"), None)
    deployments = {
        (o["metadata"].get("namespace"), o["metadata"]["name"]): o
        for _r, o in _objects(state)
        if o.get("kind") == "Deployment"
    }
    hpa_targets = {
        (o["metadata"].get("namespace"), o["spec"]["scaleTargetRef"]["name"])
        for _r, o in _objects(state)
        if o.get("kind") == "HorizontalPodAutoscaler"
    }
    scaled = [o for _r, o in _objects(state) if o.get("kind") == "ScaledObject"]
    for obj in scaled:
        label = _label(obj)
        namespace = obj["metadata"].get("namespace")
        for t, trigger in enumerate(obj["spec"].get("triggers", [])):
            if trigger.get("type") != "prometheus":
                continue
            address = trigger.get("metadata", {}).get("serverAddress", "")
            path = f"spec.triggers[{t}].metadata.serverAddress"
            if prometheus is None:
                flag(
                    "error",
                    label,
                    path,
                    f"reads {address}, but the Prometheus stack add-on is not enabled: "
                    "the trigger never gets a value; enable prometheusStack",
                )
            elif address != prometheus_address(prometheus.namespace):
                flag(
                    "error",
                    label,
                    path,
                    f"reads {address}, but the Prometheus stack's Prometheus is "
                    f"{prometheus_address(prometheus.namespace)}; set keda "
                    "prometheusAddress to it",
                )
        target = obj["spec"]["scaleTargetRef"]["name"]
        key = (namespace, target)
        path = "spec.scaleTargetRef"
        if key in hpa_targets:
            flag(
                "error",
                label,
                path,
                f"Deployment {namespace}/{target} already has a HorizontalPodAutoscaler; "
                "two autoscalers fight over its replicas: turn one off",
            )
        if key not in deployments:
            flag(
                "warning",
                label,
                path,
                f"Deployment {namespace}/{target} is not one gpuinfra applies: it must "
                "exist (with GPUs) when KEDA starts, or the ScaledObject stays not Ready",
            )
        elif not any(_gpu_resource(r) for r in _requests(_pod(deployments[key]))):
            flag(
                "error",
                label,
                path,
                f"Deployment {namespace}/{target} requests no GPU: its GPU utilisation is "
                "never above the threshold, so it would always be scaled to zero",
            )
    if scaled and state.autoscaler is False:
        flag(
            "warning",
            "ScaledObjects",
            "",
            "idle Deployments scale to zero but their GPU nodes stay: set "
            "cluster.autoscaler: true so that the pools follow",
        )
    return found


# The policy rule (gpuinfra/review/policy.py) that keeps idle reclaim out of prod.
NO_IDLE_RECLAIM_IN_PROD = "no-idle-reclaim-in-prod"


def logs(state: State) -> list[Finding]:
    """Alloy pushes to the endpoint the Loki add-on creates, and Grafana's Loki data source is
    that add-on's; both need it enabled."""
    loki = next((r for r in state.renders if r.name == "loki"), None)
    found = _grafana_loki(state, loki)
    alloy = next((r for r in state.renders if r.name == "alloy"), None)
    if alloy is None:
        return found
    return found + _alloy_loki(alloy, loki)


def _grafana_loki(state: State, loki: AddonRender | None) -> list[Finding]:
    prometheus = next((r for r in state.renders if r.name == "prometheus_stack"), None)
    sources = (
        prometheus.values.get("grafana", {}).get("additionalDataSources", []) if prometheus else []
    )
    found: list[Finding] = []
    for i, source in enumerate(sources):
        if source.get("type") != "loki":
            continue
        url = source.get("url", "")
        label = f"prometheus_stack/{prometheus.release if prometheus else ''}"
        path = f"grafana.additionalDataSources[{i}].url"
        if loki is None:
            found.append(
                Finding(
                    "warning",
                    "logs",
                    label,
                    path,
                    f"Grafana's Loki data source is {url}, but the Loki add-on is not enabled: "
                    "it must be a Loki you run",
                )
            )
        elif url != loki_query_address(loki.namespace):
            found.append(
                Finding(
                    "error",
                    "logs",
                    label,
                    path,
                    f"Grafana's Loki data source is {url}, but the Loki add-on serves "
                    f"{loki_query_address(loki.namespace)}; set prometheusStack lokiDatasourceUrl "
                    "to it",
                )
            )
    return found


def _alloy_loki(alloy: AddonRender, loki: AddonRender | None) -> list[Finding]:
    address = _alloy_push_address(alloy)
    label = f"alloy/{alloy.release}"
    path = "alloy.lokiPushAddress"
    if loki is None:
        return [
            Finding(
                "error",
                "logs",
                label,
                path,
                f"pushes to {address}, but the Loki add-on is not enabled: every log line is "
                "dropped; enable loki, or point Alloy at a Loki you run",
            )
        ]
    expected = loki_push_address(loki.namespace)
    if address != expected:
        return [
            Finding(
                "error",
                "logs",
                label,
                path,
                f"pushes to {address}, but the Loki add-on accepts logs at {expected}; set "
                "alloy lokiPushAddress to it",
            )
        ]
    return []


def _alloy_push_address(render: AddonRender) -> str:
    """The URL of the loki.write endpoint in Alloy's rendered configuration."""
    content = str(render.values.get("alloy", {}).get("configMap", {}).get("content", ""))
    match = re.search(r'loki\.write "[^"]+" \{\s*endpoint \{\s*url\s*=\s*"([^"]*)"', content)
    return match.group(1) if match else ""


def no_idle_reclaim_in_prod(state: State) -> list[Finding]:
    """prod keeps its replicas: nothing there is scaled to zero for being idle."""
    if state.environment != "prod":
        return []
    return [
        Finding(
            "error",
            NO_IDLE_RECLAIM_IN_PROD,
            _label(o),
            "",
            f"prod workloads are never scaled to zero for being idle (policy rule "
            f"{NO_IDLE_RECLAIM_IN_PROD}); list only dev and test Deployments, in a dev or test "
            "stack or site",
        )
        for _r, o in _objects(state)
        if o.get("kind") == "ScaledObject"
    ]


def _template_nodes(nodes: Nodes) -> Nodes | None:
    """The pool as the autoscaler sees it without a node: from its node-template tags."""
    if nodes.template_tags is None:
        return None
    labels, taints, resources = autoscaler.template(nodes.template_tags)
    return Nodes(
        name=nodes.name,
        labels=labels,
        taints=tuple(Taint(*t) for t in taints),
        # CPU and memory come from the instance type; GPUs only from the tag.
        allocatable={
            **{k: v for k, v in nodes.allocatable.items() if not _gpu_resource(k)},
            **resources,
        },
        count=nodes.count,
    )


def scale_from_zero(state: State) -> list[Finding]:
    """A pool that may have no node grows only through the autoscaler, which must tell from the
    pool's node-template tags that the pods waiting for it would fit."""
    found: list[Finding] = []
    pods = [(o, _pod(o)) for _r, o in _objects(state) if o.get("kind") in WORKLOAD_KINDS]
    for nodes in state.nodes:
        if nodes.min_count != 0:
            continue
        if state.autoscaler is False:
            if any(_gpu_resource(r) for r in nodes.allocatable):
                found.append(
                    Finding(
                        "warning",
                        "scale_from_zero",
                        nodes.name,
                        "minSize",
                        "minSize 0 and no autoscaler: the pool only grows when someone raises "
                        "its desired size; set cluster.autoscaler: true",
                    )
                )
            continue
        seen = _template_nodes(nodes)
        if seen is None:
            continue
        for obj, pod in pods:
            if _misfit(pod, nodes, state.cdi):
                continue
            why = _misfit(pod, seen)
            if why:
                found.append(
                    Finding(
                        "error",
                        "scale_from_zero",
                        _label(obj),
                        "spec.template.spec",
                        f"fits {nodes.name}, but its node-template tags say otherwise ({why}): "
                        "with no node there the autoscaler never grows the pool for it",
                    )
                )
    return found


RULES = (
    references,
    idle_reclaim,
    no_idle_reclaim_in_prod,
    logs,
    scale_from_zero,
    scheduling,
    chart_pods,
    quotas,
    autoscaling,
    node_checks,
    mig,
    drivers,
    play_order,
)


def check(state: State) -> list[Finding]:
    """Every finding of every rule, errors first."""
    found = [finding for rule in RULES for finding in rule(state)]
    return sorted(found, key=lambda f: (f.severity != "error", f.rule, f.object, f.path))


def stack_state(
    cfg: StackConfig, renders: Iterable[AddonRender], versions: Versions | None = None
) -> State:
    # The StorageClass GpuCluster creates (components/cluster.py), the cluster default.
    storage_class = ("StorageClass", "", f"{cfg.storage.ebs_volume_type}-encrypted")
    return State(
        renders=tuple(renders),
        nodes=stack_nodes(cfg, versions),
        new_cluster=True,
        created=frozenset({storage_class}),
        autoscaler=cfg.cluster.autoscaler,
        environment=cfg.environment,
    )


def cdi_enabled(renders: Iterable[AddonRender]) -> bool:
    """Whether the GPU Operator, if installed, hands GPUs out through CDI (its chart's default)."""
    for render in renders:
        if render.name == "gpu_operator" and render.chart is not None:
            default = chartdata.load_values(render.chart.name, render.chart.version).get("cdi", {})
            return bool({**default, **render.values.get("cdi", {})}.get("enabled", False))
    return False


def play_roles(playbook: Path) -> tuple[str, ...]:
    """The roles a playbook's plays run, in order."""
    plays = load_yaml(playbook) or []
    roles: list[str] = []
    for play in plays:
        for role in play.get("roles", []):
            roles.append(role["role"] if isinstance(role, dict) else str(role))
    return tuple(roles)


def site_state(
    site: Site,
    renders: Iterable[AddonRender],
    versions: Versions | None = None,
    play: Iterable[str] = (),
    settings: AddonsSettings | None = None,
) -> State:
    """The site's state; its add-on ``settings`` are the hosts' role variables' unless given."""
    renders = tuple(renders)
    pins = versions or versions_mod.pinned()
    return State(
        renders=renders,
        nodes=site_nodes(
            site,
            containerd=pins.containerd.version,
            operator=(settings or addons.settings_from_site(site)).gpu_operator,
            versions=pins,
        ),
        cdi=cdi_enabled(renders),
        environment=site.environment or "",
        label_hint="a GPU host's labels (gpu_node_registration_gpu_type, gpu_node_registration_labels)",
        play=tuple(play),
    )


def enforce(findings: Iterable[Finding], file: str) -> list[Finding]:
    """Raise ConfigError (exit 2) naming every error; return the warnings."""
    findings = list(findings)
    errors = [f for f in findings if f.severity == "error"]
    if errors:
        raise ConfigError(Problem(file, f"{f.object} {f.path}", f.message) for f in errors)
    return [f for f in findings if f.severity == "warning"]


def check_stack(
    cfg: StackConfig,
    file: str,
    *,
    renders: Iterable[AddonRender] | None = None,
    versions: Versions | None = None,
) -> list[Finding]:
    """The stack's findings: raises on an error, returns the warnings."""
    if renders is None:
        renders = addons.render_all(cfg.addons, versions=versions)
    return enforce(check(stack_state(cfg, renders, versions)), file)


def check_site(
    site: Site,
    file: str,
    *,
    renders: Iterable[AddonRender],
    settings: AddonsSettings | None = None,
) -> list[Finding]:
    """The site's findings: raises on an error, returns the warnings."""
    # The play is the repository's: outside one (a site checked on its own) there is none to read.
    root = os.environ.get("GPUINFRA_ROOT") or paths.find_root(Path.cwd())
    playbook = Path(root) / ADDONS_PLAYBOOK if root else None
    play = play_roles(playbook) if playbook is not None and playbook.is_file() else ()
    return enforce(check(site_state(site, renders, play=play, settings=settings)), file)


def check_play(settings: AddonsSettings, site: Site, file: str) -> list[Finding]:
    """``check_site`` on what the Ansible add-on play resolved: the add-on settings of its
    variables (addons.settings_from_play) and the inventory's hosts with their variables
    (site.resolved_site). Raises ConfigError naming every error; returns the warnings.

    An inventory without hosts (the add-ons applied to a cluster whose nodes it does not
    list) declares no node to check the add-ons against, so nothing is checked here.
    """
    if not site.hosts:
        return []
    renders = addons.render_all(settings)
    return check_site(site, file, renders=renders, settings=settings)


@dataclass(frozen=True)
class CheckedSite:
    """A site as ``config check --site`` and ``plan --site`` both validate it."""

    site: Site
    renders: list[AddonRender]
    warnings: list[Finding]


def load_checked_site(
    path: Path, *, roles_dir: Path | None = None, versions: Versions | None = None
) -> CheckedSite:
    """Read a site, its role variables, its add-on settings and renders, and check the whole:
    one function, so that ``config check --site`` refuses exactly what ``plan --site`` does."""
    site = site_mod.load_site(path, roles_dir)
    renders = addons.render_all(addons.settings_from_site(site), versions=versions)
    warnings = check_site(site, display_path(path), renders=renders)
    return CheckedSite(site=site, renders=renders, warnings=warnings)

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

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from gpuinfra import addons, catalog, chartdata
from gpuinfra import versions as versions_mod
from gpuinfra.addons.base import GPU_RESOURCE, GPU_TAINT, GPU_TYPE_LABEL, AddonRender
from gpuinfra.addons.gpu_operator import MIG_ALL_DISABLED, SMOKE_TEST, GpuOperatorSettings
from gpuinfra.config import POOL_LABEL, SYSTEM_POOL, StackConfig
from gpuinfra.errors import ConfigError, Problem
from gpuinfra.site import Site
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


@dataclass(frozen=True)
class State:
    renders: tuple[AddonRender, ...]
    nodes: tuple[Nodes, ...]
    # Where a label on nodes is set, for the messages.
    label_hint: str = "a node pool's labels"
    # Whether the GPU Operator's device plugin hands devices out through CDI.
    cdi: bool = False


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


# The CPU node group's families (config.SYSTEM_INSTANCE_FAMILIES) give 2 vCPUs per "large" step
# and a fixed memory per vCPU: 4 GiB for m, 2 GiB for c, 8 GiB for r.
_MIB_PER_VCPU = {"m": 4096, "c": 2048, "r": 8192}


def _size(instance_type: str) -> tuple[int, int, int]:
    """vCPUs, memory in MiB and GPUs of ``instance_type``."""
    gpu = catalog.instance_types().get(instance_type)
    if gpu is not None:
        return gpu.vcpu, gpu.memory_mib, gpu.gpu_count
    family, _, size = instance_type.partition(".")
    steps = 1 if size == "large" else 2 * int(size.removesuffix("xlarge") or 1)
    vcpu = 2 * steps
    return vcpu, vcpu * _MIB_PER_VCPU[family[0]], 0


def allocatable(instance_type: str) -> dict[str, float]:
    """What one node of ``instance_type`` can give pods: CPU cores, memory bytes, GPUs."""
    vcpu, memory_mib, gpus = _size(instance_type)
    reserved_mib = 255 + 11 * MAX_PODS + 100
    offer = {
        "cpu": vcpu - kube_reserved_cpu(vcpu),
        "memory": float((memory_mib - reserved_mib) * MIB),
    }
    if gpus:
        offer[GPU_RESOURCE] = float(gpus)
    return offer


def pool_labels(name: str, instance_type: str, extra: Mapping[str, str]) -> dict[str, str]:
    """The labels a GPU node pool's nodes carry (the node pool component sets these)."""
    spec = catalog.instance_types()[instance_type]
    return {**extra, GPU_TYPE_LABEL: spec.gpu_name, POOL_LABEL: name}


def stack_nodes(cfg: StackConfig) -> tuple[Nodes, ...]:
    """The stack's node pools, and the CPU node group gpuinfra adds beside them."""
    gpu_taint = Taint(GPU_TAINT["key"], GPU_TAINT["value"], GPU_TAINT["effect"])
    pools = [
        Nodes(
            name=f"node pool {pool.name}",
            labels=pool_labels(pool.name, pool.instance_type, pool.labels),
            taints=(gpu_taint,),
            allocatable=allocatable(pool.instance_type),
            count=pool.max_size,
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


MIG_CONFIG_LABEL = "nvidia.com/mig.config"


def _mig_offer(gpus: float, layout: Mapping[str, int], strategy: str) -> dict[str, float]:
    """What a node offers once every GPU is split by ``layout`` (mig-parted's devices: all)."""
    if strategy == "mixed":
        return {GPU_RESOURCE: 0.0} | {
            f"nvidia.com/mig-{profile}": count * gpus for profile, count in layout.items()
        }
    # single: each slice is one nvidia.com/gpu.
    return {GPU_RESOURCE: sum(layout.values()) * gpus}


def site_nodes(
    site: Site, containerd: str = "", operator: GpuOperatorSettings | None = None
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
        offer: dict[str, float] = {GPU_RESOURCE: UNKNOWN if gpus is None else float(gpus)}
        layout = ""
        if operator is not None and operator.enabled and operator.mig_strategy != "none":
            layout = labels.get(MIG_CONFIG_LABEL, operator.mig_default_profile)
            if layout == MIG_ALL_DISABLED or layout not in operator.mig_profiles:
                layout = ""
            elif gpus is not None:
                offer = _mig_offer(gpus, operator.mig_profiles[layout], operator.mig_strategy)
        mode = variables.get("gpu_node_check_mig_mode")
        nodes.append(
            Nodes(
                name=f"host {host.name}",
                labels=labels,
                taints=(gpu_taint,) if tainted else (),
                allocatable={"cpu": UNKNOWN, "memory": UNKNOWN, **offer},
                count=1,
                cdi_problem=_cdi_problem(variables, containerd) if containerd else "",
                mig_layout=layout,
                expected_mig_mode=mode if isinstance(mode, str) else None,
            )
        )
    return tuple(nodes)


# --- quantities -----------------------------------------------------------------------------------

_SUFFIXES = {
    "Ki": 1024,
    "Mi": 1024**2,
    "Gi": 1024**3,
    "Ti": 1024**4,
    "Pi": 1024**5,
    "k": 1000,
    "M": 1000**2,
    "G": 1000**3,
    "T": 1000**4,
    "P": 1000**5,
    "m": 0.001,
}


def quantity(value: Any) -> float:
    """A Kubernetes quantity ("500m", "64Gi", 8) as a number."""
    text = str(value).strip()
    for suffix in sorted(_SUFFIXES, key=len, reverse=True):
        if text.endswith(suffix):
            return float(text[: -len(suffix)]) * _SUFFIXES[suffix]
    return float(text)


def _shown(resource: str, amount: float) -> str:
    if amount == UNKNOWN:
        return "unknown"
    if resource == "memory":
        return f"{amount / 1024**3:.1f}Gi"
    return f"{amount:g}"


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


def _misfit(pod: Mapping[str, Any], nodes: Nodes, cdi: bool = False) -> str:
    """Why a pod cannot run on ``nodes``, or ''."""
    selector = pod.get("nodeSelector", {})
    wrong = {k: v for k, v in selector.items() if nodes.labels.get(k) != v}
    if wrong:
        have = ", ".join(f"{k}={nodes.labels[k]}" for k in wrong if k in nodes.labels)
        return f"labels {have or 'none of ' + ', '.join(wrong)}"
    untolerated = [
        t
        for t in nodes.taints
        if t.effect in ("NoSchedule", "NoExecute") and not _tolerates(pod.get("tolerations", []), t)
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


def scheduling(state: State) -> list[Finding]:
    found = []
    for _render, obj in _objects(state):
        if obj.get("kind") not in WORKLOAD_KINDS:
            continue
        pod = obj.get("spec", {}).get("template", {}).get("spec", {})
        misfits = {nodes.name: _misfit(pod, nodes, state.cdi) for nodes in state.nodes}
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
                        f"caps {resource} at {_shown(resource, amount)}, the cluster can give "
                        f"{_shown(resource, total.get(resource, 0.0))} at its largest: lower it",
                    )
                )
    kueue_gpus = sum(
        quantity(resource.get("nominalQuota", 0))
        for _render, obj in _objects(state)
        if obj.get("kind") == "ClusterQueue"
        for group in obj.get("spec", {}).get("resourceGroups", [])
        for flavor in group.get("flavors", [])
        for resource in flavor.get("resources", [])
        if resource.get("name") == GPU_RESOURCE
    )
    gpus = total.get(GPU_RESOURCE, 0.0)
    if volcano_gpus and kueue_gpus and volcano_gpus + kueue_gpus > gpus:
        found.append(
            Finding(
                "warning",
                "quotas",
                "Volcano queues and the Kueue ClusterQueue",
                "spec.capability",
                f"together they hand out {volcano_gpus + kueue_gpus:g} GPUs of {gpus:g}: neither "
                "sees what the other admitted, so jobs admitted by one can wait for GPUs the "
                "other holds; split the GPUs between them",
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
        nominal = quantity(resource.get("nominalQuota", 0))
        capacity = sum(n.allocatable.get(rname, 0.0) * n.count for n in selected)
        if nominal > capacity:
            pools = ", ".join(f"{n.name} (up to {n.count})" for n in selected)
            found.append(
                Finding(
                    "error",
                    "quotas",
                    _label(queue),
                    f"{path}.resources[{r}].nominalQuota",
                    f"flavor {name} grants {_shown(rname, nominal)} {rname}, the nodes it "
                    f"selects can give {_shown(rname, capacity)} at their largest ({pools}): "
                    "lower the quota or raise the pools' maxSize",
                )
            )
    offered = {k for n in selected for k, v in n.allocatable.items() if v and _gpu_resource(k)}
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


def _outside_queues(state: State) -> list[Finding]:
    found = []
    for _render, obj in _objects(state):
        if obj.get("kind") not in WORKLOAD_KINDS:
            continue
        template = obj.get("spec", {}).get("template", {})
        asks_gpu = any(_gpu_resource(r) for r in _requests(template.get("spec", {})))
        labels = {
            **obj.get("metadata", {}).get("labels", {}),
            **template.get("metadata", {}).get("labels", {}),
        }
        # The GPU Operator's smoke test holds one GPU for seconds right after an install, in
        # the operator's namespace where no queue is; counting it against quotas means nothing.
        if labels.get(_NAME_LABEL) == SMOKE_TEST:
            continue
        if asks_gpu and QUEUE_LABEL not in labels:
            found.append(
                Finding(
                    "warning",
                    "quotas",
                    _label(obj),
                    "metadata.labels",
                    f"asks for GPUs outside Kueue's accounting (no {QUEUE_LABEL} label): "
                    "the ClusterQueue's quota does not count them",
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


def references(state: State) -> list[Finding]:
    """Every namespaced object names its namespace. Both paths create every namespace an object
    names (ClusterAddons, and the add-on roles' prepare step), so naming one is enough; the order
    rule (gpuinfra/review/ordering.py) checks that the object waits for it."""
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


def node_checks(state: State) -> list[Finding]:
    """The node check expects the MIG mode the GPU Operator gives the node's GPUs."""
    found = []
    for nodes in state.nodes:
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


RULES = (references, scheduling, quotas, autoscaling, node_checks)


def check(state: State) -> list[Finding]:
    """Every finding of every rule, errors first."""
    found = [finding for rule in RULES for finding in rule(state)]
    return sorted(found, key=lambda f: (f.severity != "error", f.rule, f.object, f.path))


def stack_state(cfg: StackConfig, renders: Iterable[AddonRender]) -> State:
    return State(renders=tuple(renders), nodes=stack_nodes(cfg))


def cdi_enabled(renders: Iterable[AddonRender]) -> bool:
    """Whether the GPU Operator, if installed, hands GPUs out through CDI (its chart's default)."""
    for render in renders:
        if render.name == "gpu_operator" and render.chart is not None:
            default = chartdata.load_values(render.chart.name, render.chart.version).get("cdi", {})
            return bool({**default, **render.values.get("cdi", {})}.get("enabled", False))
    return False


def site_state(
    site: Site, renders: Iterable[AddonRender], versions: Versions | None = None
) -> State:
    renders = tuple(renders)
    pins = versions or versions_mod.pinned()
    return State(
        renders=renders,
        nodes=site_nodes(
            site,
            containerd=pins.containerd.version,
            operator=addons.settings_from_site(site).gpu_operator,
        ),
        cdi=cdi_enabled(renders),
        label_hint="a GPU host's labels (gpu_node_registration_gpu_type, gpu_node_registration_labels)",
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
    return enforce(check(stack_state(cfg, renders)), file)


def check_site(site: Site, file: str, *, renders: Iterable[AddonRender]) -> list[Finding]:
    """The site's findings: raises on an error, returns the warnings."""
    return enforce(check(site_state(site, renders)), file)

"""Workload templates the cluster's users start from: a training Job queued through Kueue.

The Job is suspended until Kueue admits it through the team's LocalQueue. It asks for whole GPUs
of one GPU type, tolerates the GPU taint, sizes /dev/shm for DataLoader workers and sets NCCL for
the network between the nodes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

from pydantic.alias_generators import to_camel

from gpuinfra import addons, catalog, config, gpus, integrity
from gpuinfra import site as site_mod
from gpuinfra.addons.base import (
    DNS_LABEL,
    EFA_RESOURCE,
    GPU_RESOURCE,
    GPU_TOLERATION,
    GPU_TYPE_LABEL,
    LABEL_VALUE,
    LABEL_VALUE_ALLOWED,
    PROJECT_LABEL,
    TEAM_LABEL,
    quantity_amount,
)
from gpuinfra.addons.kueue import (
    CLUSTER_NAMESPACES_REFUSED,
    KueueFlavor,
    KueueSettings,
    cluster_namespace,
)
from gpuinfra.errors import InputInvalid, excerpt
from gpuinfra.loading import display_path
from gpuinfra.suggest import allowed, did_you_mean
from gpuinfra.versions import FLOATING_WORDS

NETWORKS = ("efa", "infiniband", "roce", "tcp")
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
# A host carries at most 16 GPUs (8 on an HGX board, 16 on the largest DGX), as the site check's
# bound on gpu_node_check_expected_gpu_count says.
MAX_GPUS_PER_NODE = 16
# An indexed Job's completions and parallelism (the node count): Kubernetes refuses a
# parallelism above 100,000 in completion mode Indexed, far inside their int32 fields.
MAX_NODES = 100_000
# /dev/shm's size limit: at least 1Mi (below, DataLoader workers cannot share a batch) and at
# most 1Ti (more than a GPU node's memory holds, which the volume is counted against).
MIN_SHM = Decimal(1024) ** 2
MAX_SHM = Decimal(1024) ** 4
SHM_ALLOWED = "1Mi to 1Ti, a number with a suffix such as 64Gi, 512Mi or 64G"

# A DNS-1035 label: a Service's name, which the Job's name is too.
_DNS_1035_LABEL = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
MAX_LABEL = 63
# A container image reference: [host[:port]/]path[:tag][@digest], as the distribution
# reference grammar has it.
_IMAGE = re.compile(
    r"(?P<name>(?:[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?(?:\.[a-zA-Z0-9](?:[a-zA-Z0-9-]*"
    r"[a-zA-Z0-9])?)*(?::[0-9]+)?/)?[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
    r"(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*)"
    r"(?::(?P<tag>[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}))?"
    r"(?:@(?P<digest>sha256:[0-9a-f]{64}))?"
)
# The distribution reference's bound on a repository name, the registry's host included: a
# registry or the container runtime refuses a longer one.
MAX_IMAGE_NAME = 255
# NCCL_SOCKET_IFNAME: interface names or prefixes, comma-separated, optionally after ^ (exclude)
# or = (exact); a Linux interface name has at most 15 characters.
_IFNAMES = re.compile(r"[\^=]?[A-Za-z0-9_.:@-]{1,15}(,[A-Za-z0-9_.:@-]{1,15})*")


def gpu_types() -> list[str]:
    """The GPU types gpuinfra knows: the instance catalog's GPU models and those of the driver
    table (``gpus.GPU_MIN_BRANCH``), the values of the gpuinfra.dev/gpu-type node label."""
    return sorted(
        {t.gpu_name for t in catalog.instance_types().values()} | set(gpus.GPU_MIN_BRANCH)
    )


def efa_types(gpu_type: str) -> list[catalog.InstanceType]:
    """The catalog's instance types with EFA and ``gpu_type`` GPUs, by name."""
    return sorted(
        (
            t
            for t in catalog.instance_types().values()
            if t.gpu_name == gpu_type and t.efa_interfaces
        ),
        key=lambda t: t.name,
    )


def efa_share(instance: catalog.InstanceType, gpus: int) -> int:
    """The EFA interfaces a pod holding ``gpus`` of the instance's GPUs may ask for: its share
    of the interfaces, at least one; the device plugin has no more to give the node's other
    pods."""
    return max(1, instance.efa_interfaces * gpus // instance.gpu_count)


@dataclass
class TrainingJob:
    name: str
    namespace: str
    queue: str
    image: str
    gpu_type: str
    gpus_per_node: int = 8
    nodes: int = 1
    network: str = "tcp"
    # EFA interfaces per node (the instance type's count); EFA only.
    efa_interfaces: int = 0
    # The interface NCCL bootstraps over (the site's data network): required with InfiniBand and
    # RoCE; with TCP, NCCL picks the pod's own interface when it is not given.
    socket_ifname: str | None = None
    # DataLoader workers share memory through /dev/shm; the 64 MiB default stops them.
    shm_size: str = "64Gi"
    script: str = "train.py"
    # The pods' cost labels, which the Prometheus stack's admission policy requires of every GPU
    # pod (gpuinfra/addons/accounting.py); unset: the namespace (a team's own) and the Job's name.
    team: str | None = None
    project: str | None = None

    @property
    def cost_labels(self) -> dict[str, str]:
        return {TEAM_LABEL: self.team or self.namespace, PROJECT_LABEL: self.project or self.name}

    def problems(self) -> list[str]:
        """One line per setting that would print an object Kubernetes, Kueue or the nodes
        refuse, each naming the command line's flag."""
        return [
            *self._name_problems(),
            *self._image_problems(),
            *self._size_problems(),
            *self._network_problems(),
        ]

    def _name_problems(self) -> list[str]:
        found = []
        # The pods' host names are <name>-<index>, the rendezvous address names pod 0 by it.
        # A node count out of range is its own line, not a name too long.
        longest = MAX_LABEL - len(f"-{min(max(self.nodes, 1), MAX_NODES) - 1}")
        if not _DNS_1035_LABEL.fullmatch(self.name) or len(self.name) > longest:
            found.append(
                f"NAME {excerpt(repr(self.name))}: not a name for the Job and its Service "
                f"(allowed: at most {longest} lowercase letters, digits and '-', starting with a "
                "letter and ending with a letter or digit; the pods' host names add -<index>)"
            )
        for flag, value, what in (
            ("--namespace", self.namespace, "namespace"),
            ("--queue", self.queue, "LocalQueue name"),
        ):
            if not DNS_LABEL.fullmatch(value):
                found.append(
                    f"{flag} {excerpt(repr(value))}: not a Kubernetes {what} (allowed: at most "
                    f"{MAX_LABEL} lowercase letters, digits and '-', starting and ending with a "
                    "letter or digit)"
                )
        # Kueue admits a team's Jobs through the LocalQueue in the team's own namespace. A
        # namespace that is no Kubernetes name has had its line.
        if DNS_LABEL.fullmatch(self.namespace) and cluster_namespace(self.namespace):
            found.append(
                f"--namespace {self.namespace!r}: the cluster's own namespace, not a team's "
                f"({CLUSTER_NAMESPACES_REFUSED})"
            )
        for flag, label in (("--team", self.team), ("--project", self.project)):
            if label is not None and not LABEL_VALUE.fullmatch(label):
                found.append(
                    f"{flag} {excerpt(repr(label))}: not a label value ({LABEL_VALUE_ALLOWED})"
                )
        known = gpu_types()
        if self.gpu_type not in known:
            found.append(
                f"--gpu-type {excerpt(repr(self.gpu_type))}: not a GPU type gpuinfra knows"
                f"{did_you_mean(self.gpu_type.lower(), known)} (allowed: {allowed(known)})"
            )
        return found

    def _image_problems(self) -> list[str]:
        shown = f"--image {excerpt(repr(self.image))}"
        pinned = "allowed: REPOSITORY:TAG with a release tag such as 25.01-py3, or @sha256:<64 hex>"
        found = _IMAGE.fullmatch(self.image)
        if not found:
            return [f"{shown}: not an image reference ({pinned})"]
        tag, digest = found.group("tag"), found.group("digest")
        if len(found.group("name")) > MAX_IMAGE_NAME:
            return [
                f"{shown}: the repository name has {len(found.group('name'))} characters "
                f"(allowed: at most {MAX_IMAGE_NAME}, the registry's host included)"
            ]
        if digest:
            return []
        if tag is None:
            return [f"{shown}: no tag or digest, so each node pulls whatever :latest is ({pinned})"]
        if tag.lower() in FLOATING_WORDS:
            return [f"{shown}: the tag '{tag}' moves, so nodes may run different images ({pinned})"]
        return []

    def _size_problems(self) -> list[str]:
        found = []
        if not 1 <= self.gpus_per_node <= MAX_GPUS_PER_NODE:
            found.append(
                f"--gpus-per-node {self.gpus_per_node}: out of range (allowed: 1 to "
                f"{MAX_GPUS_PER_NODE}; a host carries at most {MAX_GPUS_PER_NODE} GPUs)"
            )
        if not 1 <= self.nodes <= MAX_NODES:
            found.append(
                f"--nodes {excerpt(str(self.nodes), 40)}: out of range (allowed: 1 to "
                f"{MAX_NODES}; Kubernetes runs an indexed Job on at most {MAX_NODES} pods)"
            )
        found += shm_problems(self.shm_size)
        return found

    def _network_problems(self) -> list[str]:
        found = []
        if self.network not in NETWORKS:
            found.append(
                f"--network {excerpt(repr(self.network))}: not allowed"
                f"{did_you_mean(self.network, NETWORKS)} (allowed: {allowed(NETWORKS)})"
            )
        if self.network == "efa":
            found += self._efa_problems()
        elif self.network in NETWORKS and self.efa_interfaces:
            found.append(
                f"--efa-interfaces {self.efa_interfaces}: only with --network efa (allowed: 0 "
                f"with --network {self.network})"
            )
        if self.socket_ifname is not None and not _IFNAMES.fullmatch(self.socket_ifname):
            found.append(
                f"--socket-ifname {excerpt(repr(self.socket_ifname))}: not an interface name "
                "(allowed: a network interface such as ens1f0, or NCCL's list such as ^docker,lo)"
            )
        if self.network in ("infiniband", "roce") and not self.socket_ifname:
            found.append(
                f"--socket-ifname: required with --network {self.network}: the interface of the "
                "site's data network NCCL bootstraps over, e.g. --socket-ifname ens1f0"
            )
        return found

    def _efa_problems(self) -> list[str]:
        """EFA is an AWS instance's: the catalog's types with the GPU type bound the GPUs per
        node and the interfaces each pod may ask for. An unknown GPU type or a GPU count out of
        range has had its line."""
        if self.gpu_type not in gpu_types() or not 1 <= self.gpus_per_node <= MAX_GPUS_PER_NODE:
            return []
        types = efa_types(self.gpu_type)
        if not types:
            offered = sorted(
                {t.gpu_name for t in catalog.instance_types().values() if t.efa_interfaces}
            )
            return [
                f"--network efa: no instance type of the catalog has EFA and {self.gpu_type} "
                f"GPUs (allowed with --network efa: --gpu-type {allowed(offered)})"
            ]
        # max() keeps the first of equals: the name first in order.
        largest = max(types, key=lambda t: t.gpu_count)
        if self.gpus_per_node > largest.gpu_count:
            return [
                f"--gpus-per-node {self.gpus_per_node}: more GPUs than an instance type with EFA "
                f"and {self.gpu_type} GPUs has (allowed: 1 to {largest.gpu_count} with "
                f"--network efa; {largest.gpu_count} on {largest.name})"
            ]
        fits = [t for t in types if t.gpu_count >= self.gpus_per_node]
        best = max(fits, key=lambda t: efa_share(t, self.gpus_per_node))
        most = efa_share(best, self.gpus_per_node)
        if not 1 <= self.efa_interfaces <= most:
            return [
                f"--efa-interfaces {self.efa_interfaces}: out of range with --network efa "
                f"(allowed: 1 to {most}, the share of {self.gpus_per_node} GPU"
                f"{'s' if self.gpus_per_node > 1 else ''} in an instance type's EFA "
                f"interfaces; {best.efa_interfaces} for {best.gpu_count} GPUs on {best.name})"
            ]
        return []


def shm_problems(text: str) -> list[str]:
    """``--shm-size``: a memory quantity from 1Mi to 1Ti, one line when it is not."""
    shown = f"--shm-size {excerpt(repr(text))}"
    size = quantity_amount(text)
    if size is not None and MIN_SHM <= size <= MAX_SHM:
        return []
    if size is not None and size > 0:
        return [f"{shown}: out of range (allowed: {SHM_ALLOWED})"]
    # A unit written as people write it (64GB, 64 gib): the quantity it likely means, if that
    # one is allowed and is not what was typed.
    unit = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([KMGTPE])(?:i?B|i)", text, re.I | re.ASCII)
    meant = f"{unit.group(1)}{unit.group(2).upper()}i" if unit else None
    fits = (
        meant is not None and meant != text and MIN_SHM <= (quantity_amount(meant) or 0) <= MAX_SHM
    )
    hint = f"; did you mean '{meant}'?" if fits else ""
    return [f"{shown}: not a Kubernetes quantity above zero{hint} (allowed: {SHM_ALLOWED})"]


def nccl_env(job: TrainingJob) -> list[dict[str, str]]:
    """NCCL's settings that follow from the network between the nodes."""
    env: dict[str, str] = {}
    if job.network == "efa":
        # libfabric's EFA provider through the aws-ofi-nccl plugin (libnccl-net-ofi.so).
        env.update({"FI_PROVIDER": "efa", "FI_EFA_USE_DEVICE_RDMA": "1", "NCCL_NET_PLUGIN": "ofi"})
    elif job.network in ("infiniband", "roce"):
        # NCCL's IB transport: a longer timeout (4.096 us * 2^22, about 17 s) and more retries
        # ride out a link flap instead of aborting the job.
        env.update({"NCCL_IB_TIMEOUT": "22", "NCCL_IB_RETRY_CNT": "7"})
    else:
        env["NCCL_IB_DISABLE"] = "1"
    if job.socket_ifname:
        env["NCCL_SOCKET_IFNAME"] = job.socket_ifname
    return [{"name": k, "value": v} for k, v in env.items()]


def training_objects(job: TrainingJob) -> list[dict[str, Any]]:
    """The Job and the headless Service its pods find each other by."""
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": job.name, "namespace": job.namespace},
        "spec": {
            "clusterIP": "None",
            "selector": {"batch.kubernetes.io/job-name": job.name},
            "ports": [{"name": "rendezvous", "port": 29500}],
        },
    }
    return [training_job(job), service]


def training_job(job: TrainingJob) -> dict[str, Any]:
    """The Job as a Kubernetes object; raises InputInvalid (exit 2) with one line per bad
    setting."""
    problems = job.problems()
    if problems:
        raise InputInvalid(problems)
    resources: dict[str, Any] = {GPU_RESOURCE: job.gpus_per_node}
    if job.network == "efa":
        resources[EFA_RESOURCE] = job.efa_interfaces
    container: dict[str, Any] = {
        "name": "train",
        "image": job.image,
        # Pod 0 of the indexed Job is the rendezvous; the headless Service names it.
        "command": ["torchrun"],
        "args": [
            "--nnodes=$(NNODES)",
            "--nproc-per-node=$(NPROC_PER_NODE)",
            "--node-rank=$(JOB_COMPLETION_INDEX)",
            f"--master-addr={job.name}-0.{job.name}",
            "--master-port=29500",
            job.script,
        ],
        "env": [
            {"name": "NNODES", "value": str(job.nodes)},
            {"name": "NPROC_PER_NODE", "value": str(job.gpus_per_node)},
            *nccl_env(job),
        ],
        "resources": {"limits": dict(resources), "requests": dict(resources)},
        "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"}],
    }
    # RDMA (InfiniBand, RoCE) locks its buffers in memory. The limit comes from the container
    # runtime, which the toolkit role runs without one: IPC_LOCK would get the pod refused by
    # the team namespace's baseline Pod Security level, and it does nothing for a container that
    # runs as a non-root user (docs/decisions/0082).
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": job.name,
            "namespace": job.namespace,
            "labels": {QUEUE_LABEL: job.queue, **job.cost_labels},
        },
        "spec": {
            # Kueue admits the Job (and unsuspends it) when the queue's quota allows all of it.
            "suspend": True,
            "completionMode": "Indexed",
            "completions": job.nodes,
            "parallelism": job.nodes,
            "backoffLimit": 0,
            "template": {
                "metadata": {"labels": job.cost_labels},
                "spec": {
                    "restartPolicy": "Never",
                    "subdomain": job.name,
                    "nodeSelector": {GPU_TYPE_LABEL: job.gpu_type},
                    "tolerations": [dict(GPU_TOLERATION)],
                    "containers": [container],
                    "volumes": [
                        {
                            "name": "dshm",
                            "emptyDir": {"medium": "Memory", "sizeLimit": job.shm_size},
                        }
                    ],
                },
            },
        },
    }


# --- the cluster the Job is for -------------------------------------------------------------------


@dataclass(frozen=True)
class Cluster:
    """A stack or a site as a training Job meets it: its nodes as the integrity rules see them,
    and its Kueue settings."""

    name: str
    state: integrity.State
    kueue: KueueSettings
    # A site sets Kueue through role variables (kueue_teams), a stack through its add-on keys
    # (kueue.teams).
    site: bool = False

    def setting(self, field: str) -> str:
        """A Kueue setting as this stack or site writes it."""
        return f"kueue_{field}" if self.site else f"kueue.{to_camel(field)}"


def stack_cluster(stack: str) -> Cluster:
    """The stack's nodes and Kueue settings, as ``config check --stack`` reads them."""
    cfg = config.load_stack(stack)
    state = integrity.stack_state(cfg, addons.render_all(cfg.addons))
    return Cluster(f"stack {stack}", state, cfg.addons.kueue)


def site_cluster(path: Path) -> Cluster:
    """The site's nodes and Kueue settings, as ``config check --site`` reads them."""
    loaded = site_mod.load_site(path)
    settings = addons.settings_from_site(loaded)
    state = integrity.site_state(loaded, addons.render_all(settings), settings=settings)
    return Cluster(f"site {loaded.name or display_path(path)}", state, settings.kueue, site=True)


def cluster_problems(job: TrainingJob, cluster: Cluster) -> list[str]:
    """Why ``job`` would never run on ``cluster``: one line per mistake, each naming the flag.
    Its pods are judged by the integrity rules' own test of a pod against the nodes, and the Job
    by what Kueue would admit: a team namespace's LocalQueue, within the flavor's quota."""
    nodes = _node_problem(job, training_job(job)["spec"]["template"]["spec"], cluster)
    return [*nodes, *_queue_problems(job, cluster, quota=not nodes)]


def _node_problem(job: TrainingJob, pod: dict[str, Any], cluster: Cluster) -> list[str]:
    """The first of: no node of the GPU type, none that runs one pod, too few for all of them."""
    typed = [
        (nodes, why)
        for nodes, why in integrity.fit(pod, cluster.state)
        if nodes.labels.get(GPU_TYPE_LABEL) == job.gpu_type
    ]
    if not typed:
        offered = {
            n.labels[GPU_TYPE_LABEL] for n in cluster.state.nodes if GPU_TYPE_LABEL in n.labels
        }
        return [
            f"--gpu-type {job.gpu_type}: no node of {cluster.name} carries "
            f"{GPU_TYPE_LABEL}={job.gpu_type} (allowed: {allowed(offered)})"
        ]
    if job.network == "efa" and not any(n.allocatable.get(EFA_RESOURCE) for n, _ in typed):
        instead = (
            "--network infiniband, roce or tcp; EFA is an AWS instance's"
            if cluster.site
            else f"efa: true on a node pool of {job.gpu_type} GPUs, or --network tcp"
        )
        return [
            f"--network efa: no {job.gpu_type} node of {cluster.name} offers EFA interfaces "
            f"({EFA_RESOURCE}) (allowed: {instead})"
        ]
    fits = [nodes for nodes, why in typed if not why]
    if not fits:
        most = max(typed, key=lambda t: t[0].allocatable.get(GPU_RESOURCE, 0.0))[0]
        gives = most.allocatable.get(GPU_RESOURCE, 0.0)
        short = all(n.allocatable.get(GPU_RESOURCE, 0.0) < job.gpus_per_node for n, _ in typed)
        if short and gives >= 1:
            return [
                f"--gpus-per-node {job.gpus_per_node}: no {job.gpu_type} node of {cluster.name} "
                f"gives one pod {job.gpus_per_node} GPUs (allowed: "
                f"{_up_to(int(gives))}, what {most.name} gives)"
            ]
        why = "; ".join(f"{nodes.name}: {why}" for nodes, why in typed)
        return [
            f"--gpu-type {job.gpu_type}: no {job.gpu_type} node of {cluster.name} can run the "
            f"Job's pods ({why})"
        ]
    held = [(nodes, integrity.pods_per_node(pod, nodes)) for nodes in fits]
    most_pods = sum(nodes.count * per for nodes, per in held)
    if job.nodes <= most_pods:
        return []
    where = ", ".join(
        f"{int(per)} on each of {nodes.name}'s {nodes.count} nodes at its maxSize"
        if nodes.min_count is not None
        else f"{int(per)} on {nodes.name}"
        for nodes, per in held
    )
    more = (
        f"or more hosts with gpu_node_registration_gpu_type: {job.gpu_type}"
        if cluster.site
        else "or a larger maxSize"
    )
    return [
        f"--nodes {job.nodes}: {cluster.name} can run at most {int(most_pods)} of these pods at "
        f"once, {where} (allowed: {_up_to(int(most_pods))}, {more})"
    ]


def _up_to(most: int) -> str:
    return "1" if most == 1 else f"1 to {most}"


def _queue_problems(job: TrainingJob, cluster: Cluster, *, quota: bool) -> list[str]:
    """Whether Kueue admits the Job: on, the namespace a team's, the queue its LocalQueue, the
    GPUs within the flavor's quota (asked only where the nodes can hold the Job)."""
    kueue = cluster.kueue
    if not kueue.enabled:
        return [
            f"--queue {job.queue}: Kueue is off in {cluster.name}, so nothing admits the Job "
            f"through its {QUEUE_LABEL} label and it stays suspended; set "
            f"{cluster.setting('enabled')}: true"
        ]
    found = []
    if job.namespace not in kueue.teams:
        found.append(
            f"--namespace {job.namespace}: not a Kueue team namespace of {cluster.name}, so no "
            f"LocalQueue there admits the Job (allowed: {allowed(kueue.teams)}, or add it to "
            f"{cluster.setting('teams')})"
        )
    if job.queue != kueue.cluster_queue:
        found.append(
            f"--queue {job.queue}: not the LocalQueue Kueue gives each team of {cluster.name} "
            f"(allowed: '{kueue.cluster_queue}')"
        )
    if not quota:
        return found
    flavor = next((f for f in kueue.flavors if f.gpu_type == job.gpu_type), None)
    if flavor is None:
        found.append(
            f"--gpu-type {job.gpu_type}: Kueue has no flavor for {job.gpu_type} in "
            f"{cluster.name}, so the Job waits forever (allowed: "
            f"{allowed(f.gpu_type for f in kueue.flavors)}, or add it to "
            f"{cluster.setting('flavors')})"
        )
    elif job.nodes * job.gpus_per_node > flavor.gpus:
        found.append(
            f"--nodes {job.nodes} --gpus-per-node {job.gpus_per_node}: "
            f"{job.nodes * job.gpus_per_node} {job.gpu_type} GPUs in all, more than Kueue's "
            f"quota of {flavor.gpus} for {job.gpu_type} in {cluster.name}, so the Job waits "
            f"forever (allowed: at most {flavor.gpus} GPUs in all, or raise gpus of "
            f"{cluster.setting('flavors')}' {job.gpu_type} entry)"
        )
    if flavor is not None and job.network == "efa":
        found += _efa_quota_problems(job, cluster, flavor)
    return found


def _efa_quota_problems(job: TrainingJob, cluster: Cluster, flavor: KueueFlavor) -> list[str]:
    """Kueue admits no Job asking for a resource its ClusterQueue does not cover, or for more of
    it than the flavor's quota: the EFA interfaces count as the GPUs do."""
    wanted = job.nodes * job.efa_interfaces
    if wanted <= flavor.efa_interfaces:
        return []
    key = "efa_interfaces" if cluster.site else "efaInterfaces"
    fix = f"set {key} of {cluster.setting('flavors')}' {job.gpu_type} entry to {wanted} or more"
    flag = f"--nodes {job.nodes} --efa-interfaces {job.efa_interfaces}"
    if not flavor.efa_interfaces:
        return [
            f"{flag}: Kueue's {job.gpu_type} flavor in {cluster.name} has no EFA quota, so the "
            f"Job waits forever (allowed: {fix})"
        ]
    return [
        f"{flag}: {wanted} EFA interfaces in all, more than Kueue's quota of "
        f"{flavor.efa_interfaces} for {job.gpu_type} in {cluster.name}, so the Job waits forever "
        f"(allowed: at most {flavor.efa_interfaces} in all, or {fix})"
    ]

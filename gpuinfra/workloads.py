"""Workload templates the cluster's users start from: a training Job queued through Kueue.

The Job is suspended until Kueue admits it through the team's LocalQueue. It asks for whole GPUs
of one GPU type, tolerates the GPU taint, sizes /dev/shm for DataLoader workers and sets NCCL for
the network between the nodes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gpuinfra.addons.base import GPU_RESOURCE, GPU_TOLERATION, GPU_TYPE_LABEL
from gpuinfra.errors import UsageError

NETWORKS = ("efa", "infiniband", "roce", "tcp")
EFA_RESOURCE = "vpc.amazonaws.com/efa"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"


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
    # The interface NCCL bootstraps over (the site's data network); not for EFA.
    socket_ifname: str | None = None
    # DataLoader workers share memory through /dev/shm; the 64 MiB default stops them.
    shm_size: str = "64Gi"
    script: str = "train.py"

    def problems(self) -> list[str]:
        found = []
        if self.network not in NETWORKS:
            found.append(
                f"network: '{self.network}' is not allowed (allowed: {', '.join(NETWORKS)})"
            )
        if self.gpus_per_node < 1 or self.nodes < 1:
            found.append("gpus_per_node and nodes: at least 1")
        if self.network == "efa" and self.efa_interfaces < 1:
            found.append(
                "efa_interfaces: the instance type's EFA interface count, at least 1 with network efa"
            )
        if self.network in ("infiniband", "roce", "tcp") and not self.socket_ifname:
            found.append(
                f"socket_ifname: the site's data network interface, required with network {self.network}"
            )
        return found


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
    """The Job as a Kubernetes object; raises UsageError naming each bad setting."""
    problems = job.problems()
    if problems:
        raise UsageError("; ".join(problems))
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
    if job.network in ("infiniband", "roce"):
        # RDMA needs locked memory beyond the container default.
        container["securityContext"] = {"capabilities": {"add": ["IPC_LOCK"]}}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": job.name,
            "namespace": job.namespace,
            "labels": {QUEUE_LABEL: job.queue},
        },
        "spec": {
            # Kueue admits the Job (and unsuspends it) when the queue's quota allows all of it.
            "suspend": True,
            "completionMode": "Indexed",
            "completions": job.nodes,
            "parallelism": job.nodes,
            "backoffLimit": 0,
            "template": {
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
                }
            },
        },
    }

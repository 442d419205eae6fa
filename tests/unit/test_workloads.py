"""The training workload template: queued by Kueue, NCCL set from the network, valid objects."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from gpuinfra import schemas, versions, workloads
from gpuinfra.errors import UsageError
from tests.conftest import run_cli

K8S = versions.pinned().kubernetes.version


def job(**changes: Any) -> workloads.TrainingJob:
    settings: dict[str, Any] = {
        "name": "llm-pretrain",
        "namespace": "team-a",
        "queue": "gpu",
        "image": "nvcr.io/nvidia/pytorch:25.01-py3",
        "gpu_type": "h100",
        "nodes": 2,
        "network": "infiniband",
        "socket_ifname": "ens1f0",
    }
    settings.update(changes)
    return workloads.TrainingJob(**settings)


def env(obj: dict[str, Any]) -> dict[str, str]:
    container = obj["spec"]["template"]["spec"]["containers"][0]
    return {e["name"]: e["value"] for e in container["env"]}


@pytest.mark.parametrize("network", ["efa", "infiniband", "roce", "tcp"])
def test_every_network_gives_valid_objects(network: str) -> None:
    objects = workloads.training_objects(job(network=network, efa_interfaces=32))
    for obj in objects:
        assert schemas.core_problems(obj, K8S) == []


def test_the_job_waits_for_kueue_and_fits_the_gpu_nodes() -> None:
    obj = workloads.training_job(job())
    assert obj["metadata"]["labels"] == {"kueue.x-k8s.io/queue-name": "gpu"}
    assert obj["spec"]["suspend"] is True
    pod = obj["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"gpuinfra.dev/gpu-type": "h100"}
    toleration = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    assert toleration in pod["tolerations"]
    assert pod["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": 8}
    shm = next(v for v in pod["volumes"] if v["name"] == "dshm")
    assert shm["emptyDir"] == {"medium": "Memory", "sizeLimit": "64Gi"}
    assert {"name": "dshm", "mountPath": "/dev/shm"} in pod["containers"][0]["volumeMounts"]


def test_nccl_follows_the_network() -> None:
    ib = env(workloads.training_job(job()))
    assert (ib["NCCL_IB_TIMEOUT"], ib["NCCL_IB_RETRY_CNT"]) == ("22", "7")
    assert ib["NCCL_SOCKET_IFNAME"] == "ens1f0"
    efa_job = workloads.training_job(job(network="efa", efa_interfaces=32, socket_ifname=None))
    efa = env(efa_job)
    assert (efa["FI_PROVIDER"], efa["NCCL_NET_PLUGIN"]) == ("efa", "ofi")
    assert "NCCL_IB_TIMEOUT" not in efa
    limits = efa_job["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]
    assert limits["vpc.amazonaws.com/efa"] == 32
    assert env(workloads.training_job(job(network="tcp")))["NCCL_IB_DISABLE"] == "1"


def test_missing_network_settings_are_refused() -> None:
    with pytest.raises(UsageError, match="socket_ifname: the site's data network interface"):
        workloads.training_job(job(socket_ifname=None))
    with pytest.raises(UsageError, match="efa_interfaces: the instance type's EFA interface"):
        workloads.training_job(job(network="efa"))
    with pytest.raises(UsageError, match="network: 'ethernet' is not allowed"):
        workloads.training_job(job(network="ethernet"))


def test_the_command_prints_both_objects_and_refuses_a_missing_setting() -> None:
    common = ["--namespace", "team-a", "--image", "nvcr.io/nvidia/pytorch:25.01-py3"]
    result = run_cli(
        "workloads", "training", "llm-pretrain", *common, "--gpu-type", "h100",
        "--nodes", "2", "--network", "roce", "--socket-ifname", "ens1f0",
    )  # fmt: skip
    assert result.code == 0, result.stderr
    assert [obj["kind"] for obj in yaml.safe_load_all(result.stdout)] == ["Job", "Service"]
    bad = run_cli("workloads", "training", "x", *common, "--gpu-type", "h100", "--network", "roce")
    assert bad.code == 2
    assert "socket_ifname" in bad.stderr

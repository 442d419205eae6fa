"""The GPU smoke test Job the GPU Operator's install waits for."""

from __future__ import annotations

from typing import Any

from gpuinfra import addons
from gpuinfra.addons import gpu_operator
from gpuinfra.addons.base import GPU_TAINT
from gpuinfra.versions import pinned

from .test_accounting import admitted


def _job(settings: dict[str, Any] | None = None, versions: Any = None) -> dict[str, Any]:
    render = addons.render("gpu_operator", settings, versions=versions)
    (job,) = [o for o in render.objects if o["kind"] == "Job"]
    return job


def test_one_gpu_runs_nvidia_smi_then_a_cuda_program() -> None:
    pod = _job()["spec"]["template"]["spec"]
    (smi,) = pod["initContainers"]
    (cuda,) = pod["containers"]
    assert smi["command"] == ["nvidia-smi"]
    assert cuda["image"] == "nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0"
    # An init container's request is not added to the containers': the pod holds one GPU.
    assert smi["resources"] == cuda["resources"]
    assert smi["resources"]["limits"]["nvidia.com/gpu"] == 1
    # Bounded and unprivileged: no root, no token, nothing written.
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["automountServiceAccountToken"] is False
    assert smi["securityContext"]["readOnlyRootFilesystem"] is True
    assert smi["resources"]["limits"]["memory"] == smi["resources"]["requests"]["memory"]
    assert pod["restartPolicy"] == "Never"
    assert any(t["key"] == GPU_TAINT["key"] for t in pod["tolerations"])


def test_it_fails_once_and_for_all_within_its_deadline() -> None:
    spec = _job()["spec"]
    assert spec["backoffLimit"] == 0
    assert spec["activeDeadlineSeconds"] == gpu_operator.SMOKE_TEST_DEADLINE_S


def test_a_new_operator_version_runs_it_again_and_a_rerun_does_not() -> None:
    versions = pinned()
    bumped = versions.model_copy(
        update={"gpu_operator": versions.gpu_operator.model_copy(update={"version": "v26.7.1"})}
    )
    assert _job()["metadata"]["name"] == _job()["metadata"]["name"]
    assert _job()["metadata"]["name"] != _job(versions=bumped)["metadata"]["name"]


def test_its_pod_passes_the_cost_label_policy() -> None:
    template = _job()["spec"]["template"]
    assert admitted({"metadata": template["metadata"], "spec": template["spec"]}) == []


def test_it_can_be_switched_off() -> None:
    render = addons.render("gpu_operator", {"smokeTest": False})
    assert not [o for o in render.objects if o["kind"] == "Job"]

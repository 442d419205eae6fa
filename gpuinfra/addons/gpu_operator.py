"""NVIDIA GPU Operator: device plugin, DCGM exporter, GPU feature discovery, MIG manager.

Host-driver mode (the default) leaves the driver and container toolkit to the node: bare-metal
hosts converged by the ``nvidia_driver`` and ``nvidia_container_toolkit`` roles, and the EKS GPU
AMI, already have both, and a second driver container on such a node fails to load its module.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any, Literal

import yaml
from pydantic import Field, field_validator, model_validator

from gpuinfra.addons.base import (
    CONTAINER_SECURITY,
    GPU_RESOURCE,
    GPU_TOLERATION,
    MONITOR_LABELS,
    PROJECT_LABEL,
    TEAM_LABEL,
    AddonRender,
    AddonSettings,
    Chart,
    Name,
    enabled_field,
    metadata,
)
from gpuinfra.loading import cross_field_error
from gpuinfra.versions import Versions

RELEASE = "gpu-operator"
MIG_CONFIG_MAP = "gpuinfra-mig-parted-config"
DEVICE_PLUGIN_CONFIG_MAP = "gpuinfra-device-plugin-config"
DEVICE_PLUGIN_CONFIG = "gpuinfra"
MIG_ALL_DISABLED = "all-disabled"
# The node label naming the MIG layout the MIG manager applies to the node's GPUs.
MIG_CONFIG_LABEL = "nvidia.com/mig.config"
# The Service (and so the Prometheus job) the operator creates for the DCGM exporter.
DCGM_EXPORTER_JOB = "nvidia-dcgm-exporter"
SMOKE_TEST = "gpuinfra-gpu-smoke-test"
# nobody: the smoke test reads the GPU and writes nothing.
SMOKE_TEST_UID = 65534
# Long enough to pull the sample image on a fresh node; the Ansible verify step waits as long.
SMOKE_TEST_DEADLINE_S = 600
# The smoke test's GPU-hours are the platform's own.
SMOKE_LABELS = {TEAM_LABEL: "platform", PROJECT_LABEL: "gpuinfra"}

# Operand in versions.yaml -> the chart value that holds its image tag.
_OPERAND_VALUES = {
    "driver": "driver",
    "toolkit": "toolkit",
    "device_plugin": "devicePlugin",
    "dcgm_exporter": "dcgmExporter",
    "dcgm": "dcgm",
    "mig_manager": "migManager",
}
# A MIG profile as nvidia-smi names it: 1g.10gb, 3g.71gb, 1g.18gb+me.
_MIG_PROFILE = re.compile(r"^\d+g\.\d+gb(\+me)?$")


class GpuOperatorSettings(AddonSettings):
    enabled: bool = enabled_field("Install the GPU Operator", default=True)
    namespace: Name = Field(
        default="gpu-operator", description="Namespace of the GPU Operator release."
    )
    smoke_test: bool = Field(
        default=True,
        description="After each install, run a Job on a GPU node that requests one GPU, runs "
        "nvidia-smi and a CUDA program (vectorAdd); the install waits for it to succeed.",
    )
    driver_mode: Literal["host", "operator"] = Field(
        default="host",
        description="host: the nodes already have the driver and container toolkit "
        "(nvidia_driver role, GPU cloud images), the operator runs neither; operator: the "
        "operator runs them as containers.",
    )
    mig_strategy: Literal["none", "single", "mixed"] = Field(
        default="none",
        description="How the device plugin exposes MIG devices (none, single, mixed).",
    )
    # Applied to every GPU of a node.
    mig_profiles: dict[str, dict[str, int]] = Field(
        default_factory=dict,
        description="Named MIG layouts, name -> {profile: count} (e.g. {inference: {1g.18gb: 7}}); "
        "a node picks one with the label nvidia.com/mig.config=<name>. Needs mig_strategy single "
        "or mixed.",
    )
    mig_default_profile: str = Field(
        default=MIG_ALL_DISABLED,
        description="MIG layout applied to nodes without a nvidia.com/mig.config label "
        "(all-disabled or a name from mig_profiles).",
    )
    time_slicing_replicas: int = Field(
        default=1,
        ge=1,
        le=64,
        description="Pods that share one GPU by time-slicing (1 turns sharing off).",
    )

    @field_validator("mig_profiles")
    @classmethod
    def _profiles(cls, value: dict[str, dict[str, int]]) -> dict[str, dict[str, int]]:
        for name, layout in value.items():
            if name == MIG_ALL_DISABLED:
                raise ValueError(f"'{MIG_ALL_DISABLED}' is built in; choose another name")
            if not layout:
                raise ValueError(f"MIG layout '{name}' lists no profiles")
            for profile, count in layout.items():
                if not _MIG_PROFILE.match(profile):
                    raise ValueError(
                        f"'{profile}' in '{name}' is not a MIG profile (e.g. 1g.10gb, 3g.71gb)"
                    )
                if not 1 <= count <= 7:
                    raise ValueError(f"'{profile}' in '{name}': count {count} is not 1 to 7")
        return value

    @model_validator(mode="after")
    def _mig(self) -> GpuOperatorSettings:
        known = [MIG_ALL_DISABLED, *self.mig_profiles]
        if self.mig_default_profile not in known:
            raise cross_field_error(
                f"migDefaultProfile '{self.mig_default_profile}' is not one of {', '.join(known)}",
                "mig_default_profile",
            )
        if self.mig_strategy == "none" and self.mig_profiles:
            raise cross_field_error(
                "migProfiles need migStrategy single or mixed",
                "mig_strategy",
                allowed="'single' or 'mixed' with migProfiles",
            )
        return self


def values(settings: GpuOperatorSettings, versions: Versions) -> dict[str, Any]:
    host_mode = settings.driver_mode == "host"
    out: dict[str, Any] = {
        "driver": {"enabled": not host_mode},
        "toolkit": {"enabled": not host_mode},
        # The node-feature-discovery worker keeps the chart's tolerations, which include this.
        "daemonsets": {"tolerations": [GPU_TOLERATION]},
        "mig": {"strategy": settings.mig_strategy},
        "migManager": {"enabled": settings.mig_strategy != "none"},
        "dcgmExporter": {
            "enabled": True,
            # Each GPU's series carry the pod holding it (and its labels); honouring the
            # exporter's namespace and pod labels keeps them the workload's, not the exporter's,
            # so GPU-hours are attributed to the right namespace.
            "enablePodLabels": True,
            "serviceMonitor": {
                "enabled": True,
                "additionalLabels": dict(MONITOR_LABELS),
                "honorLabels": True,
            },
        },
        "devicePlugin": {"enabled": True},
    }
    for operand, key in _OPERAND_VALUES.items():
        version = versions.gpu_operator.operands.get(operand)
        if version:
            out.setdefault(key, {})["version"] = version
    if settings.mig_profiles:
        out["migManager"]["config"] = {
            "create": True,
            "name": MIG_CONFIG_MAP,
            "default": settings.mig_default_profile,
            "data": {"config.yaml": _mig_parted_config(settings)},
        }
    if settings.time_slicing_replicas > 1:
        out["devicePlugin"]["config"] = {
            "create": True,
            "name": DEVICE_PLUGIN_CONFIG_MAP,
            "default": DEVICE_PLUGIN_CONFIG,
            "data": {DEVICE_PLUGIN_CONFIG: _device_plugin_config(settings)},
        }
    return out


def _mig_parted_config(settings: GpuOperatorSettings) -> str:
    configs: dict[str, Any] = {MIG_ALL_DISABLED: [{"devices": "all", "mig-enabled": False}]}
    for name, layout in sorted(settings.mig_profiles.items()):
        configs[name] = [
            {"devices": "all", "mig-enabled": True, "mig-devices": dict(sorted(layout.items()))}
        ]
    return yaml.safe_dump({"version": "v1", "mig-configs": configs}, sort_keys=False)


def _device_plugin_config(settings: GpuOperatorSettings) -> str:
    config = {
        "version": "v1",
        "flags": {"migStrategy": settings.mig_strategy},
        "sharing": {
            "timeSlicing": {
                "resources": [{"name": GPU_RESOURCE, "replicas": settings.time_slicing_replicas}]
            }
        },
    }
    return yaml.safe_dump(config, sort_keys=False)


def smoke_test_job(settings: GpuOperatorSettings, versions: Versions) -> dict[str, Any]:
    """A Job that proves the path from device to container: one GPU, nvidia-smi, a CUDA kernel.

    Its name carries a digest of what it tests (the operator, its operands, the sample), so a
    change to any of them creates a new Job, which runs again, instead of an immutable Job
    that cannot be updated; a re-run with nothing changed leaves the finished Job alone.
    """
    sample = versions.cuda_sample
    image = f"{sample.source.image}:{sample.tag or sample.version}"
    tested = json.dumps(
        [versions.gpu_operator.version, versions.gpu_operator.operands, image,
         settings.driver_mode, settings.mig_strategy], sort_keys=True,
    )  # fmt: skip
    digest = hashlib.sha256(tested.encode()).hexdigest()[:10]
    labels = {**SMOKE_LABELS, "app.kubernetes.io/name": SMOKE_TEST}
    gpu = {
        "requests": {"cpu": "100m", "memory": "256Mi"},
        "limits": {GPU_RESOURCE: 1, "cpu": "1", "memory": "256Mi"},
    }
    # The toolkit mounts nvidia-smi into a container that asks for the utility capability.
    capabilities = [{"name": "NVIDIA_DRIVER_CAPABILITIES", "value": "compute,utility"}]
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": metadata(f"{SMOKE_TEST}-{digest}", settings.namespace, labels),
        "spec": {
            "backoffLimit": 0,
            "activeDeadlineSeconds": SMOKE_TEST_DEADLINE_S,
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "restartPolicy": "Never",
                    "tolerations": [GPU_TOLERATION],
                    # nvidia-smi and the sample need no root, no token and no writable root.
                    "automountServiceAccountToken": False,
                    "securityContext": {
                        "runAsNonRoot": True,
                        "runAsUser": SMOKE_TEST_UID,
                        "runAsGroup": SMOKE_TEST_UID,
                        "seccompProfile": {"type": "RuntimeDefault"},
                    },
                    "initContainers": [
                        {
                            "name": "nvidia-smi",
                            "image": image,
                            "command": ["nvidia-smi"],
                            "env": capabilities,
                            "resources": gpu,
                            "securityContext": CONTAINER_SECURITY,
                        }
                    ],
                    "containers": [
                        {"name": "vectoradd", "image": image, "env": capabilities,
                         "resources": gpu, "securityContext": CONTAINER_SECURITY}
                    ],
                },
            },
        },
    }  # fmt: skip


def render(settings: GpuOperatorSettings, versions: Versions) -> AddonRender:
    return AddonRender(
        name="gpu_operator",
        release=RELEASE,
        namespace=settings.namespace,
        chart=Chart.of(versions.gpu_operator),
        values=values(settings, versions),
        objects=[smoke_test_job(settings, versions)] if settings.smoke_test else [],
    )

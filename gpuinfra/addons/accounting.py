"""GPU-hours per team, project and namespace: the labels, the admission rule, the recordings.

Every pod that requests GPUs carries a ``team`` and a ``project`` label; a
ValidatingAdmissionPolicy refuses one that does not. kube-state-metrics exports the two labels
(``kube_pod_labels{label_team, label_project}``), the GPU Operator's DCGM exporter attributes
each GPU to the pod holding it, and the recording rules in ``data/gpu-accounting.yaml`` turn
both into GPUs allocated and used per team, project and namespace, once a minute.
"""

from __future__ import annotations

from importlib import resources
from typing import Any

import yaml

from gpuinfra.addons.base import GPU_RESOURCE, PROJECT_LABEL, TEAM_LABEL, metadata

COST_LABELS = (TEAM_LABEL, PROJECT_LABEL)
# What the recording rules record, and how often (their group's interval).
ALLOCATED = "namespace_team_project:gpu_allocated:sum"
USED = "namespace_team_project:gpu_used:sum"
SAMPLES_PER_HOUR = 60
POLICY_NAME = "gpuinfra-gpu-cost-labels"

# True when any container (init containers included) asks for a whole GPU or a MIG slice.
_REQUESTS_GPUS = " || ".join(
    f"(has(object.spec.{field}) && object.spec.{field}.exists(c, has(c.resources) && ("
    "(has(c.resources.limits) && c.resources.limits.exists(r, "
    f"r == '{GPU_RESOURCE}' || r.startsWith('nvidia.com/mig-'))) || "
    "(has(c.resources.requests) && c.resources.requests.exists(r, "
    f"r == '{GPU_RESOURCE}' || r.startsWith('nvidia.com/mig-'))))))"
    for field in ("containers", "initContainers")
)


def _has_label(label: str) -> str:
    return (
        f"has(object.metadata.labels) && '{label}' in object.metadata.labels && "
        f"object.metadata.labels['{label}'] != ''"
    )


def admission_objects(exempt_namespaces: list[str]) -> list[dict[str, Any]]:
    """The ValidatingAdmissionPolicy and its binding: GPU pods without the labels are refused."""
    policy = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": metadata(POLICY_NAME),
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {
                "resourceRules": [
                    {
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "operations": ["CREATE", "UPDATE"],
                        "resources": ["pods"],
                    }
                ]
            },
            "matchConditions": [{"name": "requests-gpus", "expression": _REQUESTS_GPUS}],
            "validations": [
                {
                    "expression": _has_label(label),
                    "message": f"a pod that requests GPUs needs the label '{label}' (its GPU-hours "
                    "are reported per team and project)",
                    "reason": "Invalid",
                }
                for label in COST_LABELS
            ],
        },
    }
    binding = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": metadata(POLICY_NAME),
        "spec": {
            "policyName": POLICY_NAME,
            "validationActions": ["Deny"],
            "matchResources": {
                "namespaceSelector": {
                    "matchExpressions": [
                        {
                            "key": "kubernetes.io/metadata.name",
                            "operator": "NotIn",
                            "values": sorted(exempt_namespaces),
                        }
                    ]
                }
            }
            if exempt_namespaces
            else {},
        },
    }
    return [policy, binding]


def kube_state_metrics_values() -> dict[str, Any]:
    """kube-state-metrics exports the pods' team and project labels (and only those)."""
    return {"metricLabelsAllowlist": [f"pods=[{','.join(COST_LABELS)}]"]}


def recording_rules() -> dict[str, Any]:
    """The GPU accounting rule groups, as a Prometheus rule file."""
    text = (
        resources.files("gpuinfra.addons").joinpath("data/gpu-accounting.yaml").read_text("utf-8")
    )
    rules: dict[str, Any] = yaml.safe_load(text)
    return rules

"""Fixtures for the add-on specs: the setting combinations every schema check runs over."""

from __future__ import annotations

from typing import Any

import pytest

from gpuinfra import addons, schemas
from gpuinfra.addons import AddonRender, AddonsSettings

# Every combination the schema checks cover: defaults, and each option switched on.
SCENARIOS: dict[str, dict[str, Any]] = {
    "defaults": {},
    "everything": {
        "gpuOperator": {
            "driverMode": "operator",
            "migStrategy": "mixed",
            "migProfiles": {"half": {"3g.71gb": 2}, "sevenths": {"1g.18gb": 7}},
            "migDefaultProfile": "half",
            "timeSlicingReplicas": 4,
        },
        "volcano": {
            "enabled": True,
            "actions": ["enqueue", "allocate", "preempt", "reclaim", "backfill"],
            "binpack": False,
            "queues": [
                {"name": "training", "weight": 4, "capability": {"nvidia.com/gpu": 16}},
                {"name": "research", "reclaimable": False, "capability": {"cpu": "64"}},
            ],
        },
        "kueue": {
            "cohort": "ml",
            "flavors": [
                {
                    "gpuType": "h100",
                    "gpus": 16,
                    "cpu": "192",
                    "memory": "2000Gi",
                    "efaInterfaces": 64,
                },
                {
                    "gpuType": "l4",
                    "gpus": 8,
                    "cpu": "96",
                    "memory": "384Gi",
                    "gpuBorrowingLimit": 4,
                },
            ],
            "teams": ["vision", "nlp"],
        },
        "triton": {
            "enabled": True,
            "gpuType": "l4",
            "modelRepository": {
                "s3": "s3://models-prod/triton",
                "region": "eu-west-1",
                "serviceAccount": "triton-models",
            },
            "models": [
                {
                    "name": "resnet50",
                    "backend": "onnxruntime",
                    "maxBatchSize": 32,
                    "dynamicBatching": {
                        "preferredBatchSize": [8, 16],
                        "maxQueueDelayMicroseconds": 500,
                    },
                    "instanceGroup": {"count": 2, "kind": "gpu"},
                    "versionPolicy": {"policy": "specific", "versions": [3, 1]},
                },
                {"name": "tokenizer", "backend": "python", "instanceGroup": {"kind": "cpu"}},
            ],
        },
        "prometheusStack": {
            "retention": "30d",
            "retentionSize": "90GB",
            "storageSize": "100Gi",
            "storageClass": "gp3",
            "alerting": {
                "secret": "alerting",
                "receivers": [
                    {"name": "oncall", "type": "pagerduty"},
                    {
                        "name": "team-chat",
                        "type": "wecom",
                        "corpId": "ww0123456789abcdef",
                        "agentId": "1000002",
                        "toParty": "2",
                    },
                    {
                        "name": "mail",
                        "type": "email",
                        "to": "gpu@example.com",
                        "sender": "alertmanager@example.com",
                        "smarthost": "smtp.example.com:587",
                        "authUsername": "alertmanager",
                        "authPasswordKey": "smtp-password",
                    },
                ],
                "routes": {"critical": ["oncall", "team-chat"], "warning": ["team-chat"]},
            },
        },
        "keda": {
            "enabled": True,
            "idleReclaim": [
                {"namespace": "dev", "deployment": "llm-sandbox"},
                {"namespace": "test", "deployment": "triton-canary", "replicas": 2},
            ],
            "idleHours": 6,
            "idleThresholdPercent": 5,
        },
        "loki": {"enabled": True, "retentionDays": 14, "storageClass": "gp3"},
        "alloy": {"enabled": True},
    },
    "time-slicing-single-mig": {
        "gpuOperator": {"migStrategy": "single", "timeSlicingReplicas": 2},
        "triton": {
            "enabled": True,
            "imageVariant": "vllm",
            "modelRepository": {"pvc": "models"},
            "models": [
                {"name": "llm", "backend": "vllm", "versionPolicy": {"policy": "all"}},
            ],
        },
        "volcano": {"enabled": True},
        "kueue": {"enabled": False},
    },
    # Three models isolated in serving groups (a whole GPU, a MIG slice, a time-sliced share),
    # one of them released to a canary behind a weighted HTTPRoute.
    "serving-groups": {
        "gpuOperator": {
            "migStrategy": "mixed",
            "migProfiles": {"half": {"3g.71gb": 2}},
            "migDefaultProfile": "all-disabled",
            "timeSlicingReplicas": 4,
        },
        "kueue": {
            "flavors": [
                {"gpuType": "h200", "gpus": 8, "cpu": "96", "memory": "1000Gi"},
                {
                    "gpuType": "h200-mig",
                    "gpus": 0,
                    "cpu": "96",
                    "memory": "1000Gi",
                    "migSlices": {"3g.71gb": 4},
                },
            ],
            "teams": ["serving"],
        },
        "triton": {
            "enabled": True,
            "gpuType": "h200",
            "modelRepository": {"s3": "s3://models-prod/triton", "region": "eu-west-1"},
            "gateway": {"name": "inference", "namespace": "gateways", "sectionName": "http"},
            "models": [
                {
                    "name": "bert",
                    "backend": "onnxruntime",
                    "maxBatchSize": 32,
                    "dynamicBatching": {"preferredBatchSize": [16, 32]},
                    "versionPolicy": {"policy": "specific", "versions": [2]},
                },
                {"name": "resnet50", "backend": "onnxruntime", "maxBatchSize": 8},
                {"name": "tokenizer", "backend": "python", "instanceGroup": {"kind": "cpu"}},
            ],
            "servingGroups": [
                {
                    "name": "bert",
                    "models": ["bert"],
                    "autoscaling": True,
                    "minReplicas": 2,
                    "maxReplicas": 6,
                    "canary": {
                        "weight": 10,
                        "versionPolicies": {"bert": {"policy": "specific", "versions": [3]}},
                    },
                },
                {
                    "name": "vision",
                    "models": ["resnet50"],
                    "gpuResource": "nvidia.com/mig-3g.71gb",
                    "nodeSelector": {"nvidia.com/mig.config": "half"},
                },
                {
                    "name": "text",
                    "models": ["tokenizer"],
                    # A share of a GPU the GPU Operator time-slices four ways.
                    "memory": "4Gi",
                },
            ],
        },
    },
}


def scenario_renders(name: str) -> list[AddonRender]:
    return addons.render_all(AddonsSettings.model_validate(SCENARIOS[name]))


@pytest.fixture(scope="session")
def crds() -> schemas.CrdSchemas:
    return schemas.CrdSchemas.pinned()


@pytest.fixture(scope="session")
def chart_values() -> dict[str, dict[str, Any]]:
    return schemas.pinned_chart_values()

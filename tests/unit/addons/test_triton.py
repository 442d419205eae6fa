"""Triton: model configs Triton parses, and a Deployment that serves them."""

from __future__ import annotations

import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

from gpuinfra import addons
from gpuinfra.errors import ConfigError, UsageError
from gpuinfra.versions import pinned

from .conftest import SCENARIOS, scenario_renders


def _triton(scenario: str) -> addons.AddonRender:
    (render,) = [r for r in scenario_renders(scenario) if r.name == "triton"]
    return render


@pytest.mark.parametrize("scenario", [s for s in SCENARIOS if "triton" in SCENARIOS[s]])
def test_every_config_pbtxt_parses_into_model_config(scenario: str) -> None:
    render = _triton(scenario)
    models = SCENARIOS[scenario]["triton"]["models"]
    configs = [p for p in render.files if "/configs/" not in p]
    assert sorted(configs) == sorted(f"models/{m['name']}/config.pbtxt" for m in models)
    for text in render.files.values():
        text_format.Parse(text, mc.ModelConfig())


def test_config_pbtxt_carries_the_settings() -> None:
    config = text_format.Parse(
        _triton("everything").files["models/resnet50/config.pbtxt"], mc.ModelConfig()
    )
    assert config.name == "resnet50"
    assert config.backend == "onnxruntime"
    assert config.max_batch_size == 32
    assert list(config.dynamic_batching.preferred_batch_size) == [8, 16]
    assert config.dynamic_batching.max_queue_delay_microseconds == 500
    (group,) = config.instance_group
    assert (group.count, group.kind) == (2, mc.ModelInstanceGroup.KIND_GPU)
    assert list(config.version_policy.specific.versions) == [1, 3]


def test_version_policies() -> None:
    all_versions = text_format.Parse(
        _triton("time-slicing-single-mig").files["models/llm/config.pbtxt"], mc.ModelConfig()
    )
    assert all_versions.version_policy.WhichOneof("policy_choice") == "all"
    tokenizer = text_format.Parse(
        _triton("everything").files["models/tokenizer/config.pbtxt"], mc.ModelConfig()
    )
    assert tokenizer.version_policy.latest.num_versions == 1
    assert not tokenizer.HasField("dynamic_batching")
    assert tokenizer.instance_group[0].kind == mc.ModelInstanceGroup.KIND_CPU


def test_deployment_runs_the_pinned_image_on_gpu_nodes() -> None:
    deployment = _triton("everything").objects[0]
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    triton = pinned().triton
    assert container["image"] == f"{triton.source.image}:{triton.tag}"
    assert container["resources"]["limits"]["nvidia.com/gpu"] == 1
    assert container["readinessProbe"]["httpGet"]["path"] == "/v2/health/ready"
    assert container["livenessProbe"]["httpGet"]["path"] == "/v2/health/live"
    assert "--model-repository=s3://models-prod/triton" in container["args"]
    assert {"name": "AWS_DEFAULT_REGION", "value": "eu-west-1"} in container["env"]
    assert pod["serviceAccountName"] == "triton-models"
    assert pod["nodeSelector"] == {"gpuinfra.dev/gpu-type": "l4"}
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod[
        "tolerations"
    ]


def test_a_pvc_repository_is_mounted_read_only() -> None:
    pod = _triton("time-slicing-single-mig").objects[0]["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert "--model-repository=/models" in container["args"]
    assert {"name": "models", "mountPath": "/models", "readOnly": True} in container["volumeMounts"]
    (volume,) = [v for v in pod["volumes"] if v["name"] == "models"]
    assert volume["persistentVolumeClaim"]["claimName"] == "models"


def test_metrics_port_is_scraped() -> None:
    kinds = {o["kind"]: o for o in _triton("everything").objects}
    ports = {p["name"]: p["port"] for p in kinds["Service"]["spec"]["ports"]}
    assert ports["metrics"] == 8002
    assert kinds["ServiceMonitor"]["spec"]["endpoints"][0]["port"] == "metrics"


@pytest.mark.parametrize(
    ("settings", "path", "message"),
    [
        (
            {"enabled": True},
            "",
            "modelRepository is required when triton is enabled",
        ),
        (
            {"modelRepository": {"s3": "s3://models/m", "pvc": "models"}},
            "modelRepository",
            "give exactly one of s3 or pvc",
        ),
        (
            {
                "models": [
                    {
                        "name": "m",
                        "backend": "onnxruntime",
                        "maxBatchSize": 8,
                        "dynamicBatching": {"preferredBatchSize": [16]},
                    }
                ]
            },
            "models[0]",
            "preferredBatchSize values must lie between 1 and maxBatchSize 8",
        ),
        (
            {"models": [{"name": "m", "backend": "onnx"}]},
            "models[0].backend",
            "'onnx' is not allowed",
        ),
        # Replica counts land in int32 fields of the Deployment and the HorizontalPodAutoscaler.
        (
            {"minReplicas": 1, "maxReplicas": 2**31},
            "maxReplicas",
            "input should be less than or equal to 2147483647, got 2147483648",
        ),
        # Each integer the ModelConfig protobuf takes, one past what its field holds.
        (
            {"models": [{"name": "m", "backend": "onnxruntime", "maxBatchSize": 2**31}]},
            "models[0].maxBatchSize",
            "input should be less than or equal to 2147483647, got 2147483648",
        ),
        (
            {
                "models": [
                    {
                        "name": "m",
                        "backend": "onnxruntime",
                        "maxBatchSize": 8,
                        "dynamicBatching": {"maxQueueDelayMicroseconds": 10**23},
                    }
                ]
            },
            "models[0].dynamicBatching.maxQueueDelayMicroseconds",
            "input should be less than or equal to 18446744073709551615, got "
            "100000000000000000000000",
        ),
        (
            {
                "models": [
                    {
                        "name": "m",
                        "backend": "onnxruntime",
                        "maxBatchSize": 8,
                        "dynamicBatching": {"preferredBatchSize": [8, 2**31]},
                    }
                ]
            },
            "models[0].dynamicBatching.preferredBatchSize[1]",
            "input should be less than or equal to 2147483647, got 2147483648",
        ),
        (
            {
                "models": [
                    {"name": "m", "backend": "onnxruntime", "instanceGroup": {"count": 2**31}}
                ]
            },
            "models[0].instanceGroup.count",
            "input should be less than or equal to 2147483647, got 2147483648",
        ),
        (
            {
                "models": [
                    {"name": "m", "backend": "onnxruntime", "versionPolicy": {"latest": 2**32}}
                ]
            },
            "models[0].versionPolicy.latest",
            "input should be less than or equal to 4294967295, got 4294967296",
        ),
        (
            {
                "models": [
                    {
                        "name": "m",
                        "backend": "onnxruntime",
                        "versionPolicy": {"policy": "specific", "versions": [1, 2**63]},
                    }
                ]
            },
            "models[0].versionPolicy.versions[1]",
            "input should be less than or equal to 9223372036854775807, got 9223372036854775808",
        ),
        (
            {
                "models": [
                    {
                        "name": "m",
                        "backend": "onnxruntime",
                        "versionPolicy": {"policy": "specific", "versions": [0]},
                    }
                ]
            },
            "models[0].versionPolicy.versions[0]",
            "input should be greater than or equal to 1, got 0",
        ),
    ],
)
def test_bad_settings_name_the_key(settings: dict[str, object], path: str, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        addons.render("triton", settings, file="stacks/Pulumi.dev.yaml")
    (problem,) = caught.value.problems
    assert problem.file == "stacks/Pulumi.dev.yaml"
    assert problem.path == path
    assert problem.message.startswith(message)


def test_the_largest_values_the_model_config_holds_are_written() -> None:
    settings = {
        "modelRepository": {"pvc": "models"},
        "models": [
            {
                "name": "m",
                "backend": "onnxruntime",
                "maxBatchSize": 2**31 - 1,
                "dynamicBatching": {
                    "preferredBatchSize": [2**31 - 1],
                    "maxQueueDelayMicroseconds": 2**64 - 1,
                },
                "instanceGroup": {"count": 2**31 - 1},
                "versionPolicy": {"policy": "specific", "versions": [2**63 - 1]},
            }
        ],
    }
    render = addons.render("triton", settings)
    config = text_format.Parse(render.files["models/m/config.pbtxt"], mc.ModelConfig())
    assert config.max_batch_size == 2**31 - 1
    assert list(config.dynamic_batching.preferred_batch_size) == [2**31 - 1]
    assert config.dynamic_batching.max_queue_delay_microseconds == 2**64 - 1
    assert config.instance_group[0].count == 2**31 - 1
    assert list(config.version_policy.specific.versions) == [2**63 - 1]


def test_rendering_without_a_model_repository_says_what_is_missing() -> None:
    with pytest.raises(UsageError, match="set modelRepository"):
        addons.render("triton")


def test_the_autoscaler_owns_the_replica_count() -> None:
    settings = {
        "enabled": True,
        "modelRepository": {"pvc": "models"},
        "minReplicas": 2,
        "maxReplicas": 6,
        "autoscaling": True,
    }
    kinds = {o["kind"]: o for o in addons.render("triton", settings).objects}
    assert "replicas" not in kinds["Deployment"]["spec"]
    assert kinds["HorizontalPodAutoscaler"]["apiVersion"] == "autoscaling/v2"
    hpa = kinds["HorizontalPodAutoscaler"]["spec"]
    assert (hpa["minReplicas"], hpa["maxReplicas"]) == (2, 6)
    assert hpa["scaleTargetRef"]["name"] == kinds["Deployment"]["metadata"]["name"]


def test_without_the_autoscaler_the_deployment_runs_min_replicas() -> None:
    settings = {"enabled": True, "modelRepository": {"pvc": "models"}, "minReplicas": 2}
    kinds = {o["kind"]: o for o in addons.render("triton", settings).objects}
    assert kinds["Deployment"]["spec"]["replicas"] == 2
    assert "HorizontalPodAutoscaler" not in kinds

"""Triton's serving groups: each its own Deployment, Service, GPU resource and autoscaling;
a canary beside stable behind a weighted HTTPRoute."""

from __future__ import annotations

from typing import Any

import pytest

from gpuinfra import addons
from gpuinfra.addons import triton
from gpuinfra.errors import ConfigError

from .conftest import SCENARIOS, scenario_renders


def _objects(scenario: str) -> dict[tuple[str, str], dict[str, Any]]:
    (render,) = [r for r in scenario_renders(scenario) if r.name == "triton"]
    return {(o["kind"], o["metadata"]["name"]): o for o in render.objects}


def _pod(deployment: dict[str, Any]) -> dict[str, Any]:
    pod: dict[str, Any] = deployment["spec"]["template"]["spec"]
    return pod


def _args(deployment: dict[str, Any]) -> list[str]:
    args: list[str] = _pod(deployment)["containers"][0]["args"]
    return args


def test_without_groups_one_deployment_serves_every_model_as_before() -> None:
    objects = _objects("everything")
    deployments = [name for kind, name in objects if kind == "Deployment"]
    assert deployments == ["triton"]
    deployment = objects[("Deployment", "triton")]
    # The selector of an existing Deployment cannot change: it stays what it was.
    assert deployment["spec"]["selector"] == {"matchLabels": {"app.kubernetes.io/name": "triton"}}
    assert "--model-control-mode=none" in _args(deployment)
    assert not any(a.startswith("--load-model") for a in _args(deployment))
    assert not [k for k in objects if k[0] == "HTTPRoute"]


def test_each_group_loads_only_its_own_models() -> None:
    objects = _objects("serving-groups")
    loaded = {
        name: sorted(a.split("=", 1)[1] for a in _args(obj) if a.startswith("--load-model="))
        for (kind, name), obj in objects.items()
        if kind == "Deployment"
    }
    assert loaded == {
        "triton-bert": ["bert"],
        "triton-bert-canary": ["bert"],
        "triton-vision": ["resnet50"],
        "triton-text": ["tokenizer"],
    }
    for (kind, name), obj in objects.items():
        if kind == "Deployment":
            assert "--model-control-mode=explicit" in _args(obj), name


def test_each_group_has_its_own_gpu_resource_node_selector_and_size() -> None:
    objects = _objects("serving-groups")
    vision = _pod(objects[("Deployment", "triton-vision")])
    limits = vision["containers"][0]["resources"]["limits"]
    assert limits["nvidia.com/mig-3g.71gb"] == 1
    assert "nvidia.com/gpu" not in limits
    assert vision["nodeSelector"] == {
        "gpuinfra.dev/gpu-type": "h200",
        "nvidia.com/mig.config": "half",
    }
    text = _pod(objects[("Deployment", "triton-text")])
    assert text["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": 1, "memory": "4Gi"}
    # Unset fields take triton's own settings.
    assert text["containers"][0]["resources"]["requests"]["cpu"] == "4"


def test_a_group_scales_on_its_own_and_its_canary_runs_a_fixed_count() -> None:
    objects = _objects("serving-groups")
    hpa = objects[("HorizontalPodAutoscaler", "triton-bert")]
    assert hpa["spec"]["scaleTargetRef"]["name"] == "triton-bert"
    assert (hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"]) == (2, 6)
    assert "replicas" not in objects[("Deployment", "triton-bert")]["spec"]
    assert objects[("Deployment", "triton-bert-canary")]["spec"]["replicas"] == 1
    assert ("HorizontalPodAutoscaler", "triton-bert-canary") not in objects
    assert ("HorizontalPodAutoscaler", "triton-vision") not in objects


def test_each_service_selects_only_its_own_pods() -> None:
    objects = _objects("serving-groups")
    services = {name: obj for (kind, name), obj in objects.items() if kind == "Service"}
    deployments = {name: obj for (kind, name), obj in objects.items() if kind == "Deployment"}
    assert sorted(services) == sorted(deployments)
    for name, svc in services.items():
        selector = svc["spec"]["selector"].items()
        matched = [
            d
            for d, obj in deployments.items()
            if selector <= obj["spec"]["template"]["metadata"]["labels"].items()
        ]
        assert matched == [name]


def test_the_canary_serves_its_own_versions_from_its_own_config() -> None:
    (render,) = [r for r in scenario_renders("serving-groups") if r.name == "triton"]
    objects = {(o["kind"], o["metadata"]["name"]): o for o in render.objects}
    assert "--model-config-name=canary" in _args(objects[("Deployment", "triton-bert-canary")])
    assert not any(
        a.startswith("--model-config-name") for a in _args(objects[("Deployment", "triton-bert")])
    )
    assert "versions: 3" in render.files["models/bert/configs/canary.pbtxt"]
    assert "versions: 2" in render.files["models/bert/config.pbtxt"]
    # Only a model whose canary policy differs gets a config of its own.
    assert sorted(p for p in render.files if "/configs/" in p) == [
        "models/bert/configs/canary.pbtxt"
    ]
    # Stable and canary roll apart: a canary's policy changes only the canary's pod template.
    stable_hash = objects[("Deployment", "triton-bert")]["spec"]["template"]["metadata"]
    canary_hash = objects[("Deployment", "triton-bert-canary")]["spec"]["template"]["metadata"]
    assert stable_hash["annotations"] != canary_hash["annotations"]


def test_the_route_splits_the_groups_paths_by_the_canary_weight() -> None:
    route = _objects("serving-groups")[("HTTPRoute", "triton-bert")]
    assert route["spec"]["parentRefs"] == [
        {"name": "inference", "namespace": "gateways", "sectionName": "http"}
    ]
    (rule,) = route["spec"]["rules"]
    assert rule["matches"] == [{"path": {"type": "PathPrefix", "value": "/v2/models/bert"}}]
    assert [(b["name"], b["port"], b["weight"]) for b in rule["backendRefs"]] == [
        ("triton-bert", 8000, 90),
        ("triton-bert-canary", 8000, 10),
    ]
    vision = _objects("serving-groups")[("HTTPRoute", "triton-vision")]
    assert [(b["name"], b["weight"]) for b in vision["spec"]["rules"][0]["backendRefs"]] == [
        ("triton-vision", 100)
    ]


def _with_canary(canary: dict[str, Any] | None) -> dict[str, Any]:
    settings = dict(SCENARIOS["serving-groups"]["triton"])
    groups = [dict(g) for g in settings["servingGroups"]]
    if canary is None:
        groups[0].pop("canary")
    else:
        groups[0]["canary"] = canary
    settings["servingGroups"] = groups
    return settings


def _weights(settings: dict[str, Any]) -> dict[str, int]:
    render = addons.render("triton", settings)
    (route,) = [
        o
        for o in render.objects
        if o["kind"] == "HTTPRoute" and o["metadata"]["name"] == "triton-bert"
    ]
    return {b["name"]: b["weight"] for b in route["spec"]["rules"][0]["backendRefs"]}


def test_rolling_back_is_weight_zero_or_no_canary() -> None:
    assert _weights(_with_canary({"weight": 0})) == {"triton-bert": 100, "triton-bert-canary": 0}
    assert _weights(_with_canary({"weight": 100})) == {"triton-bert": 0, "triton-bert-canary": 100}
    removed = _with_canary(None)
    assert _weights(removed) == {"triton-bert": 100}
    names = [o["metadata"]["name"] for o in addons.render("triton", removed).objects]
    assert "triton-bert-canary" not in names
    assert not [p for p in addons.render("triton", removed).files if "/configs/" in p]


def _groups(*groups: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {
        "models": [
            {"name": "a", "backend": "python"},
            {"name": "b", "backend": "python"},
        ],
        "servingGroups": list(groups),
        **extra,
    }


@pytest.mark.parametrize(
    ("settings", "path", "message"),
    [
        (
            _groups({"name": "g", "models": ["a", "b"]}, {"name": "h", "models": ["b"]}),
            "servingGroups",
            "model 'b' is in serving groups 'g' and 'h'; a model belongs to exactly one group",
        ),
        (
            _groups({"name": "g", "models": ["a", "b", "c"]}),
            "servingGroups",
            "serving group 'g' names model 'c', which is not in models (declared: a, b)",
        ),
        (
            _groups({"name": "g", "models": ["a"]}),
            "servingGroups",
            "model 'b' is in no serving group",
        ),
        (
            _groups({"name": "g", "models": ["a"]}, {"name": "g", "models": ["b"]}),
            "servingGroups",
            "duplicate serving group names: g",
        ),
        (
            _groups({"name": "g", "models": ["a", "b"], "gpuResource": "nvidia.com/mig-3g"}),
            "servingGroups[0].gpuResource",
            "'nvidia.com/mig-3g' is not a GPU resource",
        ),
        (
            _groups({"name": "g", "models": ["a", "b"], "gpuResource": "amd.com/gpu"}),
            "servingGroups[0].gpuResource",
            "'amd.com/gpu' is not a GPU resource",
        ),
        (
            _groups({"name": "g", "models": ["a", "b"], "canary": {"weight": 10}}),
            "servingGroups",
            "serving group 'g' has a canary, whose weight an HTTPRoute carries: set gateway",
        ),
        (
            _groups(
                {"name": "g", "models": ["a", "b"], "canary": {"weight": 101}},
                gateway={"name": "gw"},
            ),
            "servingGroups[0].canary.weight",
            "input should be less than or equal to 100",
        ),
        (
            _groups(
                {
                    "name": "g",
                    "models": ["a"],
                    "canary": {"weight": 5, "versionPolicies": {"b": {"policy": "all"}}},
                },
                {"name": "h", "models": ["b"]},
                gateway={"name": "gw"},
            ),
            "servingGroups",
            "serving group 'g': canary.versionPolicies names 'b', not a model of the group (a)",
        ),
        (
            _groups(
                {"name": "g", "models": ["a"], "canary": {"weight": 10}},
                {"name": "g-canary", "models": ["b"]},
                gateway={"name": "gw"},
            ),
            "servingGroups",
            "serving group 'g-canary' is named as the canary of group 'g': both would be "
            "Deployment and Service triton-g-canary, one replacing the other (rename the group)",
        ),
        (
            _groups({"name": "g" * 50, "models": ["a", "b"]}),
            "servingGroups[0].name",
            "'ggggggggggggggg ... gggggggg' has 50 characters (allowed: at most 49: the "
            "canary's objects are named triton-<group>-canary, a Kubernetes name of at most 63 "
            "characters)",
        ),
        (
            _groups({"name": "g", "models": ["a", "b"], "minReplicas": 3}),
            "servingGroups",
            "serving group 'g': minReplicas 3 is greater than maxReplicas 2",
        ),
    ],
)
def test_bad_groups_name_the_key(settings: dict[str, Any], path: str, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        addons.render("triton", settings, file="stacks/Pulumi.dev.yaml")
    (problem,) = caught.value.problems
    assert problem.path == path
    assert problem.message.startswith(message)


def test_the_longest_group_name_gives_its_canary_a_name_of_63_characters() -> None:
    """The bound is the canary's: the longest name its Service, a DNS label, can have."""
    settings = _groups(
        {"name": "g" * 49, "models": ["a", "b"], "canary": {"weight": 10}},
        gateway={"name": "gw"},
        modelRepository={"pvc": "models"},
    )
    render = addons.render("triton", settings)
    names = {o["metadata"]["name"] for o in render.objects if o["kind"] == "Service"}
    assert names == {f"triton-{'g' * 49}", f"triton-{'g' * 49}-canary"}
    assert max(len(n) for n in names) == 63


def test_served_models_name_each_policy_some_pod_serves() -> None:
    settings = addons.AddonsSettings.model_validate(SCENARIOS["serving-groups"]).triton
    served = [(m.name, m.version_policy.describe()) for m in triton.served_models(settings)]
    assert ("bert", "specific [2]") in served
    assert ("bert", "specific [3]") in served

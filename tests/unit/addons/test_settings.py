"""Add-on settings: what stack files and role variables may say, and what each choice renders."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuinfra import addons, config
from gpuinfra.addons import ADDONS, AddonsSettings, GpuOperatorSettings
from gpuinfra.errors import ConfigError, UsageError
from gpuinfra.loading import validate
from gpuinfra.site import Host, Site
from gpuinfra.versions import Versions, pinned

from .conftest import scenario_renders


def _values(addon: str, settings: dict[str, Any] | None = None) -> dict[str, Any]:
    return addons.render(addon, settings).values


def test_host_driver_mode_leaves_driver_and_toolkit_to_the_node() -> None:
    values = _values("gpu_operator")
    assert values["driver"]["enabled"] is False
    assert values["toolkit"]["enabled"] is False
    operator = _values("gpu_operator", {"driver_mode": "operator"})
    assert operator["driver"]["enabled"] is True
    assert operator["toolkit"]["enabled"] is True


def test_operand_versions_follow_versions_yaml() -> None:
    pins = pinned()
    bumped = Versions.model_validate(
        {
            **pins.model_dump(exclude_none=True),
            "gpu_operator": {
                **pins.gpu_operator.model_dump(exclude_none=True),
                "operands": {**pins.gpu_operator.operands, "driver": "595.99.01"},
            },
        }
    )
    values = addons.render("gpu_operator", versions=bumped).values
    assert values["driver"]["version"] == "595.99.01"
    assert values["devicePlugin"]["version"] == pins.gpu_operator.operands["device_plugin"]
    assert values["dcgmExporter"]["version"] == pins.gpu_operator.operands["dcgm_exporter"]
    chart = addons.render("gpu_operator", versions=bumped).chart
    assert chart is not None
    assert chart.version == pins.gpu_operator.version


def test_mig_profiles_become_the_mig_manager_config() -> None:
    values = _values(
        "gpu_operator",
        {"mig_strategy": "mixed", "mig_profiles": {"half": {"3g.71gb": 2}}},
    )
    assert values["mig"]["strategy"] == "mixed"
    config_map = values["migManager"]["config"]
    assert config_map["default"] == "all-disabled"
    parted = yaml.safe_load(config_map["data"]["config.yaml"])
    assert parted["mig-configs"]["half"] == [
        {"devices": "all", "mig-enabled": True, "mig-devices": {"3g.71gb": 2}}
    ]
    assert _values("gpu_operator")["migManager"]["enabled"] is False


def test_time_slicing_shares_each_gpu() -> None:
    values = _values("gpu_operator", {"timeSlicingReplicas": 4})
    plugin = values["devicePlugin"]["config"]
    shared = yaml.safe_load(plugin["data"][plugin["default"]])
    assert shared["sharing"]["timeSlicing"]["resources"] == [
        {"name": "nvidia.com/gpu", "replicas": 4}
    ]
    assert "config" not in _values("gpu_operator")["devicePlugin"]


def test_gpu_daemonsets_tolerate_the_gpu_taint(
    chart_values: dict[str, dict[str, Any]],
) -> None:
    toleration = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    assert _values("gpu_operator")["daemonsets"]["tolerations"] == [toleration]
    # Feature discovery must run on GPU nodes too; the spec relies on the chart's default.
    assert "node-feature-discovery" not in _values("gpu_operator")
    nfd = chart_values["gpu-operator"]["node-feature-discovery"]["worker"]["tolerations"]
    assert toleration in nfd


def test_kueue_without_flavors_installs_priorities_only() -> None:
    kinds = {o["kind"] for o in addons.render("kueue").objects}
    # Besides the NetworkPolicies every add-on namespace gets.
    assert kinds - {"NetworkPolicy"} == {"WorkloadPriorityClass"}


def test_kueue_flavors_select_nodes_by_gpu_type() -> None:
    (kueue,) = [r for r in scenario_renders("everything") if r.name == "kueue"]
    by_kind: dict[str, list[dict[str, Any]]] = {}
    for obj in kueue.objects:
        by_kind.setdefault(obj["kind"], []).append(obj)
    flavors = {f["metadata"]["name"]: f["spec"] for f in by_kind["ResourceFlavor"]}
    assert flavors["h100"]["nodeLabels"] == {"gpuinfra.dev/gpu-type": "h100"}
    (queue,) = by_kind["ClusterQueue"]
    assert queue["apiVersion"] == "kueue.x-k8s.io/v1beta2"
    assert queue["spec"]["cohortName"] == "ml"
    (group,) = queue["spec"]["resourceGroups"]
    l4 = next(f for f in group["flavors"] if f["name"] == "l4")
    gpu = next(r for r in l4["resources"] if r["name"] == "nvidia.com/gpu")
    assert gpu == {"name": "nvidia.com/gpu", "nominalQuota": 8, "borrowingLimit": 4}
    assert sorted(q["metadata"]["namespace"] for q in by_kind["LocalQueue"]) == ["nlp", "vision"]
    assert len(by_kind["WorkloadPriorityClass"]) == 3


def test_volcano_queues_carry_weight_capability_and_reclaimable() -> None:
    (volcano,) = [r for r in scenario_renders("everything") if r.name == "volcano"]
    queues = {q["metadata"]["name"]: q["spec"] for q in volcano.objects}
    assert queues["training"] == {
        "weight": 4,
        "reclaimable": True,
        "capability": {"nvidia.com/gpu": 16},
    }
    assert queues["research"]["reclaimable"] is False
    conf = yaml.safe_load(volcano.values["custom"]["scheduler_config_override"])
    assert conf["actions"] == "enqueue, allocate, preempt, reclaim, backfill"
    assert volcano.values["basic"]["image_tag_version"] == f"v{pinned().volcano.version}"


def test_render_all_is_in_install_order_and_skips_disabled() -> None:
    names = [r.name for r in scenario_renders("everything")]
    assert names == [
        "prometheus_stack",
        "gpu_operator",
        "volcano",
        "kueue",
        "triton",
        "keda",
        "loki",
        "alloy",
    ]
    assert [r.name for r in scenario_renders("defaults")] == [
        "prometheus_stack",
        "gpu_operator",
        "kueue",
    ]
    assert set(ADDONS) == set(AddonsSettings.model_fields)


def test_rendering_is_deterministic() -> None:
    assert scenario_renders("everything") == scenario_renders("everything")


def test_camel_and_snake_case_are_both_accepted() -> None:
    camel = AddonsSettings.model_validate({"gpuOperator": {"migStrategy": "single"}})
    snake = AddonsSettings.model_validate({"gpu_operator": {"mig_strategy": "single"}})
    assert camel == snake
    assert camel.gpu_operator.mig_strategy == "single"


def test_stack_file_mistakes_name_the_key_as_written() -> None:
    document = {"config": {"gpuinfra:addons": {"gpuOperator": {"migStrategy": "singel"}}}}
    with pytest.raises(ConfigError) as caught:
        config.parse_stack(document, "stacks/Pulumi.dev.yaml")
    problems = [p for p in caught.value.problems if "addons" in p.path]
    assert [str(p) for p in problems] == [
        "stacks/Pulumi.dev.yaml: config.gpuinfra:addons.gpuOperator.migStrategy: 'singel' is "
        "not allowed; did you mean 'single'? (allowed: 'mixed', 'none' or 'single')"
    ]


def test_role_variables_map_onto_settings() -> None:
    settings = addons.settings_from_role_vars(
        "gpu_operator",
        {"gpu_operator_mig_strategy": "mixed", "gpu_operator_driver_mode": "operator", "x": 1},
    )
    assert settings == GpuOperatorSettings(mig_strategy="mixed", driver_mode="operator")


def test_a_misspelled_role_variable_is_named_with_a_suggestion() -> None:
    with pytest.raises(ConfigError) as caught:
        addons.settings_from_role_vars(
            "volcano", {"volcano_queus": []}, file="inventory/site/group_vars/all.yml"
        )
    assert caught.value.lines() == [
        "inventory/site/group_vars/all.yml: volcano_queus: unknown variable of role 'volcano'; "
        "did you mean 'volcano_queues'?"
    ]


def _triton_model(**batching: Any) -> dict[str, Any]:
    return {"name": "resnet50", "backend": "onnxruntime", "dynamic_batching": batching}


def test_a_role_variables_mistake_names_keys_as_the_site_writes_them() -> None:
    # The model's own check names the keys; a site writes them in snake_case.
    variables = {
        "triton_enabled": True,
        "triton_model_repository": {"pvc": "models"},
        "triton_models": [{**_triton_model(preferred_batch_size=[8, 64]), "max_batch_size": 32}],
    }
    with pytest.raises(ConfigError) as caught:
        addons.settings_from_role_vars("triton", variables, file="group_vars/all/triton.yml")
    assert caught.value.lines() == [
        "group_vars/all/triton.yml: triton_models[0].dynamic_batching.preferred_batch_size[1]: "
        "preferred_batch_size values must lie between 1 and max_batch_size 32"
    ]


def test_a_stack_files_mistake_names_keys_as_the_stack_writes_them() -> None:
    document = {
        "config": {
            "gpuinfra:addons": {
                "triton": {
                    "enabled": True,
                    "modelRepository": {"pvc": "models"},
                    "models": [
                        {
                            "name": "resnet50",
                            "backend": "onnxruntime",
                            "maxBatchSize": 32,
                            "dynamicBatching": {"preferredBatchSize": [8, 64]},
                        }
                    ],
                }
            }
        }
    }
    with pytest.raises(ConfigError) as caught:
        config.parse_stack(document, "stacks/Pulumi.dev.yaml")
    assert any(
        "preferredBatchSize values must lie between 1 and maxBatchSize 32" in line
        for line in caught.value.lines()
    ), caught.value.lines()


@pytest.mark.parametrize(
    ("addon", "settings", "path", "message"),
    [
        ("gpu_operator", {"migProfiles": {"a": {"1g.10gb": 1}}}, "", "migProfiles need"),
        (
            "gpu_operator",
            {"migStrategy": "single", "migProfiles": {"a": {"big": 1}}},
            "migProfiles",
            "'big' in 'a' is not a MIG profile",
        ),
        (
            "gpu_operator",
            {"timeSlicingReplicas": 0},
            "timeSlicingReplicas",
            "input should be greater than or equal to 1",
        ),
        (
            "volcano",
            {"queues": [{"name": "a", "capability": {"cpu": "lots"}}]},
            "queues[0].capability.cpu",
            "'lots' is not a resource quantity (allowed: a whole number such as 8, or a "
            "Kubernetes quantity string",
        ),
        ("kueue", {"teams": ["ml"]}, "", "teams need at least one flavor"),
        (
            "kueue",
            {
                "flavors": [{"gpuType": "l4", "gpus": 1, "cpu": "1", "memory": "1Gi"}],
                "teams": ["ml", "default"],
            },
            "teams[1]",
            "'default' is the cluster's own namespace, not a team's",
        ),
        (
            "kueue",
            {"priorityClasses": [{"name": "a", "value": 2**31}]},
            "priorityClasses[0].value",
            "input should be less than or equal to 2147483647, got 2147483648",
        ),
        (
            "kueue",
            {"priorityClasses": [{"name": "a", "value": -(2**31) - 1}]},
            "priorityClasses[0].value",
            "input should be greater than or equal to -2147483648",
        ),
        (
            "kueue",
            {"priorityClasses": [{"name": "a", "value": 1, "description": "x" * 2049}]},
            "priorityClasses[0].description",
            "string should have at most 2048 characters",
        ),
        ("prometheus_stack", {"retention": "forever"}, "retention", "string should match pattern"),
    ],
)
def test_bad_settings(addon: str, settings: dict[str, Any], path: str, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        addons.render(addon, settings, file="f.yaml")
    (problem,) = caught.value.problems
    assert (problem.path, problem.message[: len(message)]) == (path, message)


def test_an_unknown_addon_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="did you mean 'kueue'"):
        addons.render("kueu")


def _site(*hosts: tuple[str, dict[str, Any], str]) -> Site:
    return Site(
        name="lab",
        path=Path("inventory/lab"),
        hosts={
            name: Host(name=name, vars=variables, origin=dict.fromkeys(variables, origin))
            for name, variables, origin in hosts
        },
        groups={},
    )


def test_site_settings_come_from_role_variables() -> None:
    site = _site(
        ("gpu1", {"kueue_cohort": "ml", "volcano_enabled": True}, "group_vars/all.yml"),
        ("gpu2", {"kueue_cohort": "ml", "volcano_enabled": True}, "group_vars/all.yml"),
    )
    settings = addons.settings_from_site(site)
    assert settings.kueue.cohort == "ml"
    assert settings.volcano.enabled is True


def test_site_settings_that_differ_between_hosts_are_refused() -> None:
    site = _site(
        ("gpu1", {"gpu_operator_mig_strategy": "single"}, "group_vars/all.yml"),
        ("gpu2", {"gpu_operator_mig_strategy": "mixed"}, "host_vars/gpu2.yml"),
    )
    with pytest.raises(ConfigError) as caught:
        addons.settings_from_site(site)
    (problem,) = caught.value.problems
    assert (problem.file, problem.path) == ("host_vars/gpu2.yml", "gpu_operator_mig_strategy")
    assert problem.message.startswith("differs from group_vars/all.yml (host gpu2)")


def test_a_team_in_an_enabled_add_ons_namespace_is_refused_at_the_team() -> None:
    flavor = {"gpuType": "l4", "gpus": 1, "cpu": "1", "memory": "1Gi"}
    with pytest.raises(ConfigError) as caught:
        validate(
            AddonsSettings,
            {"kueue": {"flavors": [flavor], "teams": ["ml", "gpu-operator"]}},
            "f.yaml",
        )
    assert caught.value.lines() == [
        "f.yaml: kueue.teams[1]: 'gpu-operator' is the namespace of the GPU Operator add-on; "
        "give the team a namespace of its own"
    ]
    # A disabled add-on leaves its namespace free.
    settings = AddonsSettings.model_validate(
        {"kueue": {"flavors": [flavor], "teams": ["loki"]}, "loki": {"enabled": False}}
    )
    assert settings.kueue.teams == ["loki"]


def test_a_site_team_in_an_add_ons_namespace_names_the_role_variable_and_its_file() -> None:
    flavors = [{"gpu_type": "l4", "gpus": 1, "cpu": "1", "memory": "1Gi"}]
    site = _site(
        ("gpu1", {"kueue_flavors": flavors, "kueue_teams": ["ml", "monitoring"]}, "kueue.yml"),
    )
    with pytest.raises(ConfigError) as caught:
        addons.settings_from_site(site)
    assert caught.value.lines() == [
        "kueue.yml: kueue_teams[1]: 'monitoring' is the namespace of the Prometheus stack "
        "add-on; give the team a namespace of its own"
    ]


def test_a_plays_variables_give_every_add_on_checked_alone_and_across_add_ons() -> None:
    """What the Ansible add-on play resolved: the same checks as a site's files get."""
    flavors = [{"gpu_type": "l4", "gpus": 1, "cpu": "1", "memory": "1Gi"}]
    play = {"kueue_flavors": flavors, "kueue_teams": ["ml"], "volcano_enabled": "yes"}
    settings = addons.settings_from_play({**play, "ansible_check_mode": False})
    assert (settings.kueue.teams, settings.volcano.enabled) == (["ml"], True)

    def file(addon: str) -> str:
        return f"variables of role {addon}"

    with pytest.raises(ConfigError) as caught:
        addons.settings_from_play({**play, "kueue_teams": ["ml", "monitoring"]}, file=file)
    assert caught.value.lines() == [
        "variables of role kueue: kueue_teams[1]: 'monitoring' is the namespace of the "
        "Prometheus stack add-on; give the team a namespace of its own"
    ]
    # A disabled add-on leaves its namespace free.
    addons.settings_from_play(
        {**play, "kueue_teams": ["monitoring"], "prometheus_stack_enabled": False}
    )
    # Each add-on's own mistakes, all of them, before any check across add-ons.
    with pytest.raises(ConfigError) as caught:
        addons.settings_from_play({"kueue_teems": [], "triton_cpu": "4 cores"}, file=file)
    assert [line.split(":")[0:2] for line in caught.value.lines()] == [
        ["variables of role kueue", " kueue_teems"],
        ["variables of role triton", " triton_cpu"],
    ]


@pytest.mark.parametrize("addon", ADDONS)
def test_every_addon_refuses_a_namespace_kubernetes_would_refuse(addon: str) -> None:
    with pytest.raises(ConfigError) as caught:
        addons.settings_from_role_vars(
            addon, {f"{addon}_namespace": "Bad_NS!!"}, file="inventory/site/group_vars/all.yml"
        )
    assert caught.value.lines() == [
        f"inventory/site/group_vars/all.yml: {addon}_namespace: 'Bad_NS!!' is not a Kubernetes "
        "name (allowed: at most 63 lowercase letters, digits and '-', starting and ending with a "
        "letter or digit)"
    ]


OPERATOR_EXEMPT = (
    "lacks '{ns}', the GPU Operator's namespace, whose pods request GPUs without team or "
    "project labels: the cost policy would refuse them (allowed: a list with '{ns}')"
)


@pytest.mark.parametrize(
    "settings",
    [
        {"gpuOperator": {"namespace": "nvidia"}},
        {"prometheusStack": {"costLabelsExemptNamespaces": ["kube-system"]}},
    ],
)
def test_the_cost_policy_must_exempt_the_gpu_operators_namespace(settings: dict[str, Any]) -> None:
    namespace = settings.get("gpuOperator", {}).get("namespace", "gpu-operator")
    with pytest.raises(ConfigError) as caught:
        validate(AddonsSettings, settings, "f.yaml")
    assert caught.value.lines() == [
        "f.yaml: prometheusStack.costLabelsExemptNamespaces: "
        + OPERATOR_EXEMPT.format(ns=namespace)
    ]
    # Without the policy, or without the operator, nothing is refused.
    for off in (
        {"prometheusStack": {"requireCostLabels": False}},
        {"gpuOperator": {"enabled": False}},
    ):
        merged = {key: {**settings.get(key, {}), **off.get(key, {})} for key in {*settings, *off}}
        validate(AddonsSettings, merged, "f.yaml")


def test_a_site_whose_cost_policy_would_refuse_the_gpu_operator_names_the_role_variable() -> None:
    with pytest.raises(ConfigError) as caught:
        addons.settings_from_play(
            {"prometheus_stack_cost_labels_exempt_namespaces": ["kube-system"]},
            file=lambda addon: f"group_vars/all/{addon}.yml",
        )
    assert caught.value.lines() == [
        "group_vars/all/prometheus_stack.yml: prometheus_stack_cost_labels_exempt_namespaces: "
        + OPERATOR_EXEMPT.format(ns="gpu-operator")
    ]


def test_kueue_priority_classes_at_their_bounds_are_rendered() -> None:
    classes = [
        {"name": "top", "value": 2**31 - 1, "description": "x" * 2048},
        {"name": "bottom", "value": -(2**31)},
    ]
    objects = addons.render("kueue", {"priorityClasses": classes}).objects
    values = {
        o["metadata"]["name"]: o["value"] for o in objects if o["kind"] == "WorkloadPriorityClass"
    }
    assert values == {"top": 2**31 - 1, "bottom": -(2**31)}


PORT_ALLOWED = "(allowed: 1-65535 in decimal digits, e.g. http://loki.logs.svc:3100)"


@pytest.mark.parametrize("port", ["+80", " 80", "0x50", "8_0", "\u0668\u0660", "0", "65536", ""])
@pytest.mark.parametrize(
    ("addon", "key", "path"),
    [
        ("prometheus_stack", "lokiDatasourceUrl", ""),
        ("alloy", "lokiPushAddress", "/loki/api/v1/push"),
        ("keda", "prometheusAddress", ""),
    ],
)
def test_a_service_urls_port_is_plain_decimal_digits(
    addon: str, key: str, path: str, port: str
) -> None:
    url = f"http://svc.ns.svc:{port}{path}"
    with pytest.raises(ConfigError) as caught:
        addons.render(addon, {key: url}, file="f.yaml")
    (line,) = caught.value.lines()
    ours = f"f.yaml: {key}: {url!r}: port {port!r} is not a port {PORT_ALLOWED}"
    # A field's pattern may refuse a space first, naming the key as well.
    pattern = " " in port and line.startswith(f"f.yaml: {key}: string should match pattern")
    assert line == ours or pattern, line


@pytest.mark.parametrize(
    ("url", "port"),
    [
        ("http://loki.logs.svc:3100", 3100),
        ("http://loki.logs.svc", 80),
        ("https://loki.example.com/", 443),
        ("http://[fd00::1]:65535", 65535),
    ],
)
def test_grafana_may_reach_the_port_the_loki_url_names(url: str, port: int) -> None:
    objects = addons.render("prometheus_stack", {"lokiDatasourceUrl": url}).objects
    (policy,) = [o for o in objects if o["metadata"]["name"] == "allow-grafana-to-loki"]
    assert policy["spec"]["egress"] == [{"ports": [{"protocol": "TCP", "port": port}]}]

"""Every value and object the specs produce is valid against the pinned upstream schemas."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from gpuinfra import addons, config, schemas
from gpuinfra.versions import pinned

from .conftest import SCENARIOS, scenario_renders


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_every_helm_value_is_a_key_of_the_pinned_chart(
    scenario: str, chart_values: dict[str, dict[str, Any]]
) -> None:
    renders = [r for r in scenario_renders(scenario) if r.chart is not None]
    assert renders
    for render in renders:
        assert render.chart is not None
        problems = schemas.values_problems(
            render.values, chart_values[render.chart.name], schemas.FREE_MAPS[render.chart.name]
        )
        assert problems == [], f"{render.name}: {problems}"


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_every_custom_resource_matches_its_crd(scenario: str, crds: schemas.CrdSchemas) -> None:
    custom = [o for r in scenario_renders(scenario) for o in r.objects if crds.has(o)]
    assert custom
    for obj in custom:
        assert crds.problems(obj) == []


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_every_core_object_is_valid_kubernetes(scenario: str, crds: schemas.CrdSchemas) -> None:
    version = pinned().kubernetes.version
    core = [o for r in scenario_renders(scenario) for o in r.objects if not crds.has(o)]
    assert core
    for obj in core:
        group = obj["apiVersion"].rpartition("/")[0]
        # Kubernetes' own groups; any other dotted group is a custom resource without its CRD.
        assert "." not in group or group.endswith(".k8s.io"), f"{obj['kind']} has no CRD loaded"
        assert schemas.core_problems(obj, version) == []


def test_a_misspelled_value_is_caught(chart_values: dict[str, dict[str, Any]]) -> None:
    values = {"dcgmExporter": {"serviceMonitor": {"enabeld": True}}}
    problems = schemas.values_problems(
        values, chart_values["gpu-operator"], schemas.FREE_MAPS["gpu-operator"]
    )
    assert problems == [
        "dcgmExporter.serviceMonitor.enabeld: not a value of the chart; did you mean 'enabled'?"
    ]


def test_free_keys_are_accepted_only_where_declared(
    chart_values: dict[str, dict[str, Any]],
) -> None:
    free = schemas.FREE_MAPS["gpu-operator"]
    labels = {"dcgmExporter": {"serviceMonitor": {"additionalLabels": {"any/label": "x"}}}}
    assert schemas.values_problems(labels, chart_values["gpu-operator"], free) == []
    # daemonsets.labels is an empty map too, but not declared free: its keys go unchecked.
    undeclared = {"daemonsets": {"labels": {"team": "ml"}}}
    (problem,) = schemas.values_problems(undeclared, chart_values["gpu-operator"], free)
    assert problem.startswith("daemonsets.labels: the chart has an empty map here")


def test_an_unknown_field_in_a_custom_resource_is_rejected(crds: schemas.CrdSchemas) -> None:
    (render,) = [r for r in scenario_renders("everything") if r.name == "kueue"]
    (queue,) = [o for o in render.objects if o["kind"] == "ClusterQueue"]
    wrong = copy.deepcopy(queue)
    # v1beta1 spelled it "cohort"; v1beta2 stores cohortName.
    wrong["spec"]["cohort"] = wrong["spec"].pop("cohortName")
    problems = crds.problems(wrong)
    assert any("'cohort' was unexpected" in p for p in problems), problems


def test_a_wrong_type_in_a_custom_resource_is_rejected(crds: schemas.CrdSchemas) -> None:
    (render,) = [r for r in scenario_renders("everything") if r.name == "volcano"]
    wrong = copy.deepcopy(render.objects[0])
    wrong["spec"]["weight"] = "heavy"
    assert any("spec.weight" in p for p in crds.problems(wrong))


def test_an_unknown_field_in_a_core_object_is_rejected() -> None:
    (render,) = [r for r in scenario_renders("everything") if r.name == "triton"]
    deployment = copy.deepcopy(render.objects[0])
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    container["readinesProbe"] = container.pop("readinessProbe")
    (problem,) = schemas.core_problems(deployment, pinned().kubernetes.version)
    assert "readinesProbe" in problem


@pytest.mark.parametrize("env", config.known_stacks())
def test_the_shipped_stacks_render_valid_addons(
    env: str, chart_values: dict[str, dict[str, Any]], crds: schemas.CrdSchemas
) -> None:
    version = pinned().kubernetes.version
    problems: list[str] = []
    for render in addons.render_all(config.load_stack(env).addons):
        if render.chart is not None:
            problems += schemas.values_problems(
                render.values,
                chart_values[render.chart.name],
                schemas.FREE_MAPS[render.chart.name],
            )
        for obj in render.objects:
            problems += crds.problems(obj) if crds.has(obj) else schemas.core_problems(obj, version)
    assert problems == []


@pytest.mark.parametrize(
    ("written", "amount"),
    [("1e1", 10), ("5E-1", 0.5), (".5", 0.5), ("2.", 2), ("1500m", 1.5), ("8E", 8 * 1000**6)],
)
def test_every_quantity_form_kubernetes_takes_is_taken(
    written: str, amount: float, crds: schemas.CrdSchemas
) -> None:
    from gpuinfra import integrity

    kueue = addons.render(
        "kueue",
        {
            "enabled": True,
            "flavors": [{"gpuType": "l4", "gpus": 1, "cpu": written, "memory": "1Gi"}],
            "teams": ["ml"],
        },
    )
    volcano = addons.render(
        "volcano", {"enabled": True, "queues": [{"name": "ml", "capability": {"cpu": written}}]}
    )
    (queue,) = [o for o in kueue.objects if o["kind"] == "ClusterQueue"]
    (flavor,) = queue["spec"]["resourceGroups"][0]["flavors"]
    (cpu,) = [r["nominalQuota"] for r in flavor["resources"] if r["name"] == "cpu"]
    (volcano_queue,) = [o for o in volcano.objects if o["kind"] == "Queue"]
    assert cpu == volcano_queue["spec"]["capability"]["cpu"] == written
    assert crds.problems(queue) == crds.problems(volcano_queue) == []
    assert integrity.quantity(written) == amount


@pytest.mark.parametrize("written", ["8\n", "1e", "e3", ".", "1.5.", "-1", "1ki"])
def test_text_that_is_no_quantity_is_refused(written: str) -> None:
    from gpuinfra.errors import ConfigError

    with pytest.raises(ConfigError, match="not a resource quantity"):
        addons.render("volcano", {"queues": [{"name": "ml", "capability": {"cpu": written}}]})
    with pytest.raises(ConfigError, match="not a Kubernetes quantity"):
        addons.render(
            "kueue",
            {"flavors": [{"gpuType": "l4", "gpus": 1, "cpu": written, "memory": "1Gi"}]},
        )

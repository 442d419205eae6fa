"""ClusterAddons: each add-on render becomes a pinned Helm release plus its objects."""

from __future__ import annotations

import pulumi_kubernetes as k8s

from components.addons import ClusterAddons, ClusterAddonsArgs
from gpuinfra import versions
from gpuinfra.addons import AddonsSettings, render_all
from tests.unit.components.conftest import refused

SETTINGS = AddonsSettings.model_validate(
    {
        "volcano": {"enabled": True},
        "kueue": {"flavors": [{"gpuType": "h100", "gpus": 8, "cpu": "96", "memory": "1Ti"}]},
    }
)


def addons(settings: AddonsSettings = SETTINGS) -> ClusterAddons:
    provider = k8s.Provider("k8s", kubeconfig="{}")
    return ClusterAddons("a", ClusterAddonsArgs(renders=render_all(settings), provider=provider))


def test_each_chart_is_a_release_at_the_pinned_version_from_its_repository(run) -> None:
    result = run(addons)
    pins = versions.pinned()
    releases = {r.inputs["name"]: r.inputs for r in result.of_type("kubernetes:helm.sh/v3:Release")}
    assert sorted(releases) == ["gpu-operator", "kube-prometheus-stack", "kueue", "volcano"]
    operator = releases["gpu-operator"]
    assert operator["version"] == pins.gpu_operator.version
    assert operator["repositoryOpts"] == {"repo": pins.gpu_operator.source.repository}
    assert operator["chart"] == "gpu-operator"
    # OCI charts are addressed by URL rather than through a repository index.
    assert releases["kueue"]["chart"] == "oci://registry.k8s.io/kueue/charts/kueue"
    assert "repositoryOpts" not in releases["kueue"]
    assert releases["kueue"]["version"] == pins.kueue.version


def test_gpu_operator_runs_in_host_driver_mode(run) -> None:
    operator = run(addons).named("a-gpu-operator").inputs["values"]
    assert operator["driver"]["enabled"] is False
    assert operator["toolkit"]["enabled"] is False


def test_release_values_are_the_renders_values(run) -> None:
    result = run(addons)
    for render in render_all(SETTINGS):
        if render.chart is not None:
            name = f"a-{render.name.replace('_', '-')}"
            assert result.named(name).inputs["values"] == render.values, name


def test_extra_objects_are_applied_with_their_kubernetes_types(run) -> None:
    result = run(addons)
    flavor = result.named("a-kueue-resourceflavor-h100")
    assert flavor.type_ == "kubernetes:kueue.x-k8s.io/v1beta2:ResourceFlavor"
    assert flavor.inputs["spec"]["nodeLabels"] == {"gpuinfra.dev/gpu-type": "h100"}
    dashboards = [r for r in result.resources if r.type_ == "kubernetes:core/v1:ConfigMap"]
    assert dashboards and all("data" in d.inputs for d in dashboards)
    expected = sum(len(r.objects) for r in render_all(SETTINGS))
    objects = [r for r in result.resources if r.parent == "a" and r.type_.startswith("kubernetes:")]
    non_objects = [r for r in objects if r.type_.endswith((":Release", ":Namespace"))]
    assert len(objects) - len(non_objects) == expected


def test_operator_managed_driver_is_refused_on_eks(run) -> None:
    settings = SETTINGS.model_copy(
        update={
            "gpu_operator": SETTINGS.gpu_operator.model_copy(update={"driver_mode": "operator"})
        }
    )
    program = refused(lambda: addons(settings))
    result = run(program)
    assert [r.type_ for r in result.resources] == ["pulumi:providers:kubernetes"]
    assert [p.path for p in program.errors[0].problems] == [
        "args.renders[1].values.driver.enabled",
        "args.renders[1].values.toolkit.enabled",
    ]

"""ClusterAddons: each add-on render becomes a pinned Helm release plus its objects."""

from __future__ import annotations

import dataclasses

import pulumi_kubernetes as k8s

from components.addons import ClusterAddons, ClusterAddonsArgs
from gpuinfra import versions
from gpuinfra.addons import AddonsSettings, render_all
from gpuinfra.addons.base import MANAGED_BY, GeneratedSecret
from gpuinfra.review.stackrun import SECRET
from tests.unit.components.conftest import refused

NAMESPACE = "kubernetes:core/v1:Namespace"

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
    non_objects = [r for r in objects if r.type_.endswith((":Release", ":Namespace", ":Secret"))]
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


TEAMS = SETTINGS.model_copy(
    update={"kueue": SETTINGS.kueue.model_copy(update={"teams": ["research", "serving"]})}
)


def test_each_namespace_an_object_names_is_created_once_before_its_objects(run) -> None:
    result = run(lambda: addons(TEAMS))
    namespaces = {r.inputs["metadata"]["name"]: r for r in result.of_type(NAMESPACE)}
    named = {
        obj["metadata"]["namespace"]
        for render in render_all(TEAMS)
        for obj in render.objects
        if "namespace" in obj["metadata"]
    }
    assert {"research", "serving"} <= named <= namespaces.keys()
    assert len(result.of_type(NAMESPACE)) == len(namespaces)
    for ns in namespaces.values():
        labels = ns.inputs["metadata"]["labels"]
        assert MANAGED_BY.items() <= labels.items()
        # Every namespace says which Pod Security Standard the API server enforces in it.
        assert labels["pod-security.kubernetes.io/enforce"] in (
            "restricted",
            "baseline",
            "privileged",
        )
    # The existing namespaces keep their names: an existing stack replaces nothing.
    assert result.named("a-ns-monitoring").inputs["metadata"]["name"] == "monitoring"
    queues = result.of_type("kubernetes:kueue.x-k8s.io/v1beta2:LocalQueue")
    assert sorted(q.inputs["metadata"]["namespace"] for q in queues) == ["research", "serving"]
    for queue in queues:
        team = queue.inputs["metadata"]["namespace"]
        assert f"a-ns-{team}" in queue.dependencies, queue.name
        # Still after Kueue's own release and namespace, whose webhook admits it.
        assert {"a-kueue", "a-ns-kueue-system"} <= set(queue.dependencies), queue.name
    # Every namespaced object waits for the Namespace of its own namespace.
    for resource in result.resources:
        ns = resource.inputs.get("metadata", {}).get("namespace")
        if resource.parent == "a" and ns and resource.type_ != NAMESPACE:
            assert f"a-ns-{ns}" in resource.dependencies, resource.name


def test_grafana_admin_secret_is_generated_before_the_prometheus_stack_release(run) -> None:
    data: dict[str, str] = {}

    def build() -> None:
        made = addons()
        made.secrets["monitoring/grafana-admin"].string_data.apply(data.update)

    result = run(build)
    [secret] = result.of_type("kubernetes:core/v1:Secret")
    assert secret.name == "a-prometheus-stack-secret-monitoring-grafana-admin"
    assert secret.inputs["metadata"]["name"] == "grafana-admin"
    assert secret.inputs["metadata"]["namespace"] == "monitoring"
    assert secret.inputs["type"] == "Opaque"
    # The password never shows in what was registered (state, the plan).
    assert secret.inputs["stringData"] == SECRET
    [password] = result.of_type("random:index/randomPassword:RandomPassword")
    assert password.inputs == {"length": 32, "special": False}
    assert set(secret.dependencies) == {"a-ns-monitoring", password.name}
    assert secret.name in result.named("a-prometheus-stack").dependencies
    # The keys the chart's values point Grafana at: a fixed user and the generated password.
    admin = result.named("a-prometheus-stack").inputs["values"]["grafana"]["admin"]
    assert admin["existingSecret"] == "grafana-admin"
    assert data == {admin["userKey"]: "admin", admin["passwordKey"]: f"{password.name}-password"}


def test_a_render_without_secrets_creates_none(run) -> None:
    renders = [r for r in render_all(SETTINGS) if r.name != "prometheus_stack"]
    assert all(not r.secrets for r in renders)

    def build() -> None:
        provider = k8s.Provider("k8s", kubeconfig="{}")
        ClusterAddons("a", ClusterAddonsArgs(renders=renders, provider=provider))

    result = run(build)
    assert result.of_type("kubernetes:core/v1:Secret") == []
    assert [r for r in result.resources if r.type_.startswith("random:")] == []


def test_secret_keys_both_fixed_and_generated_are_refused(run) -> None:
    [stack] = [r for r in render_all(SETTINGS) if r.name == "prometheus_stack"]
    clash = GeneratedSecret("s", "monitoring", fixed={"k": "v"}, generated={"k": 8})
    render = dataclasses.replace(stack, secrets=[clash])

    def build() -> None:
        provider = k8s.Provider("k8s", kubeconfig="{}")
        ClusterAddons("a", ClusterAddonsArgs(renders=[render], provider=provider))

    program = refused(build)
    result = run(program)
    assert [r.type_ for r in result.resources] == ["pulumi:providers:kubernetes"]
    assert [p.path for p in program.errors[0].problems] == ["args.renders[0].secrets[0]"]


def test_serving_groups_are_applied_as_the_render_has_them(run) -> None:
    from tests.unit.addons.conftest import SCENARIOS

    settings = AddonsSettings.model_validate(SCENARIOS["serving-groups"])
    (triton,) = [r for r in render_all(settings) if r.name == "triton"]
    result = run(lambda: addons(settings))
    wanted = {
        (o["kind"], o["metadata"]["name"])
        for o in triton.objects
        if o["kind"] in ("Deployment", "Service", "HorizontalPodAutoscaler", "HTTPRoute")
    }
    applied = {
        (r.type_.rsplit(":", 1)[1], r.inputs["metadata"]["name"])
        for r in result.resources
        if r.type_.rsplit(":", 1)[1]
        in ("Deployment", "Service", "HorizontalPodAutoscaler", "HTTPRoute")
        and r.inputs.get("metadata", {}).get("namespace") == "triton"
    }
    assert ("HTTPRoute", "triton-bert") in wanted
    assert ("Deployment", "triton-bert-canary") in wanted
    assert applied == wanted
    (route,) = [
        r
        for r in result.resources
        if r.type_ == "kubernetes:gateway.networking.k8s.io/v1:HTTPRoute"
        and r.inputs["metadata"]["name"] == "triton-bert"
    ]
    weights = [b["weight"] for b in route.inputs["spec"]["rules"][0]["backendRefs"]]
    assert weights == [90, 10]


def test_the_log_add_ons_are_releases_after_the_others_with_the_renders_values(run) -> None:
    settings = AddonsSettings.model_validate(
        {"loki": {"enabled": True}, "alloy": {"enabled": True}}
    )
    renders = {r.name: r for r in render_all(settings)}
    result = run(lambda: addons(settings))
    pins = versions.pinned()
    releases = {r.inputs["name"]: r.inputs for r in result.of_type("kubernetes:helm.sh/v3:Release")}
    for name, pin in (("loki", pins.loki), ("alloy", pins.alloy)):
        assert releases[name]["version"] == pin.version
        assert releases[name]["repositoryOpts"] == {"repo": pin.source.repository}
        assert releases[name]["values"] == renders[name].values
    namespaces = {r.inputs["metadata"]["name"]: r.inputs for r in result.of_type(NAMESPACE)}
    labels = namespaces["alloy"]["metadata"]["labels"]
    assert labels["pod-security.kubernetes.io/enforce"] == "privileged"

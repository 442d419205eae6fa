"""Idle GPUs reclaimed: KEDA's ScaledObjects, the Cluster Autoscaler and the checks around them."""

from __future__ import annotations

import copy
import dataclasses
import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuinfra import addons, autoscaler, config, integrity, schemas
from gpuinfra import versions as versions_mod
from gpuinfra.addons.keda import prometheus_address
from gpuinfra.errors import ConfigError
from gpuinfra.review import policy
from tests.conftest import ROOT, run_cli
from tests.unit.review.test_policy import DEV, PROD, Res
from tests.unit.test_integrity import TRITON, findings, only, site_copy, site_findings, stack

KEDA: dict[str, Any] = {
    "enabled": True,
    "idleReclaim": [{"namespace": "dev", "deployment": "notebook", "replicas": 2}],
}


def scaled_objects(settings: dict[str, Any]) -> list[dict[str, Any]]:
    render = addons.render("keda", settings)
    return [o for o in render.objects if o["kind"] == "ScaledObject"]


def test_a_scaled_object_holds_the_replicas_while_busy_and_goes_to_zero_after_six_idle_hours() -> (
    None
):
    (obj,) = scaled_objects(KEDA)
    spec = obj["spec"]
    assert obj["metadata"]["namespace"] == "dev"
    assert spec["scaleTargetRef"] == {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "name": "notebook",
    }
    # Busy: min = max, so KEDA's HPA never moves it; idle: zero, after 6 h from the last busy
    # poll, or from creation for a workload never seen busy.
    assert (spec["minReplicaCount"], spec["maxReplicaCount"], spec["idleReplicaCount"]) == (2, 2, 0)
    assert spec["cooldownPeriod"] == spec["initialCooldownPeriod"] == 6 * 3600
    (trigger,) = spec["triggers"]
    meta = trigger["metadata"]
    assert trigger["type"] == "prometheus"
    assert meta["activationThreshold"] == "5"
    assert meta["serverAddress"] == "http://kube-prometheus-stack-prometheus.monitoring.svc:9090"
    assert meta["query"] == (
        'avg(DCGM_FI_DEV_GPU_UTIL{namespace="dev",pod=~"notebook-[a-z0-9]+-[a-z0-9]+"})'
        ' or (sum(kube_deployment_spec_replicas{namespace="dev",deployment="notebook"}) == 0)'
    )
    assert meta["ignoreNullValues"] == "false"
    crds = schemas.CrdSchemas.pinned()
    assert crds.has(obj) and crds.problems(obj) == []


PROMTOOL = shutil.which("promtool") or "/usr/bin/promtool"


@pytest.mark.parametrize(
    ("series", "expected"),
    [
        # Busy pods of the Deployment (and another Deployment's pod, left out): their mean.
        (
            [
                ('DCGM_FI_DEV_GPU_UTIL{namespace="dev",pod="notebook-5d8f7c9b4-x2kq9"}', "80"),
                ('DCGM_FI_DEV_GPU_UTIL{namespace="dev",pod="notebook-5d8f7c9b4-p7wz3"}', "60"),
                ('DCGM_FI_DEV_GPU_UTIL{namespace="dev",pod="notebook2-6c9d8-aaaaa"}', "0"),
                ('kube_deployment_spec_replicas{namespace="dev",deployment="notebook"}', "2"),
            ],
            [70.0],
        ),
        # Idle pods: 0, below the activation threshold, and the idle clock runs.
        (
            [
                ('DCGM_FI_DEV_GPU_UTIL{namespace="dev",pod="notebook-5d8f7c9b4-x2kq9"}', "0"),
                ('kube_deployment_spec_replicas{namespace="dev",deployment="notebook"}', "2"),
            ],
            [0.0],
        ),
        # Pods asked for but no utilisation (the exporter down): no result, which KEDA takes
        # for an error and so does not reclaim.
        ([('kube_deployment_spec_replicas{namespace="dev",deployment="notebook"}', "2")], []),
        # Reclaimed, no pods: 0, so the ScaledObject stays ready at zero.
        ([('kube_deployment_spec_replicas{namespace="dev",deployment="notebook"}', "0")], [0.0]),
    ],
    ids=["busy", "idle", "exporter-down", "at-zero"],
)
def test_the_trigger_query_reads_busy_idle_and_no_data_apart(
    tmp_path: Path, series: list[tuple[str, str]], expected: list[float]
) -> None:
    (obj,) = scaled_objects(KEDA)
    query = obj["spec"]["triggers"][0]["metadata"]["query"]
    case = {
        "rule_files": [],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": [{"series": s, "values": f"{v}x5"} for s, v in series],
                "promql_expr_test": [
                    {
                        "expr": query,
                        "eval_time": "3m",
                        "exp_samples": [{"labels": "{}", "value": v} for v in expected],
                    }
                ],
            }
        ],
    }
    path = tmp_path / "query.test.yml"
    path.write_text(yaml.safe_dump(case))
    result = subprocess.run(
        [PROMTOOL, "test", "rules", str(path)], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_idle_window_and_threshold_are_settings() -> None:
    (obj,) = scaled_objects({**KEDA, "idleHours": 12, "idleThresholdPercent": 2.5})
    assert obj["spec"]["cooldownPeriod"] == 12 * 3600
    assert obj["spec"]["triggers"][0]["metadata"]["activationThreshold"] == "2.5"


def test_a_workload_outside_the_reclaim_namespaces_is_refused_in_one_line() -> None:
    bad = {"enabled": True, "idleReclaim": [{"namespace": "serving", "deployment": "llm"}]}
    with pytest.raises(ConfigError) as caught:
        addons.render("keda", bad, file="stacks/Pulumi.dev.yaml")
    (line,) = caught.value.lines()
    assert line.startswith("stacks/Pulumi.dev.yaml")
    assert "serving/llm is not in a reclaim namespace (allowed: dev, test)" in line


def test_the_keda_namespace_may_query_prometheus_and_prometheus_admits_it() -> None:
    keda = addons.render("keda", KEDA)
    assert keda.namespace_labels["keda"]["gpuinfra.dev/prometheus-reader"] == "true"
    prometheus = addons.render("prometheus_stack")
    (allow,) = [
        o for o in prometheus.objects if o["metadata"]["name"] == "allow-prometheus-readers"
    ]
    (rule,) = allow["spec"]["ingress"]
    assert rule["from"] == [
        {"namespaceSelector": {"matchLabels": {"gpuinfra.dev/prometheus-reader": "true"}}}
    ]
    assert rule["ports"] == [{"protocol": "TCP", "port": 9090}]


# --- integrity ------------------------------------------------------------------------------------


def test_a_trigger_reading_another_prometheus_than_the_stacks_is_an_error() -> None:
    cfg = stack("dev", keda=KEDA, prometheusStack={"namespace": "observability"})
    (error,) = [f for f in only(findings(cfg), "idle_reclaim") if f.severity == "error"]
    assert error.path == "spec.triggers[0].metadata.serverAddress"
    assert prometheus_address("observability") in error.message
    fixed = stack(
        "dev",
        keda={**KEDA, "prometheusAddress": prometheus_address("observability")},
        prometheusStack={"namespace": "observability"},
    )
    assert [f for f in only(findings(fixed), "idle_reclaim") if f.severity == "error"] == []


def test_a_trigger_without_the_prometheus_stack_is_an_error() -> None:
    cfg = stack("dev", keda=KEDA, prometheusStack={"enabled": False})
    errors = [f for f in only(findings(cfg), "idle_reclaim") if f.severity == "error"]
    assert any("the Prometheus stack add-on is not enabled" in f.message for f in errors)


def test_a_target_gpuinfra_does_not_apply_is_a_warning_and_a_gpu_deployment_passes() -> None:
    (warning,) = only(findings(stack("dev", keda=KEDA)), "idle_reclaim")
    assert warning.severity == "warning"
    assert "Deployment dev/notebook is not one gpuinfra applies" in warning.message
    triton = {**TRITON, "namespace": "dev"}
    own = {"enabled": True, "idleReclaim": [{"namespace": "dev", "deployment": "triton"}]}
    assert only(findings(stack("dev", keda=own, triton=triton)), "idle_reclaim") == []


def test_a_target_another_autoscaler_drives_is_an_error() -> None:
    triton = {**TRITON, "namespace": "dev", "autoscaling": True}
    own = {"enabled": True, "idleReclaim": [{"namespace": "dev", "deployment": "triton"}]}
    errors = [f for f in findings(stack("dev", keda=own, triton=triton)) if f.severity == "error"]
    assert any(
        f.rule == "idle_reclaim" and "already has a HorizontalPodAutoscaler" in f.message
        for f in errors
    )


def test_scale_to_zero_without_a_node_autoscaler_is_a_warning() -> None:
    cfg = stack("dev", keda=KEDA)
    cfg = cfg.model_copy(update={"cluster": cfg.cluster.model_copy(update={"autoscaler": False})})
    messages = [f.message for f in only(findings(cfg), "idle_reclaim")]
    assert any("their GPU nodes stay" in m for m in messages)
    (pool,) = only(findings(cfg), "scale_from_zero")
    assert (pool.severity, pool.object) == ("warning", "node pool l4")


def test_each_finding_names_the_object_the_path_and_the_fix() -> None:
    """The rule's findings whole: an HPA on the target, a target without a GPU, a trigger
    reading no Prometheus, nodes that do not follow."""
    triton = {**TRITON, "namespace": "dev", "autoscaling": True}
    own = {"enabled": True, "idleReclaim": [{"namespace": "dev", "deployment": "triton"}]}
    cfg = stack("dev", keda=own, triton=triton, prometheusStack={"enabled": False})
    cfg = cfg.model_copy(update={"cluster": cfg.cluster.model_copy(update={"autoscaler": False})})
    state = integrity.stack_state(cfg, addons.render_all(cfg.addons))

    def without_gpus(obj: dict[str, Any]) -> dict[str, Any]:
        if obj["kind"] != "Deployment":
            return obj
        obj = copy.deepcopy(obj)
        for container in obj["spec"]["template"]["spec"]["containers"]:
            for asked in container.get("resources", {}).values():
                asked.pop("nvidia.com/gpu", None)
        return obj

    renders = tuple(
        dataclasses.replace(r, objects=[without_gpus(o) for o in r.objects])
        if r.name == "triton"
        else r
        for r in state.renders
    )
    found = integrity.idle_reclaim(dataclasses.replace(state, renders=renders))
    target = "ScaledObject dev/triton-idle-reclaim"
    assert [dataclasses.astuple(f) for f in found] == [
        (
            "error",
            "idle_reclaim",
            target,
            "spec.triggers[0].metadata.serverAddress",
            f"reads {prometheus_address('monitoring')}, but the Prometheus stack add-on is not "
            "enabled: the trigger never gets a value; enable prometheusStack",
        ),
        (
            "error",
            "idle_reclaim",
            target,
            "spec.scaleTargetRef",
            "Deployment dev/triton already has a HorizontalPodAutoscaler; two autoscalers "
            "fight over its replicas: turn one off",
        ),
        (
            "error",
            "idle_reclaim",
            target,
            "spec.scaleTargetRef",
            "Deployment dev/triton requests no GPU: its GPU utilisation is never above the "
            "threshold, so it would always be scaled to zero",
        ),
        (
            "warning",
            "idle_reclaim",
            "ScaledObjects",
            "",
            "idle Deployments scale to zero but their GPU nodes stay: set cluster.autoscaler: "
            "true so that the pools follow",
        ),
    ]


# --- prod -------------------------------------------------------------------------------------


def test_idle_reclaim_in_prod_is_refused_by_the_rule() -> None:
    cfg = stack(
        "prod", keda={"enabled": True, "idleReclaim": [{"namespace": "dev", "deployment": "x"}]}
    )
    (error,) = only(findings(cfg), "no-idle-reclaim-in-prod")
    assert error.severity == "error"
    assert "policy rule no-idle-reclaim-in-prod" in error.message
    # KEDA itself may run in prod; only scaling prod workloads to zero is refused.
    assert only(findings(stack("prod", keda={"enabled": True})), "no-idle-reclaim-in-prod") == []


def test_a_prod_stack_file_turning_it_on_fails_config_check(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    shutil.copytree(
        ROOT, root, ignore=shutil.ignore_patterns(".venv", ".git", ".lab", ".tools", "__pycache__")
    )
    path = root / "stacks" / "Pulumi.prod.yaml"
    document = yaml.safe_load(path.read_text())
    document["config"]["gpuinfra:addons"]["keda"] = {
        "enabled": True,
        "idleReclaim": [{"namespace": "test", "deployment": "bench"}],
    }
    path.write_text(yaml.safe_dump(document))
    result = run_cli("config", "check", "--stack", "prod", root=root, cwd=root)
    assert result.code == 2, result.stderr
    (line,) = [x for x in result.stderr.splitlines() if "no-idle-reclaim-in-prod" in x]
    assert line.startswith("error: stacks/Pulumi.prod.yaml: ScaledObject test/bench-idle-reclaim")


def test_a_prod_site_turning_it_on_is_refused(tmp_path: Path) -> None:
    site = site_copy(tmp_path, {})
    (site / "group_vars" / "all" / "keda.yml").write_text(
        "gpuinfra_environment: prod\nkeda_enabled: true\n"
        "keda_idle_reclaim:\n  - {namespace: dev, deployment: notebook}\n"
    )
    (error,) = only(site_findings(site), "no-idle-reclaim-in-prod")
    assert error.object == "ScaledObject dev/notebook-idle-reclaim"
    result = run_cli("config", "check", "--site", str(site))
    assert result.code == 2
    assert "no-idle-reclaim-in-prod" in result.stderr
    (site / "group_vars" / "all" / "keda.yml").write_text(
        "gpuinfra_environment: dev\nkeda_enabled: true\n"
        "keda_idle_reclaim:\n  - {namespace: dev, deployment: notebook}\n"
    )
    assert only(site_findings(site), "no-idle-reclaim-in-prod") == []


def test_the_policy_pack_refuses_a_scaled_object_in_prod_only() -> None:
    scaled = Res(policy.SCALED_OBJECT, {"metadata": {"name": "x-idle-reclaim"}})
    assert policy.no_idle_reclaim_in_prod(scaled, DEV) == []
    (message,) = policy.no_idle_reclaim_in_prod(scaled, PROD)
    assert "scales a prod workload to zero" in message
    assert "no-idle-reclaim-in-prod" in policy.RESOURCE_RULES


# --- the Cluster Autoscaler -------------------------------------------------------------------


def test_a_pool_carries_the_template_tags_of_what_its_nodes_offer() -> None:
    tags = integrity.pool_template_tags("l4", "g6.xlarge", {"team": "vision"})
    prefix = "k8s.io/cluster-autoscaler/node-template"
    assert tags == {
        f"{prefix}/label/gpuinfra.dev/gpu-type": "l4",
        f"{prefix}/label/gpuinfra.dev/pool": "l4",
        f"{prefix}/label/team": "vision",
        f"{prefix}/taint/nvidia.com/gpu": "present:NoSchedule",
        f"{prefix}/resources/nvidia.com/gpu": "1",
    }
    labels, taints, resources = autoscaler.template(tags)
    assert taints == [("nvidia.com/gpu", "present", "NoSchedule")]
    assert resources == {"nvidia.com/gpu": 1.0} and labels["team"] == "vision"


def test_a_pod_its_pool_fits_but_the_template_does_not_is_an_error() -> None:
    cfg = stack("dev", triton=TRITON)
    state = integrity.stack_state(cfg, addons.render_all(cfg.addons))
    assert only(integrity.check(state), "scale_from_zero") == []
    # A pool whose tags lost the GPU count: the autoscaler would think Triton cannot fit.
    broken = []
    for nodes in state.nodes:
        if nodes.template_tags:
            tags = {k: v for k, v in nodes.template_tags.items() if "resources" not in k}
            nodes = integrity.Nodes(**{**nodes.__dict__, "template_tags": tags})
        broken.append(nodes)
    state = integrity.State(**{**state.__dict__, "nodes": tuple(broken)})
    errors = only(integrity.check(state), "scale_from_zero")
    assert {f.object for f in errors} >= {"Deployment triton/triton"}
    assert all("nvidia.com/gpu 1 requested, 0 allocatable" in f.message for f in errors)


def test_the_autoscalers_objects_are_valid_and_its_role_names_what_it_touches() -> None:
    pins = versions_mod.pinned()
    objects = autoscaler.objects("gpuinfra-dev", "us-east-1", pins)
    for obj in objects:
        assert schemas.core_problems(obj, pins.kubernetes.version) == [], obj["kind"]
    (deployment,) = [o for o in objects if o["kind"] == "Deployment"]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    minor = ".".join(pins.kubernetes.version.split(".")[:2])
    assert container["image"].startswith(
        f"registry.k8s.io/autoscaling/cluster-autoscaler:v{minor}."
    )
    assert (
        "--node-group-auto-discovery=asg:tag=k8s.io/cluster-autoscaler/enabled,"
        "k8s.io/cluster-autoscaler/gpuinfra-dev" in container["command"]
    )
    document = autoscaler.iam_policy("gpuinfra-dev", "us-east-1")
    role = Res(policy.IAM_ROLE, {"inlinePolicies": [{"policy": json.dumps(document)}]})
    assert policy.iam_no_wildcards(role, DEV) == []
    # The describe calls take no resource; resizing any group of any cluster would be refused.
    document["Statement"][1]["Resource"] = "*"
    role = Res(policy.IAM_ROLE, {"inlinePolicies": [{"policy": json.dumps(document)}]})
    assert policy.iam_no_wildcards(role, DEV) == [
        "Role 'r': allows on every resource ('Resource': '*')"
    ]


def test_the_dev_plan_tags_the_gpu_pool_and_runs_the_autoscaler(tmp_path: Path) -> None:
    out = tmp_path / "plan.json"
    result = run_cli("plan", "--stack", "dev", "--format", "json", "--out", str(out))
    assert result.code == 0, result.stderr
    plan = json.loads(out.read_text())
    tags = {
        r["properties"]["tag"]["key"]: r["properties"]["tag"]["value"]
        for r in plan["resources"]
        if r["type"] == "aws:autoscaling/tag:Tag"
    }
    assert tags["k8s.io/cluster-autoscaler/gpuinfra-dev"] == "owned"
    assert tags["k8s.io/cluster-autoscaler/node-template/resources/nvidia.com/gpu"] == "1"
    kinds = {(r["type"], r["name"]) for r in plan["resources"]}
    assert ("kubernetes:apps/v1:Deployment", "gpuinfra-dev-autoscaler-deployment") in kinds
    association = [r for r in plan["resources"] if r["name"] == "gpuinfra-dev-autoscaler"]
    assert association[0]["properties"]["serviceAccount"] == "cluster-autoscaler"


def test_an_autoscaler_of_another_kubernetes_minor_is_refused() -> None:
    pins = versions_mod.pinned()
    other = pins.model_copy(
        update={
            "cluster_autoscaler": pins.cluster_autoscaler.model_copy(update={"version": "v1.33.2"})
        }
    )
    problems = [p for p in versions_mod.check(other) if p.key == "cluster_autoscaler.version"]
    (problem,) = problems
    assert f"drives Kubernetes 1.33, not the pinned {pins.kubernetes.version}" in problem.message


def test_the_stack_config_takes_the_autoscaler_switch() -> None:
    assert config.load_stack("dev").cluster.autoscaler is True
    assert config.load_stack("prod").cluster.autoscaler is False

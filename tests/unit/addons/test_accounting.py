"""GPU-hours per team: the admission rule's CEL, the kube-state-metrics labels, the recordings.

The ValidatingAdmissionPolicy's expressions run in a CEL interpreter (cel-python) against pods
as a user writes them; the recording rules run in promtool on synthetic series.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import celpy
import pytest
import yaml

from gpuinfra.addons import accounting

from .conftest import scenario_renders

PROMTOOL = shutil.which("promtool") or "/usr/bin/promtool"
RULE_TESTS = Path(__file__).resolve().parents[2] / "rules" / "gpu-accounting.test.yml"


def _stack(scenario: str = "defaults") -> Any:
    (stack,) = [r for r in scenario_renders(scenario) if r.name == "prometheus_stack"]
    return stack


def _policy() -> dict[str, Any]:
    (policy,) = [o for o in _stack().objects if o["kind"] == "ValidatingAdmissionPolicy"]
    return policy


def _evaluate(expression: str, pod: dict[str, Any]) -> bool:
    env = celpy.Environment()
    program = env.program(env.compile(expression))
    return bool(program.evaluate({"object": celpy.json_to_cel(pod)}))


def admitted(pod: dict[str, Any]) -> list[str]:
    """The policy's messages for ``pod``: empty when the API server would admit it."""
    spec = _policy()["spec"]
    if not all(_evaluate(c["expression"], pod) for c in spec["matchConditions"]):
        return []
    return [v["message"] for v in spec["validations"] if not _evaluate(v["expression"], pod)]


def pod(
    labels: dict[str, str] | None = None,
    limits: dict[str, str] | None = None,
    init_requests: dict[str, str] | None = None,
) -> dict[str, Any]:
    containers: list[dict[str, Any]] = [{"name": "main", "image": "x", "resources": {}}]
    if limits is not None:
        containers[0]["resources"] = {"limits": limits}
    spec: dict[str, Any] = {"containers": containers}
    if init_requests is not None:
        spec["initContainers"] = [{"name": "i", "resources": {"requests": init_requests}}]
    meta: dict[str, Any] = {"name": "p"}
    if labels is not None:
        meta["labels"] = labels
    return {"metadata": meta, "spec": spec}


GPU = {"nvidia.com/gpu": "1"}
LABELLED = {"team": "vision", "project": "resnet"}


def test_a_labelled_gpu_pod_is_admitted() -> None:
    assert admitted(pod(LABELLED, GPU)) == []


@pytest.mark.parametrize(
    ("labels", "missing"),
    [
        (None, ["team", "project"]),
        ({"team": "vision"}, ["project"]),
        ({"project": "resnet", "team": ""}, ["team"]),
    ],
)
def test_a_gpu_pod_without_its_labels_is_refused(
    labels: dict[str, str] | None, missing: list[str]
) -> None:
    messages = admitted(pod(labels, GPU))
    assert [m.split("'")[1] for m in messages] == missing


@pytest.mark.parametrize(
    "gpu_pod",
    [
        pod({}, {"nvidia.com/mig-1g.10gb": "1"}),
        pod({}, {"cpu": "1"}, init_requests={"nvidia.com/gpu": "1"}),
    ],
    ids=["mig-slice", "init-container"],
)
def test_mig_slices_and_init_containers_count_as_gpu_requests(gpu_pod: dict[str, Any]) -> None:
    assert len(admitted(gpu_pod)) == 2


@pytest.mark.parametrize(
    "cpu_pod", [pod(None, {"cpu": "2"}), pod(None, None), pod({"app": "web"}, {"memory": "1Gi"})]
)
def test_pods_without_gpus_need_no_labels(cpu_pod: dict[str, Any]) -> None:
    assert admitted(cpu_pod) == []


def test_the_binding_denies_outside_the_exempt_namespaces() -> None:
    (binding,) = [o for o in _stack().objects if o["kind"] == "ValidatingAdmissionPolicyBinding"]
    assert binding["spec"]["policyName"] == _policy()["metadata"]["name"]
    assert binding["spec"]["validationActions"] == ["Deny"]
    (expression,) = binding["spec"]["matchResources"]["namespaceSelector"]["matchExpressions"]
    assert expression["operator"] == "NotIn"
    assert expression["values"] == ["gpu-operator", "kube-system"]


def test_the_policy_can_be_switched_off() -> None:
    from gpuinfra import addons

    render = addons.render("prometheus_stack", {"requireCostLabels": False})
    assert not [o for o in render.objects if "AdmissionPolicy" in o["kind"]]


def test_kube_state_metrics_exports_the_labels_the_rules_read() -> None:
    allow = _stack().values["kube-state-metrics"]["metricLabelsAllowlist"]
    assert allow == ["pods=[team,project]"]
    text = yaml.safe_dump(accounting.recording_rules())
    assert all(f"label_{label}" in text for label in accounting.COST_LABELS)


def test_dcgm_series_keep_the_workloads_namespace_and_pod() -> None:
    (operator,) = [r for r in scenario_renders("defaults") if r.name == "gpu_operator"]
    dcgm = operator.values["dcgmExporter"]
    assert dcgm["enablePodLabels"] is True
    assert dcgm["serviceMonitor"]["honorLabels"] is True


@pytest.fixture
def rules_dir(tmp_path: Path) -> Path:
    (rule,) = [o for o in _stack().objects if o["metadata"]["name"] == "gpuinfra-gpu-accounting"]
    (tmp_path / "gpu-accounting.rules.yml").write_text(yaml.safe_dump(rule["spec"]), "utf-8")
    shutil.copy(RULE_TESTS, tmp_path / RULE_TESTS.name)
    return tmp_path


def _promtool(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    if not Path(PROMTOOL).exists():
        pytest.fail("promtool not found: install the Debian package 'prometheus'")
    return subprocess.run(
        [PROMTOOL, *args], cwd=cwd, capture_output=True, text=True, timeout=120, check=False
    )


def test_the_recording_rules_record_gpus_per_team(rules_dir: Path) -> None:
    check = _promtool("check", "rules", "gpu-accounting.rules.yml", cwd=rules_dir)
    assert check.returncode == 0, check.stdout + check.stderr
    result = _promtool("test", "rules", RULE_TESTS.name, cwd=rules_dir)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_rule_tests_catch_pending_pods_counted_as_allocated(rules_dir: Path) -> None:
    path = rules_dir / "gpu-accounting.rules.yml"
    rules = yaml.safe_load(path.read_text("utf-8"))
    allocated = rules["groups"][0]["rules"][0]
    allocated["expr"] = allocated["expr"].replace('{phase="Running"}', "")
    path.write_text(yaml.safe_dump(rules), "utf-8")
    result = _promtool("test", "rules", RULE_TESTS.name, cwd=rules_dir)
    assert result.returncode != 0


def _exempt() -> list[str]:
    (binding,) = [o for o in _stack().objects if o["kind"] == "ValidatingAdmissionPolicyBinding"]
    (expression,) = binding["spec"]["matchResources"]["namespaceSelector"]["matchExpressions"]
    return list(expression["values"])


def _pods(objects: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    """(kind/name, the pod it creates) of every workload object, its namespace on the pod."""
    found = []
    for obj in objects:
        template = (obj.get("spec") or {}).get("template")
        if obj["kind"] in ("Deployment", "StatefulSet", "DaemonSet", "Job") and template:
            pod = {**template, "metadata": {**template.get("metadata", {})}}
            pod["metadata"]["namespace"] = obj["metadata"].get("namespace")
            found.append((f"{obj['kind']}/{obj['metadata']['name']}", pod))
    return found


def test_every_gpu_pod_gpuinfra_emits_carries_what_the_policy_requires() -> None:
    """Each add-on's and the training template's GPU pods outside the exempt namespaces are
    admitted: what the policy requires, each emitted workload offers."""
    from gpuinfra import workloads

    job = workloads.TrainingJob(
        name="llm", namespace="vision", queue="gpu", image="r.io/pytorch:25.01-py3",
        gpu_type="h100",
    )  # fmt: skip
    objects = [o for r in scenario_renders("everything") for o in r.objects]
    objects += workloads.training_objects(job)
    checked = [
        (name, admitted(pod))
        for name, pod in _pods(objects)
        if pod["metadata"]["namespace"] not in _exempt()
    ]
    assert {name for name, _ in checked} >= {"Job/llm", "Deployment/triton"}
    assert [(name, refused) for name, refused in checked if refused] == []

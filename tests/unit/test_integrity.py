"""The whole-system check: each rule on a minimal broken stack, and silence on the shipped ones."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml
from pulumi.runtime import config as pulumi_config

from gpuinfra import addons, config, integrity
from gpuinfra.addons.base import AddonRender
from gpuinfra.errors import ConfigError
from tests.conftest import ROOT, example_site_with_full_l4_quota, run_cli

# Sized for dev's g6.xlarge (4 vCPUs, 16 GiB): the defaults (4 CPUs, 16Gi) do not fit it.
TRITON: dict[str, Any] = {
    "enabled": True,
    "modelRepository": {"pvc": "models"},
    "gpuType": "l4",
    "cpu": "2",
    "memory": "8Gi",
}


def stack(env: str, **addon_changes: Any) -> config.StackConfig:
    """A shipped stack with some add-on settings replaced (camelCase, as in the stack file)."""
    cfg = config.load_stack(env)
    data = cfg.addons.model_dump(by_alias=True)
    for name, settings in addon_changes.items():
        data[name] = {**data[name], **settings}
    return cfg.model_copy(update={"addons": type(cfg.addons).model_validate(data)})


def findings(cfg: config.StackConfig) -> list[integrity.Finding]:
    return integrity.check(integrity.stack_state(cfg, addons.render_all(cfg.addons)))


def only(found: list[integrity.Finding], rule: str) -> list[integrity.Finding]:
    return [f for f in found if f.rule == rule]


@pytest.mark.parametrize("env", ["dev", "staging", "prod"])
def test_every_shipped_stack_passes_with_no_error(env: str) -> None:
    assert [f for f in findings(config.load_stack(env)) if f.severity == "error"] == []


def test_nodes_offer_what_the_catalog_gives_less_the_kubelets_reserve() -> None:
    nodes = {n.name: n for n in integrity.stack_nodes(config.load_stack("prod"))}
    h100 = nodes["node pool h100"]
    assert h100.labels["gpuinfra.dev/gpu-type"] == "h100"
    assert [t.key for t in h100.taints] == ["nvidia.com/gpu"]
    assert h100.allocatable["nvidia.com/gpu"] == 8
    # p5.48xlarge: 192 vCPUs, of which the kubelet keeps 0.06 + 0.01 + 2 x 0.005 + 188 x 0.0025.
    assert h100.allocatable["cpu"] == pytest.approx(192 - 0.55)
    system = nodes["node group system"]
    assert system.taints == () and "nvidia.com/gpu" not in system.allocatable


def test_a_quota_above_what_the_nodes_can_allocate_is_an_error() -> None:
    cfg = stack(
        "dev", kueue={"flavors": [{"gpuType": "l4", "gpus": 4, "cpu": "8", "memory": "28Gi"}]}
    )
    quota = only(findings(cfg), "quotas")
    messages = [f.message for f in quota if f.severity == "error"]
    assert any("grants 4 nvidia.com/gpu" in m and "can give 2" in m for m in messages), messages
    assert any("grants 8 cpu" in m and "7.84" in m for m in messages), messages
    assert all("lower the quota or raise the pools' maxSize" in m for m in messages)


def test_time_slicing_shares_each_gpu_between_pods() -> None:
    flavors = [{"gpuType": "l4", "gpus": 4, "cpu": "7", "memory": "28Gi"}]
    cfg = stack("dev", kueue={"flavors": flavors}, gpuOperator={"timeSlicingReplicas": 4})
    nodes = {n.name: n for n in integrity.stack_nodes(cfg)}
    # Each L4 node offers its one GPU as four nvidia.com/gpu; the quota of 4 now fits.
    assert nodes["node pool l4"].allocatable["nvidia.com/gpu"] == 4
    assert [f for f in only(findings(cfg), "quotas") if f.severity == "error"] == []


def test_a_flavor_that_selects_no_node_is_an_error() -> None:
    flavors = [
        {"gpuType": "l4", "gpus": 2, "cpu": "7", "memory": "28Gi"},
        {"gpuType": "h100", "gpus": 8, "cpu": "7", "memory": "28Gi"},
    ]
    (error,) = [f for f in only(findings(stack("dev", kueue={"flavors": flavors})), "quotas")]
    assert error.severity == "error"
    assert "flavor h100 selects nodes labelled gpuinfra.dev/gpu-type=h100" in error.message
    assert error.path == "spec.resourceGroups[0].flavors[0]"


def test_a_workload_no_node_can_run_is_an_error_that_names_each_nodes_reason() -> None:
    (error,) = only(findings(stack("dev", triton={**TRITON, "gpuType": "h100"})), "scheduling")
    assert error.object == "Deployment triton/triton"
    assert "node pool l4: labels gpuinfra.dev/gpu-type=l4" in error.message
    assert "node group system: labels none of gpuinfra.dev/gpu-type" in error.message
    assert "node selector gpuinfra.dev/gpu-type=h100" in error.message

    too_big = stack("dev", triton={**TRITON, "gpusPerReplica": 2})
    (error,) = only(findings(too_big), "scheduling")
    assert "nvidia.com/gpu 2 requested, 1 allocatable" in error.message
    assert "node selector" not in error.message, "the selector matches; the size does not"

    defaults = {k: v for k, v in TRITON.items() if k not in ("cpu", "memory")}
    (error,) = only(findings(stack("dev", triton=defaults)), "scheduling")
    assert "node pool l4: cpu 4 requested, 3.92 allocatable" in error.message

    assert only(findings(stack("dev", triton=TRITON)), "scheduling") == []


def quota_warnings(cfg: config.StackConfig) -> list[integrity.Finding]:
    return [f for f in only(findings(cfg), "quotas") if f.severity == "warning"]


def test_gpu_pods_outside_kueue_beside_a_full_quota_are_a_warning_naming_the_room() -> None:
    # dev's l4 pool gives 2 GPUs at its largest; Kueue grants both, Triton's replica holds one.
    (warning,) = quota_warnings(stack("dev", triton=TRITON))
    assert warning.object == "Deployment triton/triton"
    assert warning.message == (
        "holds up to 1 nvidia.com/gpu outside Kueue's accounting (no kueue.x-k8s.io/queue-name "
        "label) on the nodes flavor l4 selects, which give 2 at their largest, while Kueue "
        "grants 2 there: jobs it admits can wait for GPUs these pods hold; lower flavor l4's "
        "nvidia.com/gpu quota to 1"
    )
    # The autoscaler may run up to maxReplicas: that is what the quota must leave.
    scaled = {**TRITON, "autoscaling": True, "maxReplicas": 2}
    (warning,) = quota_warnings(stack("dev", triton=scaled))
    assert "holds up to 2 nvidia.com/gpu" in warning.message
    assert warning.message.endswith("lower flavor l4's nvidia.com/gpu quota to 0")


def test_a_quota_that_leaves_room_for_the_gpu_pods_outside_kueue_is_no_warning() -> None:
    flavors = [{"gpuType": "l4", "gpus": 1, "cpu": "7", "memory": "28Gi"}]
    assert quota_warnings(stack("dev", triton=TRITON, kueue={"flavors": flavors})) == []


def test_an_autoscaler_without_a_metrics_server_is_an_error() -> None:
    on = stack("dev", triton={**TRITON, "autoscaling": True})
    (error,) = only(findings(on), "autoscaling")
    assert error.object == "HorizontalPodAutoscaler triton/triton"
    assert "needs metrics-server" in error.message
    off = addons.render_all(stack("dev", triton=TRITON).addons)
    (triton,) = [r for r in off if r.name == "triton"]
    assert "HorizontalPodAutoscaler" not in [o["kind"] for o in triton.objects]
    assert triton.objects[0]["spec"]["replicas"] == 1


def test_a_namespaced_object_without_a_namespace_is_an_error() -> None:
    loose = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "loose"}}
    placed = {**loose, "metadata": {"name": "placed", "namespace": "x"}}
    queue = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ClusterQueue",
        "metadata": {"name": "q"},
    }
    render = AddonRender(
        name="x", release="x", namespace="x", chart=None, objects=[loose, placed, queue]
    )
    (error,) = integrity.references(integrity.State(renders=(render,), nodes=()))
    assert error.object == "ConfigMap loose"
    assert error.message == "a ConfigMap lives in a namespace; name one"


def test_quantities_read_as_kubernetes_writes_them() -> None:
    assert integrity.quantity("500m") == 0.5
    assert integrity.quantity("64Gi") == 64 * 1024**3
    assert integrity.quantity(8) == 8
    assert integrity.quantity("1.5") == 1.5
    assert integrity.quantity("1Ei") == 1024**6
    assert integrity.quantity("2E") == 2 * 1000**6
    # An exponent, not exa: 1E3 is a thousand.
    assert integrity.quantity("1E3") == 1000


def test_config_check_and_plan_refuse_an_error_with_the_file_and_change(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    shutil.copytree(
        ROOT, root, ignore=shutil.ignore_patterns(".venv", ".git", ".lab", "__pycache__", "build")
    )
    path = root / "stacks" / "Pulumi.dev.yaml"
    document = yaml.safe_load(path.read_text())
    document["config"]["gpuinfra:addons"]["kueue"]["flavors"][0]["gpus"] = 4
    path.write_text(yaml.safe_dump(document))
    for args in (("config", "check", "--stack", "dev"), ("plan", "--stack", "dev")):
        result = run_cli(*args, root=root, cwd=root)
        assert result.code == 2, result.stderr
        (line,) = [line for line in result.stderr.splitlines() if "nvidia.com/gpu" in line]
        assert line.startswith(
            "error: stacks/Pulumi.dev.yaml: ClusterQueue gpu spec.resourceGroups"
        )
        assert "grants 4 nvidia.com/gpu" in line


def test_enforce_returns_warnings_and_raises_on_errors() -> None:
    warning = integrity.Finding("warning", "quotas", "o", "p", "w")
    error = integrity.Finding("error", "quotas", "o", "p", "e")
    assert integrity.enforce([warning], "f") == [warning]
    with pytest.raises(ConfigError) as caught:
        integrity.enforce([warning, error], "f")
    assert caught.value.lines() == ["f: o p: e"]


def volcano(*queues: dict[str, Any]) -> dict[str, Any]:
    return {"enabled": True, "queues": list(queues)}


def test_a_volcano_queue_capped_above_the_cluster_is_an_error() -> None:
    cfg = stack("prod", volcano=volcano({"name": "training", "capability": {"nvidia.com/gpu": 64}}))
    errors = [f for f in only(findings(cfg), "quotas") if f.severity == "error"]
    (error,) = errors
    assert error.object == "Queue training"
    assert "caps nvidia.com/gpu at 64, the cluster can give 20 at its largest" in error.message


def test_gpus_that_kueue_and_volcano_both_hand_out_are_a_warning() -> None:
    cfg = stack("prod", volcano=volcano({"name": "training", "capability": {"nvidia.com/gpu": 16}}))
    (warning,) = [f for f in only(findings(cfg), "quotas") if f.severity == "warning"]
    assert "together they hand out 28 GPUs of 20" in warning.message
    # The shipped split: 8 + 4 for Kueue, 8 for Volcano.
    assert only(findings(config.load_stack("prod")), "quotas") == []


def site_copy(tmp_path: Path, edit_hosts: dict[str, dict[str, Any]]) -> Path:
    """inventory/example with some host variables replaced (None removes one)."""
    site = tmp_path / "site"
    shutil.copytree(ROOT / "inventory" / "example", site)
    hosts_file = site / "hosts.yml"
    document = yaml.safe_load(hosts_file.read_text())
    for name, changes in edit_hosts.items():
        host = document["gpu_nodes"]["hosts"][name]
        for key, value in changes.items():
            if value is None:
                host.pop(key, None)
            else:
                host[key] = value
    hosts_file.write_text(yaml.safe_dump(document))
    return site


TOOLKIT_VARS = Path("group_vars") / "gpu_nodes" / "container_toolkit.yml"
DEFAULT_RUNTIME_ON = "nvidia_container_toolkit_default_runtime: true"


def replace_in(path: Path, old: str, new: str) -> None:
    """Edit a file of a copied site. The old text must be there: an edit that matched nothing
    would leave the example as it is and let the test pass for the wrong reason."""
    text = path.read_text()
    assert old in text, f"{old!r} is not in {path}"
    path.write_text(text.replace(old, new))


def site_findings(path: Path) -> list[integrity.Finding]:
    from gpuinfra import site as site_mod

    loaded = site_mod.load_site(path)
    renders = addons.render_all(addons.settings_from_site(loaded))
    return integrity.check(integrity.site_state(loaded, renders))


def test_the_example_site_passes_with_no_error() -> None:
    found = site_findings(ROOT / "inventory" / "example")
    # Kueue's L4 quota leaves the GPU that Triton's replica holds outside its accounting.
    assert found == []


def test_gpu_pods_on_nodes_no_flavor_hands_out_are_no_warning(tmp_path: Path) -> None:
    site = example_site_with_full_l4_quota(tmp_path)
    kueue = site / "group_vars" / "all" / "kueue.yml"
    (warning,) = site_findings(site)
    assert warning.object == "Deployment triton/triton"
    assert warning.message.endswith("lower flavor l4's nvidia.com/gpu quota to 7")
    # Kueue hands out the H100 host alone: Triton's L4 takes nothing a queue admits.
    document = yaml.safe_load(kueue.read_text())
    document["kueue_flavors"] = [f for f in document["kueue_flavors"] if f["gpu_type"] == "h100"]
    kueue.write_text(yaml.safe_dump(document))
    assert site_findings(site) == []


def test_a_site_whose_hosts_carry_no_gpu_type_cannot_run_triton_or_use_its_quotas(
    tmp_path: Path,
) -> None:
    site = site_copy(tmp_path, {"gpu-node-02": {"gpu_node_registration_gpu_type": None}})
    errors = [f for f in site_findings(site) if f.severity == "error"]
    assert {f.rule for f in errors} == {"scheduling", "quotas"}
    (flavor,) = [f for f in errors if f.rule == "quotas"]
    assert "flavor l4 selects nodes labelled gpuinfra.dev/gpu-type=l4" in flavor.message
    assert "gpu_node_registration_gpu_type" in flavor.message
    result = run_cli("config", "check", "--site", str(site))
    assert result.code == 2
    assert "flavor l4 selects nodes" in result.stderr


def test_a_site_quota_above_its_hosts_gpus_is_an_error(tmp_path: Path) -> None:
    site = site_copy(tmp_path, {"gpu-node-01": {"gpu_node_check_expected_gpu_count": 4}})
    (error,) = [f for f in site_findings(site) if f.severity == "error"]
    assert "flavor h100 grants 8 nvidia.com/gpu" in error.message
    assert "can give 4" in error.message


def test_a_gpu_pod_on_containerd_16_without_the_nvidia_default_runtime_gets_no_gpu(
    tmp_path: Path,
) -> None:
    site = site_copy(tmp_path, {})
    replace_in(
        site / TOOLKIT_VARS, DEFAULT_RUNTIME_ON, "nvidia_container_toolkit_default_runtime: false"
    )
    errors = {f.object: f for f in site_findings(site) if f.severity == "error"}
    # The GPU smoke test would find no GPU there either.
    assert set(errors) == {"Deployment triton/triton", next(o for o in errors if "smoke" in o)}
    error = errors["Deployment triton/triton"]
    assert "host gpu-node-02: containerd 1.6.20 has no CDI support" in error.message
    assert "set nvidia_container_toolkit_default_runtime: true" in error.message


def test_hosts_on_dockers_containerd_read_cdi_without_the_default_runtime(
    tmp_path: Path,
) -> None:
    site = site_copy(tmp_path, {})
    replace_in(
        site / TOOLKIT_VARS,
        DEFAULT_RUNTIME_ON,
        "nvidia_container_toolkit_default_runtime: false\n"
        "nvidia_container_toolkit_containerd_source: docker",
    )
    # containerd 2.3 from Docker's repository reads the CDI devices itself.
    assert [f for f in site_findings(site) if f.severity == "error"] == []


def test_a_runtime_class_or_cdi_off_lets_the_gpu_reach_the_pod() -> None:
    gpu = integrity.Nodes(
        name="host a",
        labels={},
        taints=(),
        allocatable={"nvidia.com/gpu": 1.0},
        count=1,
        cdi_problem="no CDI",
    )
    pod: dict[str, Any] = {"containers": [{"resources": {"limits": {"nvidia.com/gpu": 1}}}]}
    assert integrity._misfit(pod, gpu, cdi=True) == "no CDI"
    assert integrity._misfit({**pod, "runtimeClassName": "nvidia"}, gpu, cdi=True) == ""
    assert integrity._misfit(pod, gpu, cdi=False) == ""
    assert integrity._misfit({"containers": [{}]}, gpu, cdi=True) == ""


def test_a_host_split_by_a_mig_layout_offers_slices_and_needs_its_node_check_to_agree(
    tmp_path: Path,
) -> None:
    labels = {"nvidia.com/mig.config": "inference"}
    site = site_copy(tmp_path, {"gpu-node-01": {"gpu_node_registration_labels": labels}})
    found = site_findings(site)
    (check,) = only(found, "node_checks")
    assert check.object == "host gpu-node-01"
    assert "splits its GPUs by the MIG layout inference" in check.message
    assert "expects MIG disabled" in check.message
    quota = {f.severity: f.message for f in only(found, "quotas") if "h100" in f.message}
    # Seven 1g.10gb slices per GPU, eight GPUs: no whole GPU left for the h100 flavor.
    assert "flavor h100 grants 8 nvidia.com/gpu" in quota["error"]
    assert "offer nvidia.com/mig-1g.10gb, which the queue does not cover" in quota["warning"]
    from gpuinfra import site as site_mod

    nodes = {n.name: n for n in integrity.site_state(site_mod.load_site(site), ()).nodes}
    assert nodes["host gpu-node-01"].allocatable["nvidia.com/mig-1g.10gb"] == 56


def test_a_node_check_expecting_mig_where_no_layout_applies_is_an_error(tmp_path: Path) -> None:
    site = site_copy(tmp_path, {"gpu-node-02": {"gpu_node_check_mig_mode": "enabled"}})
    (check,) = only(site_findings(site), "node_checks")
    assert check.object == "host gpu-node-02"
    assert "expects MIG enabled, and no MIG layout applies" in check.message


def test_a_host_labelled_with_a_mig_layout_the_operator_lacks_is_an_error(
    tmp_path: Path,
) -> None:
    labels = {"nvidia.com/mig.config": "inferense"}
    site = site_copy(tmp_path, {"gpu-node-01": {"gpu_node_registration_labels": labels}})
    (check,) = only(site_findings(site), "node_checks")
    assert (check.severity, check.object, check.path) == (
        "error",
        "host gpu-node-01",
        "gpu_node_registration_labels",
    )
    assert check.message.startswith(
        "nvidia.com/mig.config=inferense names no MIG layout of gpu_operator_mig_profiles; "
        "did you mean 'inference'? (allowed: 'all-disabled' or 'inference')"
    )


def test_a_gpu_newer_than_the_pinned_driver_branch_is_an_error(tmp_path: Path) -> None:
    # Debian 12's 535 branch predates the H200 (R550).
    site = site_copy(tmp_path, {"gpu-node-01": {"gpu_node_registration_gpu_type": "h200"}})
    found = site_findings(site)
    (error,) = [f for f in only(found, "drivers") if f.object == "host gpu-node-01"]
    assert error.path == "nvidia_driver.distro"
    assert "the H200 needs driver branch 550 or newer" in error.message
    assert "the pinned build is 535.261.03" in error.message
    result = run_cli("config", "check", "--site", str(site))
    assert result.code == 2 and "H200 needs driver branch 550" in result.stderr


def test_triton_on_a_data_center_gpu_runs_on_535_through_forward_compatibility() -> None:
    # The example site's L4 host runs 535.261.03; the CUDA 13 image needs 580 natively.
    found = site_findings(ROOT / "inventory" / "example")
    assert only(found, "drivers") == []


def test_triton_on_a_gpu_forward_compatibility_does_not_serve_is_an_error(
    tmp_path: Path,
) -> None:
    # A GPU the support table does not know is no data center GPU to forward compatibility:
    # the CUDA 13 image then needs the 580 driver.
    site = site_copy(tmp_path, {"gpu-node-02": {"gpu_node_registration_gpu_type": "rtx4090"}})
    replace_in(
        site / "group_vars" / "all" / "triton.yml",
        "triton_gpu_type: l4",
        "triton_gpu_type: rtx4090",
    )
    (error,) = only(site_findings(site), "drivers")
    assert error.object == "Deployment triton/triton"
    assert "built on CUDA 13, which needs driver 580.65.06 or newer" in error.message
    assert "host gpu-node-02 runs 535.261.03 (nvidia_driver.distro) on a RTX4090" in error.message


def test_the_stacks_gpu_nodes_run_the_eks_amis_driver() -> None:
    for nodes in integrity.stack_nodes(config.load_stack("prod")):
        if nodes.name.startswith("node pool"):
            assert nodes.driver == "580.159.04" and nodes.gpu in ("h100", "l40s")
    assert only(findings(config.load_stack("prod")), "drivers") == []


def test_the_ngc_table_reads_release_tags_and_forward_compatible_branches() -> None:
    from gpuinfra import gpus

    needs = gpus.image_driver("26.07-py3")
    assert needs is not None and needs.cuda == "13"
    assert gpus.image_driver("24.04-py3") is None and gpus.image_driver("latest") is None
    assert gpus.runs_image("580.159.04", "", needs)
    assert gpus.runs_image("535.86.10", "l4", needs)
    assert not gpus.runs_image("535.54.03", "l4", needs)  # older than the R535 floor
    assert not gpus.runs_image("550.163.01", "l4", needs)  # R550 is not in both notes' lists


def _with_values(cfg: config.StackConfig, name: str, values: dict[str, Any]) -> integrity.State:
    import dataclasses

    renders = [
        dataclasses.replace(r, values={**r.values, **values}) if r.name == name else r
        for r in addons.render_all(cfg.addons)
    ]
    return integrity.stack_state(cfg, renders)


def test_gpu_operator_operands_that_do_not_tolerate_the_gpu_taint_are_an_error() -> None:
    # Values left out keep the chart's default, which tolerates the GPU taint.
    state = _with_values(config.load_stack("prod"), "gpu_operator", {"daemonsets": {}})
    assert integrity.chart_pods(state) == []
    state = _with_values(
        config.load_stack("prod"), "gpu_operator", {"daemonsets": {"tolerations": []}}
    )
    (error,) = integrity.chart_pods(state)
    assert error.object == "gpu-operator (gpu-operator)"
    assert error.path == "daemonsets.tolerations"
    assert "node pool h100: taint nvidia.com/gpu=present:NoSchedule not tolerated" in error.message
    assert "tolerate their taints there" in error.message


def test_a_controller_selecting_no_declared_node_is_an_error() -> None:
    selector = {"prometheusSpec": {"nodeSelector": {"gpuinfra.dev/pool": "monitoring"}}}
    state = _with_values(config.load_stack("prod"), "prometheus_stack", {"prometheus": selector})
    (error,) = integrity.chart_pods(state)
    assert error.path == "prometheus.prometheusSpec.nodeSelector"
    assert "no declared node can run the Prometheus" in error.message
    assert "node group system: labels gpuinfra.dev/pool=system" in error.message


def test_a_controller_asking_more_than_any_node_allocates_is_an_error() -> None:
    resources = {"manager": {"resources": {"requests": {"cpu": "500", "memory": "1Gi"}}}}
    state = _with_values(config.load_stack("dev"), "kueue", {"controllerManager": resources})
    (error,) = integrity.chart_pods(state)
    assert "no declared node can run the Kueue controller" in error.message
    assert "cpu 500 requested" in error.message


def test_the_shipped_charts_pods_fit_their_nodes() -> None:
    for env in ("dev", "staging", "prod"):
        cfg = config.load_stack(env)
        assert integrity.chart_pods(integrity.stack_state(cfg, addons.render_all(cfg.addons))) == []


def _site_with_play(play: tuple[str, ...]) -> list[integrity.Finding]:
    from gpuinfra import site as site_mod

    loaded = site_mod.load_site(ROOT / "inventory" / "example")
    renders = addons.render_all(addons.settings_from_site(loaded))
    return integrity.play_order(integrity.site_state(loaded, renders, play=play))


def test_the_shipped_play_runs_every_role_after_the_charts_its_objects_need() -> None:
    play = integrity.play_roles(ROOT / "playbooks" / "addons.yml")
    assert play == addons.ADDONS
    assert _site_with_play(play) == []


def test_a_role_applying_custom_resources_before_their_crds_role_is_an_error() -> None:
    # Triton's ServiceMonitor and PrometheusRule need the Prometheus stack's CRDs.
    play = ("gpu_operator", "volcano", "kueue", "triton", "prometheus_stack")
    errors = _site_with_play(play)
    assert errors and {f.rule for f in errors} == {"order"}
    monitors = [f for f in errors if f.object.startswith("ServiceMonitor triton/")]
    assert monitors
    assert "role triton applies it before role prometheus_stack installs its CRD" in (
        monitors[0].message
    )
    assert "run prometheus_stack first in playbooks/addons.yml" in monitors[0].message


def test_an_enabled_add_on_the_play_does_not_run_is_an_error() -> None:
    errors = _site_with_play(("prometheus_stack", "gpu_operator", "kueue"))
    assert {f.object for f in errors} == {"role triton"}


# A pager whose routing key is in a Secret the site would create.
PAGER = {
    "secret": "alerting",
    "receivers": [{"name": "oncall", "type": "pagerduty", "routingKeyKey": "pd-key"}],
    "routes": {"critical": ["oncall"]},
}


def test_a_stack_reading_a_secret_nothing_creates_is_an_error() -> None:
    # A stack's apply creates its cluster: a Secret the site would create cannot exist yet.
    cfg = stack("prod", prometheusStack={"grafanaAdminSecret": "grafana-admin"})
    renders = []
    for render in addons.render_all(cfg.addons):
        if render.name == "prometheus_stack":
            render.values["grafana"]["admin"]["existingSecret"] = "made-by-hand"
        renders.append(render)
    (error,) = only(integrity.check(integrity.stack_state(cfg, renders)), "references")
    assert error.object == "kube-prometheus-stack values"
    assert error.path == "grafana.admin.existingSecret"
    assert "reads Secret monitoring/made-by-hand, which nothing in this apply creates" in (
        error.message
    )


def test_the_alerting_secret_is_created_by_a_stacks_apply_and_a_prerequisite_of_a_site() -> None:
    # What a release reads, the same apply creates: the stack makes the Secret from its secret
    # config, so a stack that creates its cluster can route alerts from the first run.
    cfg = stack("prod", prometheusStack={"alerting": PAGER})
    assert only(findings(cfg), "references") == []
    (render,) = [r for r in addons.render_all(cfg.addons) if r.name == "prometheus_stack"]
    (made,) = [s for s in render.secrets if s.name == "alerting"]
    assert made.from_config == {"pd-key": "alerting-pd-key"}
    assert not render.prerequisites
    (needed,) = [p for p in render.site_prerequisites() if p.name == "alerting"]
    assert needed.keys == ("pd-key",)
    assert "kubectl -n monitoring create secret generic alerting --from-literal=pd-key=" in (
        needed.message
    )


def test_the_grafana_secret_is_created_by_a_stack_and_a_prerequisite_of_a_site() -> None:
    assert only(findings(config.load_stack("prod")), "references") == []
    from gpuinfra import site as site_mod

    loaded = site_mod.load_site(ROOT / "inventory" / "example")
    renders = {r.name: r for r in addons.render_all(addons.settings_from_site(loaded))}
    needed = {(p.kind, p.name) for r in renders.values() for p in r.site_prerequisites()}
    assert needed == {
        ("Secret", "grafana-admin"),
        ("Secret", "alerting"),
        ("PersistentVolumeClaim", "triton-models"),
        ("Secret", "triton-admin"),
    }
    (grafana,) = [
        p for p in renders["prometheus_stack"].site_prerequisites() if p.name == "grafana-admin"
    ]
    assert grafana.message.startswith(
        "Secret monitoring/grafana-admin must exist with the keys admin-user, admin-password"
    )
    assert "kubectl -n monitoring create secret generic grafana-admin" in grafana.message


def test_a_storage_class_nothing_creates_is_an_error_and_the_stacks_own_is_not() -> None:
    (error,) = only(findings(stack("prod", prometheusStack={"storageClass": "fast"})), "references")
    assert "reads StorageClass fast, which nothing in this apply creates" in error.message
    assert (
        only(
            findings(stack("prod", prometheusStack={"storageClass": "gp3-encrypted"})), "references"
        )
        == []
    )


def test_an_object_reading_a_config_map_nothing_creates_is_an_error() -> None:
    s3 = {"s3": "s3://models/triton", "region": "us-east-1"}
    cfg = stack("dev", triton={**TRITON, "modelRepository": s3})
    renders = []
    for render in addons.render_all(cfg.addons):
        if render.name == "triton":
            deployment = next(o for o in render.objects if o["kind"] == "Deployment")
            pod = deployment["spec"]["template"]["spec"]
            pod["volumes"].append({"name": "extra", "configMap": {"name": "tuning"}})
        renders.append(render)
    found = only(integrity.check(integrity.stack_state(cfg, renders)), "references")
    (finding,) = found
    assert finding.object == "Deployment triton/triton"
    assert finding.path == f"volumes[{len(pod['volumes']) - 1}].configMap"
    assert "reads ConfigMap triton/tuning, which nothing in this apply creates" in found[0].message


def test_an_s3_model_repositorys_service_account_is_created_by_the_same_apply() -> None:
    s3 = {"s3": "s3://models/triton", "region": "us-east-1", "serviceAccount": "model-reader"}
    cfg = stack("dev", triton={**TRITON, "modelRepository": s3})
    (triton,) = [r for r in addons.render_all(cfg.addons) if r.name == "triton"]
    accounts = [o for o in triton.objects if o["kind"] == "ServiceAccount"]
    assert [a["metadata"]["name"] for a in accounts] == ["model-reader"]
    assert only(findings(cfg), "references") == []


def test_a_stack_serving_from_a_claim_nothing_creates_is_an_error() -> None:
    (error,) = only(findings(stack("dev", triton=TRITON)), "references")
    assert error.path.endswith("].persistentVolumeClaim")
    assert "reads PersistentVolumeClaim triton/models" in error.message


def test_pulumi_up_refuses_what_the_plan_refuses_before_registering_anything(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import runpy

    program = runpy.run_path(str(ROOT / "stacks" / "__main__.py"), run_name="gpuinfra_stack")
    broken = stack("prod", prometheusStack={"storageClass": "fast"})
    registered: list[str] = []
    monkeypatch.setitem(program["run"].__globals__, "load_stack", lambda env: broken)
    monkeypatch.setitem(
        program["run"].__globals__, "main", lambda *a, **k: registered.append("main")
    )
    with pytest.raises(ConfigError) as refused:
        program["run"]("prod")
    assert "reads StorageClass fast" in "\n".join(refused.value.lines())
    assert registered == []
    monkeypatch.setitem(program["run"].__globals__, "load_stack", config.load_stack)
    for key in ("alerting-pagerduty-routing-key", "alerting-slack-webhook-url"):
        monkeypatch.setenv(pulumi_config.get_config_env_key(f"gpuinfra:{key}"), "set")
    program["run"]("prod")
    assert registered == ["main"]


def test_pulumi_up_names_the_secret_config_to_set_before_registering_anything(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import runpy

    import pulumi

    program = runpy.run_path(str(ROOT / "stacks" / "__main__.py"), run_name="gpuinfra_stack")
    registered: list[str] = []
    monkeypatch.setitem(
        program["run"].__globals__, "main", lambda *a, **k: registered.append("main")
    )
    monkeypatch.delenv("PULUMI_CONFIG", raising=False)
    slack = pulumi_config.get_config_env_key("gpuinfra:alerting-slack-webhook-url")
    monkeypatch.setenv(slack, "https://hooks.slack.invalid/T0/B0/x")
    with pytest.raises(pulumi.RunError) as refused:
        program["run"]("prod")
    assert str(refused.value) == (
        "stacks/Pulumi.prod.yaml: the stack's Secrets read secret config that is not set: run "
        "pulumi config set --secret gpuinfra:alerting-pagerduty-routing-key <value>"
    )
    assert registered == []

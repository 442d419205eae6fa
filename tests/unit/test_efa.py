"""EFA on the cloud path: the device plugin offers an EFA pool's interfaces, and only there.

The prod stack has one EFA pool (h100, p5.48xlarge: 32 interfaces, two nodes) and one without
(serving, g6e.2xlarge); its Kueue flavor for h100 grants 32 interfaces.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuinfra import autoscaler, config, efa, integrity, schemas
from gpuinfra import versions as versions_mod
from gpuinfra.addons import render_all
from gpuinfra.addons.base import EFA_RESOURCE
from gpuinfra.review import stackrun
from tests.conftest import ROOT, run_main, user_repo

PINS = versions_mod.pinned()


def plugin_pod() -> dict[str, Any]:
    (daemonset,) = efa.objects(PINS)
    return daemonset["spec"]["template"]["spec"]


def prod_state(**kueue: Any) -> integrity.State:
    cfg = config.load_stack("prod")
    if kueue:
        flavors = [
            f.model_copy(update=kueue) if f.gpu_type == "h100" else f
            for f in cfg.addons.kueue.flavors
        ]
        addons = cfg.addons.model_copy(
            update={"kueue": cfg.addons.kueue.model_copy(update={"flavors": flavors})}
        )
        cfg = cfg.model_copy(update={"addons": addons})
    return integrity.stack_state(cfg, render_all(cfg.addons, versions=PINS), PINS)


def test_the_plugin_is_valid_and_runs_the_pinned_image() -> None:
    for obj in efa.objects(PINS):
        assert schemas.core_problems(obj, PINS.kubernetes.version) == [], obj["kind"]
    (container,) = plugin_pod()["containers"]
    pin = PINS.efa_device_plugin
    assert container["image"] == f"{pin.source.image}:{pin.version}"
    mounts = {m["mountPath"] for m in container["volumeMounts"]}
    assert mounts == {"/var/lib/kubelet/device-plugins", "/dev/infiniband"}


def test_the_plugin_runs_on_the_efa_pool_and_nowhere_else() -> None:
    fits = {nodes.name: why for nodes, why in integrity.fit(plugin_pod(), prod_state())}
    assert fits["node pool h100"] == ""
    assert fits["node pool serving"] != ""
    assert fits["node group system"] != ""


def test_an_efa_pool_offers_its_interfaces_and_another_pool_none() -> None:
    nodes = {n.name: n for n in prod_state().nodes}
    assert nodes["node pool h100"].allocatable[EFA_RESOURCE] == 32
    assert nodes["node pool h100"].labels[efa.LABEL] == "true"
    assert EFA_RESOURCE not in nodes["node pool serving"].allocatable
    assert efa.LABEL not in nodes["node pool serving"].labels


def test_the_autoscaler_knows_an_efa_pool_offers_its_interfaces() -> None:
    tags = integrity.pool_template_tags("h100", "p5.48xlarge", {}, efa=True)
    labels, _taints, resources = autoscaler.template(tags)
    assert resources == {"nvidia.com/gpu": 8.0, EFA_RESOURCE: 32.0}
    assert labels[efa.LABEL] == "true"
    plain = autoscaler.template(integrity.pool_template_tags("h100", "p5.48xlarge", {}))
    assert plain[2] == {"nvidia.com/gpu": 8.0}
    assert efa.LABEL not in plain[0]


def quota_findings(state: integrity.State) -> list[integrity.Finding]:
    return [f for f in integrity.check(state) if f.rule == "quotas"]


def test_an_efa_quota_within_the_pool_passes_and_beyond_it_is_an_error() -> None:
    assert quota_findings(prod_state()) == []
    (error,) = quota_findings(prod_state(efa_interfaces=65))
    assert error.severity == "error"
    assert "grants 65 vpc.amazonaws.com/efa, the nodes it selects can give 64" in error.message


def test_efa_nodes_with_no_efa_quota_are_a_warning() -> None:
    (warning,) = quota_findings(prod_state(efa_interfaces=0))
    assert warning.severity == "warning"
    assert warning.message == (
        "the nodes flavor h100 selects offer vpc.amazonaws.com/efa, which the queue does not "
        "cover: workloads asking for it are never admitted"
    )


def test_only_a_stack_with_an_efa_pool_runs_the_plugin() -> None:
    def daemonsets(env: str) -> list[str]:
        run = stackrun.run_stack(env, root=ROOT)
        return [r.name for r in run.resources if r.type_ == "kubernetes:apps/v1:DaemonSet"]

    assert daemonsets("prod") == ["gpuinfra-prod-efa-daemonset"]
    assert daemonsets("dev") == []


JOB = (
    "workloads",
    "training",
    "llm-pretrain",
    "--image",
    "nvcr.io/nvidia/pytorch:25.01-py3",
    "--namespace",
    "research",
    "--gpu-type",
    "h100",
    "--network",
    "efa",
    "--stack",
    "prod",
)


def test_a_training_job_on_efa_fits_the_prod_stack(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    user_repo(tmp_path / "repo", monkeypatch)
    code, out, err = run_main(capsys, *JOB, "--efa-interfaces", "32")
    assert code == 0, err
    job = next(d for d in yaml.safe_load_all(out) if d["kind"] == "Job")
    (container,) = job["spec"]["template"]["spec"]["containers"]
    assert container["resources"]["requests"][EFA_RESOURCE] == 32


def test_more_efa_interfaces_than_the_quota_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    root = user_repo(tmp_path / "repo", monkeypatch)
    path = root / "stacks" / "Pulumi.prod.yaml"
    path.write_text(path.read_text().replace("efaInterfaces: 32}", "efaInterfaces: 16}"))
    # Two pods of 4 GPUs, each with its share of a node's interfaces: 16 in all.
    code, _out, err = run_main(
        capsys, *JOB, "--gpus-per-node", "4", "--nodes", "2", "--efa-interfaces", "8"
    )
    assert code == 0, err
    code, out, err = run_main(capsys, *JOB, "--efa-interfaces", "32")
    assert (code, out) == (2, "")
    assert err == (
        "error: --nodes 1 --efa-interfaces 32: 32 EFA interfaces in all, more than Kueue's "
        "quota of 16 for h100 in stack prod, so the Job waits forever (allowed: at most 16 in "
        "all, or set efaInterfaces of kueue.flavors' h100 entry to 32 or more)\n"
    )


def test_a_flavor_without_efa_quota_is_refused_naming_the_setting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    root = user_repo(tmp_path / "repo", monkeypatch)
    path = root / "stacks" / "Pulumi.prod.yaml"
    path.write_text(path.read_text().replace(", efaInterfaces: 32}", "}"))
    code, out, err = run_main(capsys, *JOB, "--efa-interfaces", "32")
    assert (code, out) == (2, "")
    assert err == (
        "error: --nodes 1 --efa-interfaces 32: Kueue's h100 flavor in stack prod has no EFA "
        "quota, so the Job waits forever (allowed: set efaInterfaces of kueue.flavors' h100 "
        "entry to 32 or more)\n"
    )


def test_efa_where_no_node_of_the_type_offers_it_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    user_repo(tmp_path / "repo", monkeypatch, site=True)
    job = JOB[: JOB.index("--gpu-type")]
    efa_job = (*job, "--network", "efa", "--efa-interfaces", "1", "--gpus-per-node", "1")
    code, out, err = run_main(capsys, *efa_job, "--gpu-type", "l4", "--stack", "dev")
    assert (code, out) == (2, "")
    assert err == (
        "error: --network efa: no l4 node of stack dev offers EFA interfaces "
        "(vpc.amazonaws.com/efa) (allowed: efa: true on a node pool of l4 GPUs, or --network "
        "tcp)\n"
    )
    code, out, err = run_main(capsys, *efa_job, "--gpu-type", "h100", "--site", "inventory/example")
    assert (code, out) == (2, "")
    assert err == (
        "error: --network efa: no h100 node of site example offers EFA interfaces "
        "(vpc.amazonaws.com/efa) (allowed: --network infiniband, roce or tcp; EFA is an AWS "
        "instance's)\n"
    )

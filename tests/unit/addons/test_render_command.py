"""`gpuinfra addons render`: what a reviewer reads is what the paths apply."""

from __future__ import annotations

import shutil
from pathlib import Path

import yaml
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc


def _site(root: Path, repo_root: Path, group_vars: str) -> Path:
    shutil.copy(repo_root / "versions.yaml", root / "versions.yaml")
    site = root / "inventory" / "lab"
    (site / "group_vars").mkdir(parents=True)
    (site / "hosts.yml").write_text("all:\n  hosts:\n    gpu1:\n    gpu2:\n", "utf-8")
    (site / "group_vars" / "all.yml").write_text(group_vars, "utf-8")
    return site


def test_render_from_a_site_writes_every_file(cli, repo_root: Path, tmp_path: Path) -> None:
    site = _site(
        tmp_path,
        repo_root,
        "gpu_operator_mig_strategy: single\n"
        "volcano_enabled: true\n"
        "volcano_queues: [{name: training, weight: 2}]\n"
        "triton_enabled: true\n"
        "triton_model_repository: {pvc: models}\n"
        "triton_models:\n"
        "  - {name: resnet, backend: onnxruntime, max_batch_size: 8}\n",
    )
    out = tmp_path / "out"
    result = cli("addons", "render", "--site", str(site), "--out", str(out), root=tmp_path)
    assert result.code == 0, result.stderr
    release = yaml.safe_load((out / "gpu_operator" / "release.yaml").read_text("utf-8"))
    assert release["chart"]["name"] == "gpu-operator"
    values = yaml.safe_load((out / "gpu_operator" / "values.yaml").read_text("utf-8"))
    assert values["mig"]["strategy"] == "single"
    objects = yaml.safe_load_all((out / "volcano" / "objects.yaml").read_text("utf-8"))
    (queue,) = [o for o in objects if o["kind"] != "NetworkPolicy"]
    assert (queue["kind"], queue["metadata"]["name"], queue["spec"]["weight"]) == (
        "Queue",
        "training",
        2,
    )
    pbtxt = (out / "triton" / "models" / "resnet" / "config.pbtxt").read_text("utf-8")
    assert text_format.Parse(pbtxt, mc.ModelConfig()).max_batch_size == 8
    assert not (out / "triton" / "values.yaml").exists()


def test_a_bad_site_variable_is_one_line_naming_the_file(
    cli, repo_root: Path, tmp_path: Path
) -> None:
    site = _site(tmp_path, repo_root, "kueue_cohrt: ml\n")
    result = cli("addons", "render", "--site", str(site), root=tmp_path)
    assert result.code == 2
    assert result.stderr.strip() == (
        "error: inventory/lab/group_vars/all.yml: kueue_cohrt: unknown variable of role "
        "'kueue'; did you mean 'kueue_cohort'?"
    )
    assert "Traceback" not in result.stderr


def test_render_a_shipped_stack_to_stdout(cli) -> None:
    result = cli("addons", "render", "--stack", "dev")
    assert result.code == 0, result.stderr
    assert "# --- gpu_operator/values.yaml" in result.stdout
    assert "# --- prometheus_stack/objects.yaml" in result.stdout
    assert "kind: PrometheusRule" in result.stdout

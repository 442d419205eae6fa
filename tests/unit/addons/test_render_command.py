"""`gpuinfra addons render`: what a reviewer reads is what the paths apply."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
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


@pytest.mark.parametrize(
    ("setting", "value", "line"),
    [
        (
            "max_batch_size: 32",
            "max_batch_size: 2147483648",
            "triton_models[0].max_batch_size: input should be less than or equal to 2147483647, "
            "got 2147483648",
        ),
        (
            "max_queue_delay_microseconds: 200",
            "max_queue_delay_microseconds: 100000000000000000000000",
            "triton_models[0].dynamic_batching.max_queue_delay_microseconds: input should be less "
            "than or equal to 18446744073709551615, got 100000000000000000000000",
        ),
    ],
)
@pytest.mark.parametrize(
    "command", [("config", "check"), ("plan",), ("addons", "render")], ids=" ".join
)
def test_a_model_config_value_its_protobuf_field_cannot_hold_is_one_line(
    cli,
    repo_root: Path,
    tmp_path: Path,
    command: tuple[str, ...],
    setting: str,
    value: str,
    line: str,
) -> None:
    """The ModelConfig's int32 and uint64 fields: refused where the settings are read, as a
    file's mistake, not an internal error when the config is written."""
    shutil.copy(repo_root / "versions.yaml", tmp_path / "versions.yaml")
    shutil.copytree(repo_root / "inventory" / "example", tmp_path / "inventory" / "example")
    vars_file = tmp_path / "inventory" / "example" / "group_vars" / "all" / "triton.yml"
    text = vars_file.read_text("utf-8")
    assert setting in text
    vars_file.write_text(text.replace(setting, value, 1), "utf-8")
    out = tmp_path / "out"
    args = ("--out", str(out)) if command == ("addons", "render") else ()
    result = cli(*command, "--site", "inventory/example", *args, root=tmp_path, cwd=tmp_path)
    assert result.code == 2, result.stderr
    assert result.stderr == f"error: inventory/example/group_vars/all/triton.yml: {line}\n"
    assert not out.exists()


def test_render_a_shipped_stack_to_stdout(cli) -> None:
    result = cli("addons", "render", "--stack", "dev")
    assert result.code == 0, result.stderr
    assert "# --- gpu_operator/values.yaml" in result.stdout
    assert "# --- prometheus_stack/objects.yaml" in result.stdout
    assert "kind: PrometheusRule" in result.stdout

"""Triton's model repository before Triton starts: version directories, model files, image."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from gpuinfra import addons
from gpuinfra.addons import triton
from gpuinfra.errors import ConfigError
from gpuinfra.versions import pinned
from tests.unit.roles.conftest import ROOT, load_module

MODELS: list[dict[str, Any]] = [
    {
        "name": "resnet50",
        "backend": "onnxruntime",
        "versionPolicy": {"policy": "specific", "versions": [3, 1]},
    },
    {"name": "ranker", "backend": "python", "versionPolicy": {"policy": "latest", "latest": 2}},
    {"name": "llm", "backend": "vllm", "versionPolicy": {"policy": "all"}},
]


def _settings(**extra: Any) -> triton.TritonSettings:
    return triton.TritonSettings.model_validate(
        {
            "enabled": True,
            "imageVariant": "vllm",
            "modelRepository": {"pvc": "models"},
            "models": MODELS,
            **extra,
        }
    )


COMPLETE = [
    "resnet50/1/model.onnx",
    "resnet50/3/model.onnx",
    "ranker/2/model.py",
    "llm/1/model.json",
]


def test_a_complete_repository_has_no_problems() -> None:
    assert triton.repository_problems(_settings().models, COMPLETE) == []


@pytest.mark.parametrize(
    ("drop", "problem"),
    [
        (
            "resnet50/3/model.onnx",
            "model 'resnet50' (version_policy specific [1, 3]): no version directory resnet50/3/",
        ),
        (
            "ranker/2/model.py",
            "model 'ranker' (version_policy latest 2): no version directory ranker/<number>/",
        ),
        (
            "llm/1/model.json",
            "model 'llm' (version_policy all): no version directory llm/<number>/",
        ),
    ],
)
def test_a_missing_version_is_named(drop: str, problem: str) -> None:
    paths = [p for p in COMPLETE if p != drop]
    assert triton.repository_problems(_settings().models, paths) == [problem]


def test_vllm_needs_its_engine_arguments_in_each_served_version() -> None:
    paths = [*COMPLETE, "llm/2/README"]
    assert triton.repository_problems(_settings().models, paths) == [
        "model 'llm' (version_policy all): llm/2/model.json is missing (the vllm backend reads it)"
    ]


@pytest.mark.parametrize("prefix", ["serving", "serving/", "/serving/"])
def test_an_s3_listing_is_read_below_the_repositorys_prefix(prefix: str) -> None:
    listed = [f"serving/{p}" for p in COMPLETE]
    assert triton.repository_problems(_settings().models, listed, prefix) == []
    # A key beside the prefix is another repository's: the version there does not count.
    beside = [p for p in listed if not p.startswith("serving/ranker/")] + [
        "serving-old/ranker/2/model.py"
    ]
    assert triton.repository_problems(_settings().models, beside, prefix) == [
        "model 'ranker' (version_policy latest 2): no version directory ranker/<number>/"
    ]


def test_the_roles_filter_reads_the_listing_below_the_prefix_as_the_command_does() -> None:
    """roles/triton lists the bucket and passes the URI's path as the prefix."""
    filters = load_module(
        "gpuinfra_triton_filter", ROOT / "plugins" / "filter" / "gpuinfra_triton.py"
    )
    check = filters.FilterModule().filters()["gpuinfra_triton_repository_problems"]
    settings = _settings().model_dump(mode="json")
    listed = [f"models/serving/{p}" for p in COMPLETE if p != "llm/1/model.json"]
    missing = ["model 'llm' (version_policy all): no version directory llm/<number>/"]
    assert check(listed, settings, "models/serving/") == missing
    assert check([f"models/serving/{p}" for p in COMPLETE], MODELS, "models/serving") == []
    assert check(listed, settings) == [
        "model 'resnet50' (version_policy specific [1, 3]): no version directory "
        "resnet50/1/, resnet50/3/",
        "model 'ranker' (version_policy latest 2): no version directory ranker/<number>/",
        *missing,
    ]


def _preflight(tmp_path: Path, paths: list[str]) -> subprocess.CompletedProcess[str]:
    for relative in paths:
        (tmp_path / relative).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / relative).write_text("")
    script = triton.preflight_script(_settings().models, root=str(tmp_path))
    return subprocess.run(["/bin/sh", "-c", script], capture_output=True, text=True, check=False)


def test_the_pod_preflight_passes_a_complete_volume(tmp_path: Path) -> None:
    done = _preflight(tmp_path, COMPLETE)
    assert (done.returncode, done.stderr) == (0, "")


def test_the_pod_preflight_names_what_the_volume_lacks(tmp_path: Path) -> None:
    done = _preflight(tmp_path, ["resnet50/1/model.onnx", "llm/4/config"])
    assert done.returncode == 1
    assert done.stderr.splitlines() == [
        f"model repository {tmp_path}: model resnet50 (version_policy specific [1, 3]): "
        "no version directory 3/",
        f"model repository {tmp_path}: model ranker (version_policy latest 2): "
        "no version directory",
        f"model repository {tmp_path}: model llm (version_policy all): 4/model.json is missing",
    ]


def test_a_pvc_repository_is_checked_in_the_pod_before_triton_starts() -> None:
    pod = addons.render("triton", _settings()).objects[0]["spec"]["template"]["spec"]
    (init,) = pod["initContainers"]
    assert init["command"][:2] == ["/bin/sh", "-c"]
    assert init["command"][2] == triton.preflight_script(_settings().models)
    assert init["volumeMounts"] == [{"name": "models", "mountPath": "/models", "readOnly": True}]


def test_vllm_runs_in_the_pinned_vllm_image() -> None:
    (container,) = addons.render("triton", _settings()).objects[0]["spec"]["template"]["spec"][
        "containers"
    ]
    pins = pinned().triton
    assert container["image"] == f"{pins.source.image}:{pins.variants['vllm']}"
    assert pins.variants["vllm"].endswith("-vllm-python-py3")


def test_vllm_in_the_default_image_is_refused() -> None:
    with pytest.raises(ConfigError) as caught:
        addons.render(
            "triton",
            {"enabled": True, "modelRepository": {"pvc": "m"}, "models": MODELS},
            file="stacks/Pulumi.prod.yaml",
        )
    (problem,) = caught.value.problems
    assert str(problem) == (
        "stacks/Pulumi.prod.yaml: model 'llm' has backend 'vllm', which the default Triton image "
        "does not contain; set imageVariant: vllm (the -vllm-python-py3 tag pinned in "
        "versions.yaml triton.variants.vllm)"
    )


def _template(settings: triton.TritonSettings) -> dict[str, Any]:
    template: dict[str, Any] = addons.render("triton", settings).objects[0]["spec"]["template"]
    return template


def test_a_changed_model_config_changes_the_pod_template() -> None:
    before = _template(_settings())
    changed = [{**MODELS[0], "maxBatchSize": 8}, *MODELS[1:]]
    after = _template(_settings(models=changed))
    key = triton.CONFIG_HASH_ANNOTATION
    assert before["metadata"]["annotations"][key] != after["metadata"]["annotations"][key]
    # Reordering the models changes no config, so no rollout.
    reordered = _template(_settings(models=list(reversed(MODELS))))
    assert reordered["metadata"]["annotations"] == before["metadata"]["annotations"]


def test_triton_loads_models_once_at_start() -> None:
    (container,) = _template(_settings())["spec"]["containers"]
    assert "--model-control-mode=none" in container["args"]

"""Every model config gpuinfra renders loads into a real Triton, and what Triton refuses.

The server is the pinned local Triton (``scripts/setup-triton.sh``; the README's test command
installs it), bound to 127.0.0.1. Without it these tests skip, except under
``GPUINFRA_REQUIRE_TRITON=1`` (set by ``scripts/test.sh``), where its absence fails them.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

from gpuinfra import addons, config
from gpuinfra import site as site_mod
from gpuinfra.addons import triton
from gpuinfra.addons.triton import TritonModel, TritonSettings
from gpuinfra.errors import ConfigError
from gpuinfra.lab import triton as local
from tests.conftest import ROOT
from tests.unit.addons.conftest import SCENARIOS
from tests.unit.lab.conftest import ports


def _sources() -> Iterator[tuple[str, TritonSettings]]:
    for path in sorted((ROOT / "stacks").glob("Pulumi.*.yaml")):
        env = path.name.split(".")[1]
        yield f"stack-{env}", config.load_stack(env).addons.triton
    # The lab inventory gets its hosts.yml from `lab up`; a shipped site has its own.
    for inventory in sorted(p.parent for p in (ROOT / "inventory").glob("*/hosts.yml")):
        settings = addons.settings_from_site(site_mod.load_site(inventory))
        yield f"site-{inventory.name}", settings.triton
    for name, scenario in SCENARIOS.items():
        yield f"scenario-{name}", addons.AddonsSettings.model_validate(scenario).triton


SOURCES = {name: settings for name, settings in _sources() if settings.models}


def test_the_shipped_sites_and_scenarios_have_models_to_load() -> None:
    assert {"site-example", "scenario-everything", "scenario-time-slicing-single-mig"} <= set(
        SOURCES
    )


@pytest.mark.parametrize("source", sorted(SOURCES))
def test_every_rendered_config_loads_and_is_served_as_rendered(
    inst: local.Installation, tmp_path: Path, source: str
) -> None:
    settings = SOURCES[source]
    files = dict(addons.render("triton", settings).files)
    with local.serving(inst, tmp_path, list(settings.models), files, ports=ports()) as server:
        client = server.client()
        index = client.get_model_repository_index().models
        states = {(m.name, int(m.version)): m.state for m in index}
        for model in settings.models:
            served_versions = sorted(v for name, v in states if name == model.name)
            assert served_versions == local.stand_in_versions(model), model.name
            assert {states[(model.name, v)] for v in served_versions} == {"READY"}
            rendered = text_format.Parse(
                local.cpu_config(files[f"models/{model.name}/config.pbtxt"]), mc.ModelConfig()
            )
            served = client.get_model_config(model.name).config
            assert local.served_differences(rendered, served) == [], model.name


def test_the_only_substitution_is_gpu_to_cpu() -> None:
    model = TritonModel(name="m", backend="onnxruntime", max_batch_size=4)
    text = triton.config_pbtxt(model)
    assert "KIND_GPU" in text
    assert local.cpu_config(text) == text.replace("KIND_GPU", "KIND_CPU")


def _refused(inst: local.Installation, tmp_path: Path, name: str, pbtxt: str) -> str:
    """Triton's error for a repository holding one hand-written config, version 1 present."""
    (tmp_path / "models" / name / "1").mkdir(parents=True)
    (tmp_path / "models" / name / "config.pbtxt").write_text(pbtxt)
    backend_dir = local.backends(inst, tmp_path / "backends")
    with pytest.raises(local.TritonRefused) as refused:
        local.start(inst, tmp_path / "models", backend_dir, ports=ports()).stop()
    return str(refused.value)


@pytest.mark.parametrize(
    ("model", "refusal", "pbtxt", "tritons"),
    [
        pytest.param(
            {
                "backend": "onnxruntime",
                "maxBatchSize": 8,
                "dynamicBatching": {"preferredBatchSize": [16]},
            },
            "preferredBatchSize values must lie between 1 and ",
            "max_batch_size: 8\ndynamic_batching { preferred_batch_size: [16] }\n",
            "dynamic batching preferred size must be <= max batch size",
            id="a-preferred-batch-above-the-maximum",
        ),
        pytest.param(
            {"backend": "python", "maxBatchSise": 8},
            "maxBatchSise",
            "max_batch_sise: 8\n",
            'no field named "max_batch_sise"',
            id="an-unknown-field",
        ),
    ],
)
def test_gpuinfra_refuses_what_triton_refuses(
    inst: local.Installation,
    tmp_path: Path,
    model: dict[str, Any],
    refusal: str,
    pbtxt: str,
    tritons: str,
) -> None:
    with pytest.raises(ConfigError, match=refusal):
        addons.parse_settings("triton", {"models": [{"name": "m", **model}]})
    error = _refused(inst, tmp_path, "m", f'name: "m"\nbackend: "{model["backend"]}"\n{pbtxt}')
    assert tritons in error


def test_a_name_that_differs_from_its_directory(inst: local.Installation, tmp_path: Path) -> None:
    # gpuinfra writes models/<name>/config.pbtxt from one name, so the two cannot differ.
    files = triton.ModelFiles([TritonModel(name="m", backend="python")])
    assert list(files) == ["models/m/config.pbtxt"]
    error = _refused(inst, tmp_path, "m", 'name: "other"\nbackend: "python"\n')
    assert "unexpected directory name 'm' for model 'other'" in error


def test_a_missing_version_directory(inst: local.Installation, tmp_path: Path) -> None:
    model = TritonModel.model_validate(
        {"name": "m", "backend": "python", "versionPolicy": {"policy": "specific", "versions": [2]}}
    )
    assert triton.repository_problems([model], ["m/1/model.py"]) == [
        "model 'm' (version_policy specific [2]): no version directory m/2/"
    ]
    error = _refused(inst, tmp_path, "m", triton.config_pbtxt(model))
    assert "at least one version must be available under the version policy" in error


def test_tensorflow_needs_a_model_file(inst: local.Installation, tmp_path: Path) -> None:
    error = _refused(inst, tmp_path, "tf", 'name: "tf"\nbackend: "tensorflow"\n')
    assert "unexpected 'platform' and 'backend' pair" in error


SITE = "inventory/example"


def _verify(url: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpuinfra", "triton", "verify", f"--url={url}", "--site", SITE],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
        check=False,
    )


def test_verify_reads_the_served_versions_against_the_declared_policies(
    inst: local.Installation, tmp_path: Path
) -> None:
    settings = SOURCES["site-example"]
    files = dict(addons.render("triton", settings).files)
    with local.serving(inst, tmp_path, list(settings.models), files, ports=ports()) as server:
        done = _verify(server.grpc_url)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "resnet50 1: READY" in done.stdout

    # The site declares the newest version of resnet50; a server holding two serves both.
    (model,) = settings.models
    two = model.model_copy(
        update={"version_policy": triton.VersionPolicy(policy="specific", versions=[1, 2])}
    )
    other = tmp_path / "two"
    with local.serving(inst, other, [two], dict(triton.ModelFiles([two])), ports=ports()) as server:
        done = _verify(server.grpc_url)
    assert done.returncode == 1
    assert done.stderr.strip() == (
        f"error: {server.grpc_url}: model 'resnet50' (version_policy latest 1): READY versions "
        "[1, 2], declared the newest 1"
    )


def test_index_problems_name_each_mismatch() -> None:
    models = [
        TritonModel.model_validate(
            {
                "name": "a",
                "backend": "python",
                "versionPolicy": {"policy": "specific", "versions": [1, 3]},
            }
        ),
        TritonModel.model_validate(
            {"name": "b", "backend": "python", "versionPolicy": {"policy": "all"}}
        ),
    ]
    index = [("a", 1, "READY"), ("a", 3, "UNAVAILABLE"), ("b", 1, "UNAVAILABLE"), ("c", 1, "READY")]
    assert triton.index_problems(models, index) == [
        "model 'a' (version_policy specific [1, 3]): READY versions [1], declared [1, 3]",
        "model 'b' (version_policy all): no READY version",
        "model 'c' is served but not declared",
    ]


def test_the_metrics_the_alerts_read_are_what_triton_exposes(
    inst: local.Installation, tmp_path: Path
) -> None:
    import re
    import urllib.request

    import numpy as np
    from tritonclient.grpc import InferInput

    from gpuinfra.addons import prometheus_stack

    model = TritonModel(name="m", backend="onnxruntime", max_batch_size=4)
    files = dict(triton.ModelFiles([model]))
    with local.serving(inst, tmp_path, [model], files, ports=ports()) as server:
        given = InferInput(local.STANDIN_INPUT, [1, local.STANDIN_DIMS], "FP32")
        given.set_data_from_numpy(np.zeros((1, local.STANDIN_DIMS), dtype=np.float32))
        server.client().infer("m", [given])
        url = f"http://127.0.0.1:{server.metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=10) as response:
            exposed = set(re.findall(r"^(nv_[a-z_]+)", response.read().decode(), re.MULTILINE))
    rules = [r for g in prometheus_stack.alert_rules()["groups"] for r in g["rules"]]
    read = {name for r in rules for name in re.findall(r"\b(nv_[a-z_]+)\b", r["expr"])}
    assert read, "no alert reads Triton's metrics"
    assert read - exposed == set()


def test_a_server_that_takes_the_connection_and_never_answers_ends_the_wait_by_its_deadline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A tritonserver that runs and never answers: its gRPC port takes connections and says
    # nothing, as a server stuck in its start (or not Triton at all) does.
    inst = local.Installation(tmp_path / "venv")
    inst.server.parent.mkdir(parents=True)
    inst.server.write_text("#!/bin/sh\nexec sleep 300\n")
    inst.server.chmod(0o755)
    monkeypatch.setattr(local, "READY_PROBE_S", 0.5)
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    held: list[socket.socket] = []

    def take() -> None:
        while True:
            try:
                held.append(listener.accept()[0])
            except OSError:
                return

    threading.Thread(target=take, daemon=True).start()
    repository = tmp_path / "models"
    repository.mkdir()
    grpc = listener.getsockname()[1]
    try:
        started = time.monotonic()
        with pytest.raises(local.TritonRefused, match=r"^tritonserver not ready after 2 s"):
            local.start(
                inst,
                repository,
                tmp_path / "backends",
                ports=(local.free_port(), grpc, local.free_port()),
                timeout=2,
            )
        assert time.monotonic() - started < 4
        assert held, "the client never connected"
    finally:
        listener.close()
        for conn in held:
            conn.close()

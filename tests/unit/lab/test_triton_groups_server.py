"""Serving groups on a real Triton: from one shared repository, each group's server loads only
its own models, and a canary serves the versions its own config names.

The server is the pinned local Triton (``scripts/setup-triton.sh``), bound to 127.0.0.1; without
it these tests skip, except under ``GPUINFRA_REQUIRE_TRITON=1``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuinfra import addons
from gpuinfra.addons import triton
from gpuinfra.lab import triton as local
from tests.unit.addons.conftest import SCENARIOS
from tests.unit.lab.conftest import ports

SETTINGS = addons.AddonsSettings.model_validate(SCENARIOS["serving-groups"]).triton
GROUPS = {g.name: g for g in triton.groups(SETTINGS)}


@pytest.fixture(scope="module")
def repository(inst: local.Installation, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One repository for every group, as the S3 prefix holds it: each model, the canary's
    config, and the version directories stable's and the canary's policies need."""
    work = tmp_path_factory.mktemp("groups")
    files = dict(addons.render("triton", SETTINGS).files)
    local.model_repository(triton.served_models(SETTINGS), files, work / "models")
    local.backends(inst, work / "backends")
    return work


@pytest.mark.parametrize("name", sorted(GROUPS))
def test_each_group_serves_only_its_models_at_the_declared_versions(
    inst: local.Installation, repository: Path, name: str
) -> None:
    group = GROUPS[name]
    server = local.start(
        inst,
        repository / "models",
        repository / "backends",
        ports=ports(),
        model_args=triton.model_args(group),
    )
    try:
        index = server.client().get_model_repository_index().models
        ready = sorted((m.name, int(m.version)) for m in index if m.state == "READY")
        problems = triton.index_problems(
            group.models, [(m.name, int(m.version or 0), m.state) for m in index if m.state]
        )
    finally:
        server.stop()
    # Every other model of the repository is listed but not loaded.
    assert {model for model, _ in ready} == {m.name for m in group.models}
    assert problems == []
    if name == "triton-bert-canary":
        assert ready == [("bert", 3)]
    elif name == "triton-bert":
        assert ready == [("bert", 2)]


def test_verify_checks_one_groups_server_against_its_own_policies(
    inst: local.Installation, tmp_path: Path
) -> None:
    import shutil
    import subprocess
    import sys

    from gpuinfra import site as site_mod
    from tests.conftest import ROOT

    site = tmp_path / "site"
    shutil.copytree(ROOT / "inventory" / "example", site)
    variables = site / "group_vars" / "all" / "triton.yml"
    variables.write_text(
        variables.read_text()
        + "triton_gateway: {name: inference}\n"
        + "triton_serving_groups:\n"
        + "  - name: vision\n"
        + "    models: [resnet50]\n"
        + "    canary:\n"
        + "      weight: 10\n"
        + "      version_policies: {resnet50: {policy: specific, versions: [1]}}\n"
    )
    settings = addons.settings_from_site(site_mod.load_site(site)).triton
    by_name = {g.name: g for g in triton.groups(settings)}
    files = dict(addons.render("triton", settings).files)
    work = tmp_path / "work"
    repository = local.model_repository(triton.served_models(settings), files, work / "models")
    # Versions 1 and 2: stable (the newest 1) serves 2, the canary its pinned 1.
    (repository / "resnet50" / "2").mkdir(exist_ok=True)
    backend_dir = local.backends(inst, work / "backends")

    def verify(url: str, group: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [
                *(sys.executable, "-m", "gpuinfra", "triton", "verify", f"--url={url}"),
                *("--site", str(site), "--group", group),
            ],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )

    server = local.start(
        inst,
        repository,
        backend_dir,
        ports=ports(),
        model_args=triton.model_args(by_name["triton-vision"]),
    )
    try:
        stable = verify(server.grpc_url, "triton-vision")
        wrong = verify(server.grpc_url, "triton-vision-canary")
    finally:
        server.stop()
    assert stable.returncode == 0, stable.stdout + stable.stderr
    assert "resnet50 2: READY" in stable.stdout
    assert wrong.returncode == 1, wrong.stdout + wrong.stderr
    assert "model 'resnet50' (version_policy specific [1]): READY versions [2], declared [1]" in (
        wrong.stderr
    )
    server = local.start(
        inst,
        repository,
        backend_dir,
        ports=ports(),
        model_args=triton.model_args(by_name["triton-vision-canary"]),
    )
    try:
        canary = verify(server.grpc_url, "triton-vision-canary")
    finally:
        server.stop()
    assert canary.returncode == 0, canary.stdout + canary.stderr
    assert "resnet50 1: READY" in canary.stdout


def test_the_roles_index_check_reads_the_real_http_index(
    inst: local.Installation, repository: Path
) -> None:
    """The role posts to /v2/repository/index inside a pod; its filter reads the answer."""
    import importlib.util
    import json
    import urllib.request

    plugin = Path(__file__).resolve().parents[3] / "plugins" / "filter" / "gpuinfra_triton.py"
    spec = importlib.util.spec_from_file_location("gpuinfra_triton_filter", plugin)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    triton_index_problems = module.triton_index_problems

    settings = SETTINGS.model_dump(mode="json")
    server = local.start(
        inst,
        repository / "models",
        repository / "backends",
        ports=ports(),
        model_args=triton.model_args(GROUPS["triton-bert-canary"]),
    )
    try:
        request = urllib.request.Request(
            f"http://{server.http_url}/v2/repository/index", data=b"{}", method="POST"
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            index = json.loads(response.read().decode())
    finally:
        server.stop()
    assert triton_index_problems(index, settings, "triton-bert-canary") == []
    assert triton_index_problems(index, settings, "triton-bert") == [
        "model 'bert' (version_policy specific [2]): READY versions [3], declared [2]"
    ]


def test_a_canary_without_its_own_policies_reads_stables_config(
    inst: local.Installation, tmp_path: Path
) -> None:
    settings = triton.TritonSettings.model_validate(
        {
            "modelRepository": {"pvc": "models"},
            "gateway": {"name": "inference"},
            "models": [{"name": "ranker", "backend": "python", "maxBatchSize": 4}],
            "servingGroups": [{"name": "rank", "models": ["ranker"], "canary": {"weight": 50}}],
        }
    )
    files = dict(addons.render("triton", settings).files)
    assert sorted(files) == ["models/ranker/config.pbtxt"]
    (canary,) = [g for g in triton.groups(settings) if g.track == "canary"]
    assert "--model-config-name=canary" in triton.model_args(canary)
    with local.serving(
        inst, tmp_path, list(settings.models), files, ports=ports(),
        model_args=triton.model_args(canary),
    ) as server:  # fmt: skip
        assert server.client().is_model_ready("ranker", "1")
        assert server.client().get_model_config("ranker").config.max_batch_size == 4

"""A rendered Triton's administrative APIs on a real server: closed without the admin key.

The server is the pinned local Triton (``scripts/setup-triton.sh``), bound to 127.0.0.1, run with
the flags of the Deployment gpuinfra renders for a serving group of the example site (explicit
model control, where load and unload act), expanded as the kubelet expands them from the admin
Secret the render declares. Without the server these tests skip, except under
``GPUINFRA_REQUIRE_TRITON=1``.
"""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from tritonclient.grpc import InferenceServerClient
from tritonclient.utils import InferenceServerException

from gpuinfra import addons
from gpuinfra import site as site_mod
from gpuinfra.addons import triton
from gpuinfra.lab import triton as local
from tests.conftest import ROOT, run_cli
from tests.unit.lab.conftest import ports

# As a stack generates one: letters and digits.
KEY = "Zq4mT8vRw2Lk9XpB7nJc3HsY6dFg1aEu"
GROUP = "triton-vision"
MODEL = "resnet50"
ENV = "GPUINFRA_TRITON_ADMIN_KEY"


@dataclass(frozen=True)
class Rendered:
    site: Path
    settings: triton.TritonSettings
    flags: list[str]
    work: Path


def _site(root: Path) -> Path:
    """inventory/example with its model in a serving group of its own, on CPU instances: this
    machine has no GPU, and ``tune --url`` loads a config into the server as it is written."""
    site = root / "site"
    shutil.copytree(ROOT / "inventory" / "example", site)
    variables = site / "group_vars" / "all" / "triton.yml"
    text = variables.read_text()
    assert "      kind: gpu\n" in text
    variables.write_text(
        text.replace("      kind: gpu\n", "      kind: cpu\n")
        + f"triton_serving_groups:\n  - name: vision\n    models: [{MODEL}]\n"
    )
    return site


@pytest.fixture(scope="module")
def rendered(inst: local.Installation, tmp_path_factory: pytest.TempPathFactory) -> Rendered:
    root = tmp_path_factory.mktemp("admin")
    site = _site(root)
    settings = addons.settings_from_site(site_mod.load_site(site)).triton
    render = addons.render("triton", settings)
    (deployment,) = [
        o for o in render.objects if o["kind"] == "Deployment" and o["metadata"]["name"] == GROUP
    ]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    # The Secrets the render declares, each key holding the test's value: a Deployment that
    # read another Secret or key would find nothing here.
    secrets = {s.name: dict.fromkeys([*s.generated, *s.fixed], KEY) for s in render.secrets}
    work = root / "work"
    local.model_repository(settings.models, dict(render.files), work / "models")
    local.backends(inst, work / "backends")
    return Rendered(site, settings, local.rendered_flags(container, secrets), work)


def _start(inst: local.Installation, rendered: Rendered) -> local.Server:
    """A real Triton on the rendered models, with the rendered group's flags, key expanded."""
    return local.start(
        inst,
        rendered.work / "models",
        rendered.work / "backends",
        ports=ports(),
        model_args=rendered.flags,
    )


@pytest.fixture(scope="module")
def server(inst: local.Installation, rendered: Rendered) -> Iterator[local.Server]:
    running = _start(inst, rendered)
    try:
        yield running
    finally:
        running.stop()


def _http(
    server: local.Server, method: str, path: str, body: Any = None, key: str | None = None
) -> tuple[int, str]:
    request = urllib.request.Request(
        f"http://{server.http_url}{path}",
        data=None if body is None else json.dumps(body).encode(),
        method=method,
        headers={} if key is None else {triton.ADMIN_HEADER: key},
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as refused:
        return refused.code, refused.read().decode()


# Each API that changes the server, as a request (method, path, body).
ADMIN_REQUESTS = {
    "repository index": ("POST", "/v2/repository/index", {}),
    "unload": ("POST", f"/v2/repository/models/{MODEL}/unload", {}),
    "load": ("POST", f"/v2/repository/models/{MODEL}/load", {}),
    "log settings": ("POST", "/v2/logging", {"log_verbose_level": 1}),
    "trace settings": ("POST", "/v2/trace/setting", {"trace_rate": "1"}),
    "shared-memory register": (
        "POST",
        "/v2/systemsharedmemory/region/stub/register",
        {"key": "/triton_python_backend_shm_region_1", "offset": 0, "byte_size": 64},
    ),
    "shared-memory status": ("GET", "/v2/systemsharedmemory/status", None),
}


def test_the_rendered_flags_restrict_the_admin_apis_with_the_secrets_key(
    rendered: Rendered,
) -> None:
    apis = ",".join(triton.RESTRICTED_APIS)
    assert f"--http-restricted-api={apis}:{triton.ADMIN_HEADER}={KEY}" in rendered.flags
    assert f"--grpc-restricted-protocol={apis}:{triton.ADMIN_HEADER}={KEY}" in rendered.flags
    assert "--model-control-mode=explicit" in rendered.flags


@pytest.mark.parametrize("api", sorted(ADMIN_REQUESTS))
@pytest.mark.parametrize("key", [None, "not-the-key"], ids=["no key", "another key"])
def test_each_admin_api_refuses_a_request_without_the_key(
    server: local.Server, api: str, key: str | None
) -> None:
    method, path, body = ADMIN_REQUESTS[api]
    code, answer = _http(server, method, path, body, key)
    assert code == 403, answer
    assert triton.refused_for_admin_key(answer), answer
    # Nothing changed: the model still serves, the log is as it was.
    assert server.client().is_model_ready(MODEL)
    _, settings = _http(server, "GET", "/v2/logging", key=KEY)
    assert json.loads(settings)["log_verbose_level"] == 0


def test_with_the_key_the_repository_api_unloads_and_loads(server: local.Server) -> None:
    code, index = _http(server, "POST", "/v2/repository/index", {}, KEY)
    assert code == 200, index
    assert {"name": MODEL, "version": "1", "state": "READY"} in json.loads(index)
    for action in ("unload", "load"):
        code, answer = _http(server, "POST", f"/v2/repository/models/{MODEL}/{action}", {}, KEY)
        assert code == 200, answer
        assert server.client().is_model_ready(MODEL) == (action == "load")


@pytest.mark.parametrize(
    "path",
    [
        "/v2/health/live",
        "/v2/health/ready",
        "/v2",
        f"/v2/models/{MODEL}",
        f"/v2/models/{MODEL}/ready",
        f"/v2/models/{MODEL}/config",
        f"/v2/models/{MODEL}/stats",
    ],
)
def test_health_metadata_config_and_statistics_stay_open(server: local.Server, path: str) -> None:
    code, answer = _http(server, "GET", path)
    assert code == 200, answer


def test_inference_stays_open(server: local.Server) -> None:
    dims = local.STANDIN_DIMS
    tensor = {"name": local.STANDIN_INPUT, "shape": [1, dims], "datatype": "FP32"}
    code, answer = _http(
        server,
        "POST",
        f"/v2/models/{MODEL}/infer",
        {"inputs": [{**tensor, "data": list(range(dims))}]},
    )
    assert code == 200, answer
    (output,) = json.loads(answer)["outputs"]
    assert output["data"] == list(range(dims))


def test_grpc_refuses_the_repository_api_without_the_key(server: local.Server) -> None:
    client = InferenceServerClient(server.grpc_url)
    for call in (client.get_model_repository_index, lambda **h: client.unload_model(MODEL, **h)):
        with pytest.raises(InferenceServerException) as refused:
            call(headers={triton.ADMIN_GRPC_HEADER: "not-the-key"})
        assert triton.refused_for_admin_key(refused.value.message() or "")
        with pytest.raises(InferenceServerException) as refused:
            call()
        assert triton.refused_for_admin_key(refused.value.message() or "")
    assert client.is_model_ready(MODEL)
    assert client.get_model_metadata(MODEL).name == MODEL
    index = client.get_model_repository_index(headers={triton.ADMIN_GRPC_HEADER: KEY})
    assert [(m.name, m.state) for m in index.models] == [(MODEL, "READY")]


def test_the_roles_index_read_sends_the_key_from_the_containers_variable(
    server: local.Server,
) -> None:
    """roles/triton/tasks/verify.yml's command, as k8s_exec runs it in the pod (the kubelet
    gives the container its variable), against the server's HTTP port."""
    tasks = yaml.safe_load((ROOT / "roles" / "triton" / "tasks" / "verify.yml").read_text())
    (task,) = [t for t in tasks if "kubernetes.core.k8s_exec" in t]
    command = task["kubernetes.core.k8s_exec"]["command"].replace("127.0.0.1:8000", server.http_url)
    argv = [sys.executable, *shlex.split(command)[1:]]
    read = subprocess.run(
        argv, capture_output=True, text=True, timeout=60, env={triton.ADMIN_ENV: KEY}
    )
    assert read.returncode == 0, read.stderr
    assert {"name": MODEL, "version": "1", "state": "READY"} in json.loads(read.stdout)
    other = subprocess.run(
        argv, capture_output=True, text=True, timeout=60, env={triton.ADMIN_ENV: "not-the-key"}
    )
    assert other.returncode != 0 and "HTTP Error 403" in other.stderr


def _verify(rendered: Rendered, server: local.Server) -> Any:
    return run_cli(
        *("triton", "verify", "--url", server.grpc_url),
        *("--site", str(rendered.site), "--group", GROUP),
    )


def test_verify_reads_the_index_with_the_key_from_the_environment(
    rendered: Rendered, server: local.Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ENV, KEY)
    result = _verify(rendered, server)
    assert result.code == 0, result.stderr
    assert f"{MODEL} 1: READY" in result.stdout
    assert KEY not in result.stdout + result.stderr


def test_verify_without_the_key_says_which_header_and_secret(
    rendered: Rendered, server: local.Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(ENV, raising=False)
    result = _verify(rendered, server)
    assert result.code == 3, result.stderr
    assert result.stderr.splitlines() == [
        f"error: Triton at {server.grpc_url} refused the repository index: it requires the "
        f"admin key in the triton-admin-key header; set {ENV} to the value of key admin-key of "
        "Secret triton/triton-admin"
    ]
    assert result.stdout == ""


def test_verify_with_another_key_says_so_without_showing_it(
    rendered: Rendered, server: local.Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ENV, "not-the-key")
    result = _verify(rendered, server)
    assert result.code == 3, result.stderr
    assert result.stderr.splitlines() == [
        f"error: Triton at {server.grpc_url} refused the repository index: {ENV} is not its "
        "admin key (the triton-admin-key header; key admin-key of Secret triton/triton-admin)"
    ]
    assert "not-the-key" not in result.stdout + result.stderr


def test_tune_loads_into_a_restricted_server_only_with_the_key(
    inst: local.Installation, rendered: Rendered, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``tune --url`` loads each configuration it measures: a load is an admin API. A server
    of its own, since the loads replace the model's config."""
    running = _start(inst, rendered)
    tune = [
        *("triton", "tune", "--site", str(rendered.site), "--model", MODEL, "--p99-ms", "1000"),
        *("--url", running.grpc_url, "--concurrency", "1", "--max-batch-size", "8"),
        *("--queue-delay-us", "200", "--instances", "1", "--dry-run"),
    ]
    try:
        monkeypatch.delenv(ENV, raising=False)
        refused = run_cli(*tune)
        monkeypatch.setenv(ENV, KEY)
        measured = run_cli(*tune)
    finally:
        running.stop()
    assert refused.code == 3, refused.stdout + refused.stderr
    assert refused.stderr.splitlines()[-1] == (
        f"error: Triton at {running.grpc_url} refused to load {MODEL}: it requires the admin key "
        f"in the triton-admin-key header; set {ENV} to the value of key admin-key of Secret "
        "triton/triton-admin"
    )
    assert measured.code == 0, measured.stdout + measured.stderr
    # Each configuration measured was loaded first; which one wins is the measurement's to say.
    lines = measured.stdout.splitlines()
    assert len([line for line in lines if line.startswith("measuring batch ")]) >= 2, lines
    assert lines[-1] in (
        "dry run: nothing written",
        "the model's current settings are already the best: nothing to change",
    ), lines
    assert KEY not in measured.stdout + measured.stderr

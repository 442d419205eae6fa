"""A real Triton server on this machine, serving gpuinfra's model configs with stand-in models.

The server is the ``tritonserver`` binary of the ``nvidia-pytriton`` wheel (python backend only),
installed with ``perf_analyzer`` in ``.triton-venv/`` by ``scripts/setup-triton.sh``. A config
naming another backend (onnxruntime, tensorrt, pytorch, ...) loads unchanged: the backend
directory holds, under each backend's name, a copy of the python backend with a stand-in
``model.py``. The one substitution made to a rendered config is KIND_GPU -> KIND_CPU, for a
machine without a GPU.

The stand-in costs a fixed time per batch plus a time per item (``STANDIN_COST_ENV``, in
microseconds, ``"10000,500"``), so batching and instance settings change its throughput the way
they change a real model's. It declares one input and one output when the config has none, as
ONNX Runtime does from a model file.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpuinfra.addons import triton
from gpuinfra.errors import GpuinfraError, ToolError
from gpuinfra.paths import repo_root

if TYPE_CHECKING:
    from tritonclient.grpc import InferenceServerClient

VENV = ".triton-venv"
# Another installation than the repository's own (a checkout without one, a shared one).
VENV_ENV = "GPUINFRA_TRITON_VENV"
SETUP = "bash scripts/setup-triton.sh"
STANDIN_COST_ENV = "GPUINFRA_STANDIN_COST_US"
STANDIN_INPUT = "INPUT0"
STANDIN_OUTPUT = "OUTPUT0"
STANDIN_DIMS = 4
# Every backend a config may name; each gets a stand-in under its own name.
BACKENDS = ("onnxruntime", "tensorrt", "pytorch", "tensorflow", "vllm", "python")
_PYTHON = "python3.11"
# What the server logs as errors on every start without a GPU; not about the models.
_NO_GPU = ("CudaDriverHelper", "NVML")
# Seconds one readiness question may go unanswered. Without a deadline gRPC waits out its own
# connect timeout (20 s) on a server that takes the connection and says nothing, past start()'s.
READY_PROBE_S = 5.0

STANDIN_MODEL = f'''\
"""Stand-in model: a fixed cost per batch plus a cost per item, then echo the input."""

import json
import os
import time

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    @staticmethod
    def auto_complete_config(config):
        declared = config.as_dict()
        if not declared.get("input"):
            config.add_input(
                {{"name": "{STANDIN_INPUT}", "data_type": "TYPE_FP32", "dims": [{STANDIN_DIMS}]}}
            )
        if not declared.get("output"):
            config.add_output(
                {{"name": "{STANDIN_OUTPUT}", "data_type": "TYPE_FP32", "dims": [{STANDIN_DIMS}]}}
            )
        return config

    def initialize(self, args):
        fixed, per_item = os.environ.get("{STANDIN_COST_ENV}", "0,0").split(",")
        self.fixed, self.per_item = float(fixed) / 1e6, float(per_item) / 1e6
        self.batched = json.loads(args["model_config"]).get("max_batch_size", 0) > 0

    def execute(self, requests):
        inputs = [pb_utils.get_input_tensor_by_name(r, "{STANDIN_INPUT}") for r in requests]
        items = sum(t.as_numpy().shape[0] if self.batched else 1 for t in inputs)
        time.sleep(self.fixed + self.per_item * items)
        return [
            pb_utils.InferenceResponse([pb_utils.Tensor("{STANDIN_OUTPUT}", t.as_numpy())])
            for t in inputs
        ]
'''


class TritonRefused(GpuinfraError):
    """Triton did not load the repository; the message carries the server's own error lines."""

    exit_code = 1


@dataclass(frozen=True)
class Installation:
    """Where the pinned server and perf_analyzer live, and the environment they need."""

    venv: Path

    @property
    def package(self) -> Path:
        return self.venv / "lib" / _PYTHON / "site-packages" / "pytriton" / "tritonserver"

    @property
    def server(self) -> Path:
        return self.package / "bin" / "tritonserver"

    @property
    def perf_analyzer(self) -> Path:
        return self.venv / "bin" / "perf_analyzer"

    def env(self) -> dict[str, str]:
        libs = self.venv / "lib" / _PYTHON / "site-packages" / "nvidia_pytriton.libs"
        # The stub links libcudart from the wheel and Debian's libpython3.11; perf_analyzer
        # needs the sonames linked in perf-libs/. The venv's python comes first on PATH: the
        # stub runs the interpreter it finds there.
        search = [str(libs), str(self.venv / "perf-libs"), "/usr/lib/x86_64-linux-gnu"]
        old = os.environ.get("LD_LIBRARY_PATH")
        return {
            **os.environ,
            "PATH": f"{self.venv / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}",
            "LD_LIBRARY_PATH": os.pathsep.join([*search, *([old] if old else [])]),
        }


def installation(venv: Path | None = None) -> Installation:
    """The local Triton, or ToolError saying how to install it."""
    chosen = venv or (Path(os.environ[VENV_ENV]) if os.environ.get(VENV_ENV) else None)
    found = Installation((chosen or repo_root() / VENV).resolve())
    missing = [p for p in (found.server, found.perf_analyzer) if not p.exists()]
    if missing:
        raise ToolError(f"no local Triton: {missing[0]} is missing; install it with `{SETUP}`")
    return found


def backends(inst: Installation, dest: Path, names: Iterable[str] = BACKENDS) -> Path:
    """A backend directory with the python backend, and a stand-in under every other name."""
    source = inst.package / "backends" / "python"
    stub = inst.package / "python_backend_stubs" / "3.11" / "triton_python_backend_stub"
    for name in names:
        target = dest / name
        target.mkdir(parents=True, exist_ok=True)
        # Copied, not linked: Triton finds a backend's stub and model.py beside the library's
        # real path.
        for item in (*source.iterdir(), stub):
            shutil.copy2(item, target / item.name)
        if name != "python":
            (target / "model.py").write_text(STANDIN_MODEL)
    return dest


def cpu_config(text: str) -> str:
    """A rendered config.pbtxt with KIND_GPU instance groups as KIND_CPU: the only change."""
    from google.protobuf import text_format  # type: ignore[import-untyped]
    from tritonclient.grpc import model_config_pb2 as mc

    config = text_format.Parse(text, mc.ModelConfig())
    for group in config.instance_group:
        if group.kind == mc.ModelInstanceGroup.KIND_GPU:
            group.kind = mc.ModelInstanceGroup.KIND_CPU
    return str(text_format.MessageToString(config))


def stand_in_versions(model: triton.TritonModel) -> list[int]:
    """The version directories a stand-in repository gets: what the version policy serves."""
    policy = model.version_policy
    if policy.policy == "specific":
        return sorted(policy.versions)
    return list(range(1, (policy.latest if policy.policy == "latest" else 1) + 1))


def model_repository(
    models: Iterable[triton.TritonModel], files: dict[str, str], dest: Path
) -> Path:
    """A repository of the rendered configs (``files`` as the render has them) with stand-in
    version directories: what each version policy needs, and the files its backend reads."""
    for model in models:
        text = files[f"models/{model.name}/config.pbtxt"]
        (dest / model.name).mkdir(parents=True, exist_ok=True)
        (dest / model.name / "config.pbtxt").write_text(cpu_config(text))
        for version in stand_in_versions(model):
            directory = dest / model.name / str(version)
            directory.mkdir(exist_ok=True)
            if model.backend == "python":
                (directory / "model.py").write_text(STANDIN_MODEL)
            if model.backend == "tensorflow":
                # Triton tells a SavedModel from a GraphDef by the file: without one it refuses
                # the config ("unexpected 'platform' and 'backend' pair").
                (directory / "model.savedmodel").mkdir(exist_ok=True)
            for needed in triton.VERSION_FILES.get(model.backend, ()):
                (directory / needed).write_text("{}\n")
    # A canary's own configs (models/<name>/configs/<config>.pbtxt), GPU to CPU as well.
    for path, text in files.items():
        parts = path.split("/")
        if len(parts) == 4 and parts[2] == "configs" and (dest / parts[1]).is_dir():
            (dest / parts[1] / "configs").mkdir(exist_ok=True)
            (dest / parts[1] / "configs" / parts[3]).write_text(cpu_config(text))
    return dest


# The kubelet's expansion of a container's args: $(VAR) of a variable the container defines,
# $$ for a literal $.
_VARIABLE = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")
# What start() sets for this machine: the repository's path and the loopback ports.
_OWN_FLAGS = (
    "--model-repository=",
    "--http-address=",
    "--http-port=",
    "--grpc-address=",
    "--grpc-port=",
    "--metrics-address=",
    "--metrics-port=",
)


def rendered_flags(
    container: Mapping[str, Any], secrets: Mapping[str, Mapping[str, str]]
) -> list[str]:
    """A rendered Triton container's flags as the kubelet passes them, to run here.

    Each ``$(VAR)`` of a variable the container defines becomes its value, a literal or a key of
    a Secret (``secrets``: name to data); a reference to an undefined variable stays as written.
    Left out: the program and the flags ``start`` sets for this machine (repository, ports).
    """
    env: dict[str, str] = {}
    for variable in container.get("env") or []:
        ref = (variable.get("valueFrom") or {}).get("secretKeyRef")
        env[variable["name"]] = (
            secrets[ref["name"]][ref["key"]] if ref else str(variable.get("value", ""))
        )

    def expand(found: re.Match[str]) -> str:
        return "$" if found.group(0) == "$$" else env.get(found.group(1), found.group(0))

    args = [_VARIABLE.sub(expand, arg) for arg in container["args"][1:]]
    return [arg for arg in args if not arg.startswith(_OWN_FLAGS)]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@dataclass
class Server:
    """A running tritonserver bound to 127.0.0.1."""

    process: subprocess.Popen[bytes]
    http_port: int
    grpc_port: int
    metrics_port: int
    log: Path

    @property
    def grpc_url(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    @property
    def http_url(self) -> str:
        return f"127.0.0.1:{self.http_port}"

    def client(self) -> InferenceServerClient:
        from tritonclient.grpc import InferenceServerClient

        return InferenceServerClient(self.grpc_url)

    def errors(self) -> list[str]:
        """The server's error lines (glog severity E, and protobuf's parse errors, which say
        what in a config is wrong), without the log prefix."""
        lines = self.log.read_text(errors="replace").splitlines()
        found = [
            line.split("] ", 1)[-1]
            for line in lines
            if line.startswith(("E", "[libprotobuf ERROR"))
        ]
        return [line for line in found if not any(n in line for n in _NO_GPU)]

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def start(
    inst: Installation,
    repository: Path,
    backend_dir: Path,
    *,
    ports: tuple[int, int, int] | None = None,
    control_mode: str = triton.MODEL_CONTROL_MODE,
    model_args: Sequence[str] | None = None,
    env: dict[str, str] | None = None,
    timeout: float = 120.0,
) -> Server:
    """Start tritonserver and wait until it is ready (every model loaded).

    ``model_args``, where given, choose what loads instead of ``control_mode`` (a serving
    group's own, ``triton.model_args``, or a rendered container's flags, ``rendered_flags``).
    TritonRefused when the server exits or stays unready: its error lines are the message.
    """
    http, grpc, metrics = ports or (free_port(), free_port(), free_port())
    log = repository.parent / f"tritonserver-{http}.log"
    args = [
        str(inst.server),
        f"--model-repository={repository}",
        f"--backend-directory={backend_dir}",
        *(model_args or [f"--model-control-mode={control_mode}"]),
        "--strict-readiness=true",
        "--http-address=127.0.0.1",
        f"--http-port={http}",
        "--grpc-address=127.0.0.1",
        f"--grpc-port={grpc}",
        "--metrics-address=127.0.0.1",
        f"--metrics-port={metrics}",
        "--metrics-config=summary_latencies=true",
    ]
    if control_mode == "explicit" and model_args is None:
        # Explicit mode loads nothing at start unless told; load_model() loads the rest.
        args.append("--load-model=*")
    with log.open("wb") as sink:
        process = subprocess.Popen(
            args,
            stdout=sink,
            stderr=subprocess.STDOUT,
            env={**inst.env(), **(env or {})},
            start_new_session=True,
        )
    server = Server(process, http, grpc, metrics, log)
    deadline = time.monotonic() + timeout
    try:
        client = server.client()
        while (left := deadline - time.monotonic()) > 0:
            if process.poll() is not None:
                raise TritonRefused(
                    "\n".join(server.errors()) or f"tritonserver exited {process.returncode}"
                )
            try:
                # Each question within READY_PROBE_S and within what is left of the timeout.
                if client.is_server_ready(client_timeout=min(READY_PROBE_S, left)):
                    return server
            except Exception:
                pass
            time.sleep(0.2)
        raise TritonRefused(f"tritonserver not ready after {timeout:.0f} s: {server.errors()}")
    except BaseException:
        server.stop()
        raise


@contextmanager
def serving(
    inst: Installation,
    work: Path,
    models: list[triton.TritonModel],
    files: dict[str, str],
    **options: Any,
) -> Iterator[Server]:
    """The models' rendered configs served by a real Triton, stopped on exit."""
    repository = model_repository(models, files, work / "models")
    backend_dir = backends(inst, work / "backends")
    server = start(inst, repository, backend_dir, **options)
    try:
        yield server
    finally:
        server.stop()


def served_differences(rendered: Any, served: Any, path: str = "") -> list[str]:
    """Every field set in the rendered ModelConfig whose served value differs.

    Triton fills in what a config leaves out (its defaults, names of instance groups, inputs a
    backend declares); what gpuinfra wrote must be exactly what it runs with.
    """
    differences = []
    for field, value in rendered.ListFields():
        name = f"{path}{field.name}"
        other = getattr(served, field.name)
        if field.type == field.TYPE_MESSAGE and field.label != field.LABEL_REPEATED:
            differences += served_differences(value, other, f"{name}.")
        elif field.type == field.TYPE_MESSAGE:
            if len(value) != len(other):
                differences.append(f"{name}: {len(value)} rendered, {len(other)} served")
                continue
            for i, (mine, theirs) in enumerate(zip(value, other, strict=True)):
                differences += served_differences(mine, theirs, f"{name}[{i}].")
        else:
            repeated = field.label == field.LABEL_REPEATED
            mine, theirs = (list(value), list(other)) if repeated else (value, other)
            if mine != theirs:
                differences.append(f"{name}: rendered {mine!r}, served {theirs!r}")
    return differences

"""Run a stack's Pulumi program offline, under Pulumi's mock runtime, and collect what it declares.

No engine, no cloud credentials: the real program (``stacks/__main__.py``) runs with the stack's
real configuration, and every resource it registers is recorded with its type, logical name,
inputs and parent. Cloud-side values are filled in deterministically (ids are
``<logical name>-id``, ARNs name the resource), so two runs of one commit give identical
results. The stack file is validated before the program starts: a bad one raises ConfigError and
registers nothing.
"""

from __future__ import annotations

import gc
import runpy
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import pulumi
from pulumi.output import Unknown
from pulumi.runtime import config as pulumi_config
from pulumi.runtime import mocks, rpc, settings
from pulumi.runtime.stack import run_pulumi_func
from pulumi.runtime.sync_await import _sync_await

from gpuinfra import addons
from gpuinfra import versions as versions_mod
from gpuinfra.addons import AddonRender
from gpuinfra.addons.base import secret_config_keys
from gpuinfra.config import StackConfig, check_stack, load_stack, stack_path
from gpuinfra.errors import ConfigError, Problem
from gpuinfra.loading import display_path
from gpuinfra.paths import repo_root

PROJECT = "gpuinfra"
MOCK_ACCOUNT = "123456789012"
COMPUTED = "<computed>"
SECRET = "[secret]"
# What a Secret's key holds in an offline plan when its secret config value is not set.
SECRET_STAND_IN = "stand-in-for-an-unset-secret-config-value"


@dataclass(frozen=True)
class Resource:
    """One resource the program registered."""

    type_: str
    name: str
    inputs: dict[str, Any]
    # The parent's logical name; None for resources directly under the stack.
    parent: str | None
    urn: str = ""
    # False for component resources (they group children and have no cloud counterpart).
    custom: bool = True
    # Logical names of the resources it waits for (depends_on and inputs read from others).
    dependencies: tuple[str, ...] = ()
    # Per input property, the URNs of the resources whose outputs it reads: how a companion
    # (a bucket's public access block, a node group's launch template) names what it belongs
    # to while that resource's id is still unknown.
    property_dependencies: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    # Earlier logical names it answers to (its aliases'), so that Pulumi moves, not replaces.
    aliases: tuple[str, ...] = ()
    # Input properties Pulumi leaves as they are in the cloud (the resource option).
    ignore_changes: tuple[str, ...] = ()


@dataclass(frozen=True)
class StackRun:
    env: str
    resources: list[Resource]
    outputs: dict[str, Any] = field(default_factory=dict)

    def of_type(self, type_: str) -> list[Resource]:
        return [r for r in self.resources if r.type_ == type_]

    def named(self, name: str) -> Resource:
        for resource in self.resources:
            if resource.name == name:
                return resource
        raise KeyError(name)

    def children(self, parent: str) -> list[Resource]:
        return [r for r in self.resources if r.parent == parent]


class StandInMocks(pulumi.runtime.Mocks):
    """Deterministic stand-ins for what AWS and Kubernetes would return."""

    def __init__(self, region: str) -> None:
        self.region = region

    def new_resource(
        self, args: pulumi.runtime.MockResourceArgs
    ) -> tuple[str | None, dict[str, Any]]:
        resource_id = f"{args.name}-id"
        state = dict(args.inputs)
        state.setdefault("name", args.name)
        state.setdefault("arn", _arn(args.typ, args.name, self.region))
        state.update(_computed(args.typ, args.name, state))
        return resource_id, state

    def call(
        self, args: pulumi.runtime.MockCallArgs
    ) -> tuple[dict[str, Any], list[tuple[str, str]] | None]:
        return {}, None


class _RecordingMonitor(mocks.MockMonitor):
    """The mock monitor, also keeping each registration's type, name, inputs and parent."""

    def __init__(self, mock: StandInMocks) -> None:
        super().__init__(mock)
        self.registered: list[Resource] = []
        self._lock = threading.Lock()

    def RegisterResource(self, request: Any) -> Any:
        response = super().RegisterResource(request)  # type: ignore[no-untyped-call]
        if request.type != "pulumi:pulumi:Stack":
            inputs = _plain(rpc.deserialize_properties(request.object, keep_unknowns=True))
            parent = request.parent.rsplit("::", 1)[-1] if request.parent else None
            if parent is not None and request.parent.split("::")[2].endswith("pulumi:pulumi:Stack"):
                parent = None
            with self._lock:
                self.registered.append(
                    Resource(
                        type_=request.type,
                        name=request.name,
                        inputs=inputs,
                        parent=parent,
                        urn=response.urn,
                        custom=bool(request.custom),
                        dependencies=tuple(
                            sorted({urn.rsplit("::", 1)[-1] for urn in request.dependencies})
                        ),
                        property_dependencies={
                            key: tuple(sorted(deps.urns))
                            for key, deps in sorted(request.propertyDependencies.items())
                            if deps.urns
                        },
                        aliases=tuple(
                            alias.spec.name
                            for alias in request.aliases
                            if alias.HasField("spec") and alias.spec.name
                        ),
                        ignore_changes=tuple(request.ignoreChanges),
                    )
                )
        return response


def _plain(value: Any) -> Any:
    """Inputs as plain data: unknowns shown as "<computed>", secrets as "[secret]"."""
    if rpc.is_rpc_secret(value):
        return SECRET
    if isinstance(value, dict):
        return {k: _plain(value[k]) for k in sorted(value)}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if value == rpc.UNKNOWN or isinstance(value, Unknown):
        return COMPUTED
    # The wire format carries every number as a double; counts and sizes read better whole.
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def run_stack(env: str, *, root: Path | None = None, config: StackConfig | None = None) -> StackRun:
    """Run ``stacks/__main__.py`` for ``env`` under mocks and return what it registered.

    ``config`` replaces the stack file (the plan of a modified stack); it is checked the same
    way. Safe to call repeatedly in one process.
    """
    base = root or repo_root()
    if config is None:
        config = load_stack(env, base)
    else:
        check_stack(config, display_path(stack_path(env, base)))
    return run_checked(env, config, versions_mod.pinned(base), root=base)


def run_checked(
    env: str,
    config: StackConfig,
    pins: versions_mod.Versions,
    *,
    renders: list[AddonRender] | None = None,
    root: Path | None = None,
) -> StackRun:
    """Run the stack program for a ``config`` and ``pins`` the caller has already checked.

    ``renders`` are the add-ons already rendered for ``config`` (the plan's), so the program
    does not render them a second time.
    """
    base = root or repo_root()
    program = _program(base / "stacks" / "__main__.py")
    if renders is None:
        renders = addons.render_all(config.addons, versions=pins)
    with _secret_config_stand_ins(renders):
        return run_program(
            lambda: program(config, pins, renders, stack=env), stack=env, region=config.region
        )


@contextmanager
def _secret_config_stand_ins(renders: list[AddonRender]) -> Iterator[None]:
    """A stand-in for each secret config value the stack's Secrets read that is not set.

    The offline plan needs no secret: values set by ``pulumi config set --secret`` are
    encrypted in the stack file and only the Pulumi engine decrypts them. Either way the value
    is a Pulumi secret and every plan shows it as "[secret]". A value already in the runtime's
    config (``PULUMI_CONFIG``) is left as it is; ``pulumi up`` refuses a missing one.
    """
    before = dict(pulumi_config.CONFIG.get())
    for key in secret_config_keys(renders):
        full = f"{PROJECT}:{key}"
        if pulumi_config.get_config(full) is None:
            pulumi_config.set_config(full, SECRET_STAND_IN)
    try:
        yield
    finally:
        pulumi_config.set_all_config(before)


def run_program(
    program: Callable[[], None], *, stack: str = "test", region: str = "us-east-1"
) -> StackRun:
    """Run any Pulumi program function under the mocks (component tests use this directly)."""
    monitor = _RecordingMonitor(StandInMocks(region))
    # A fresh root stack and settings per run: the previous run's resources must not leak in.
    settings.ROOT.set(None)
    pulumi.runtime.set_mocks(
        monitor.mocks, project=PROJECT, stack=stack, preview=False, monitor=monitor
    )
    try:
        with _first_run_frozen():
            _sync_await(run_pulumi_func(program))
            outputs = _sync_await(_outputs())
    finally:
        settings.ROOT.set(None)
    # Registration order varies with the event loop's scheduling; URN order does not.
    resources = sorted(monitor.registered, key=lambda r: r.urn)
    return StackRun(env=stack, resources=resources, outputs=outputs)


_frozen = False


@contextmanager
def _first_run_frozen() -> Iterator[None]:
    """Hold the cyclic garbage collector back during a process's first program run, then
    freeze every object alive out of later collections.

    The first run imports the provider SDKs the program touches (pulumi_aws and
    pulumi_kubernetes submodules: about 900 modules and 300,000 objects, mostly generated
    classes and their type annotations, which live as long as the process). With the
    collector on, each full collection walks them all again as they pile up, and once more at
    exit: about 1 s of a 2.4 s ``gpuinfra plan --stack prod``. Frozen objects are never
    collected, so the first run's own garbage cycles (about 26,000 objects) stay; later runs
    collect theirs as usual, over a heap the freeze made small. A caller that turned the
    collector off keeps it off.
    """
    global _frozen
    if _frozen or not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        gc.enable()
        _frozen = True


class Program(Protocol):
    """``main`` of ``stacks/__main__.py``."""

    def __call__(
        self,
        cfg: StackConfig,
        pins: versions_mod.Versions,
        renders: list[AddonRender] | None,
        *,
        stack: str,
    ) -> None: ...


_PROGRAMS: dict[tuple[Path, float], Program] = {}


def _program(path: Path) -> Program:
    """The program's ``main``, loaded once per file version."""
    if not path.is_file():
        raise ConfigError([Problem(display_path(path), "", "the stack program is missing")])
    key = (path.resolve(), path.stat().st_mtime)
    if key not in _PROGRAMS:
        namespace = runpy.run_path(str(path), run_name="gpuinfra_stack")
        _PROGRAMS[key] = namespace["main"]
    return _PROGRAMS[key]


async def _outputs() -> dict[str, Any]:
    stack = settings.get_root_resource()
    outputs: dict[str, Any] = {}
    for key, value in sorted(getattr(stack, "outputs", {}).items()):
        output = pulumi.Output.from_input(value)
        secret = await output.is_secret()
        resolved = await output.future(with_unknowns=True)
        outputs[key] = SECRET if secret else _plain(resolved)
    return outputs


def _arn(type_: str, name: str, region: str) -> str:
    service = type_.split(":")[1].split("/")[0] if type_.startswith("aws:") else "mock"
    if service == "s3":
        return f"arn:aws:s3:::{name}"
    if service == "iam":
        return f"arn:aws:iam::{MOCK_ACCOUNT}:role/{name}"
    return f"arn:aws:{service}:{region}:{MOCK_ACCOUNT}:{name}"


def _computed(type_: str, name: str, state: dict[str, Any]) -> dict[str, Any]:
    """Outputs the provider computes that the program reads back."""
    if type_ == "aws:s3/bucket:Bucket":
        return {"bucket": state.get("bucket") or name}
    if type_ == "aws:eks/cluster:Cluster":
        vpc = dict(state.get("vpcConfig") or {})
        vpc.setdefault("clusterSecurityGroupId", f"{name}-cluster-sg")
        return {
            "endpoint": f"https://{name}.eks.example.invalid",
            "certificateAuthority": {"data": "bW9jay1jYQ=="},
            "vpcConfig": vpc,
        }
    if type_ == "aws:ec2/launchTemplate:LaunchTemplate":
        return {"latestVersion": 1}
    if type_ == "aws:eks/nodeGroup:NodeGroup":
        return {"nodeGroupName": state.get("nodeGroupName") or name}
    if type_ == "random:index/randomPassword:RandomPassword":
        # A Secret reads it; the plan shows it as secret.
        return {"result": f"{name}-password"}
    if type_ == "aws:fsx/lustreFileSystem:LustreFileSystem":
        return {"dnsName": f"{name}.fsx.example.invalid", "mountName": "mockmount"}
    return {}

"""The add-on roles' ``defaults/main.yml`` and ``meta/argument_specs.yml``, from the settings models.

Each add-on's typed settings model is the only place its settings are written: the field name
(the role variable is ``<addon>_<field>``), the type, the allowed values, the default and the
description (``Field(description=...)``). The two role files are derived from it and committed,
so that Ansible validates role arguments and a site's inventory is checked without importing
the core; ``gpuinfra addons role-files`` writes them and a unit test fails when one is stale.
"""

from __future__ import annotations

import enum
import types
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, TypeAdapter
from pydantic.fields import FieldInfo

from gpuinfra.addons import ADDONS, settings_model
from gpuinfra.errors import CheckFailed, UsageError, excerpt
from gpuinfra.loading import display_path

COMMAND = "gpuinfra addons role-files"


@dataclass(frozen=True)
class _Role:
    short_description: str
    description: tuple[str, ...]
    # The gpuinfra_* connection variables the role reads.
    shared: tuple[str, ...]


# Connection settings every add-on role reads; they belong to no add-on's settings, and their
# defaults are resolved in the shared Helm role (roles/addon_helm/vars/main.yml).
_SHARED: dict[str, dict[str, str]] = {
    "gpuinfra_kubeconfig": {
        "type": "path",
        "description": "Kubeconfig of the cluster on the host running the role. Defaults to "
        "$KUBECONFIG, else ~/.kube/config. Shared by the add-on roles.",
    },
    "gpuinfra_kubernetes_timeout": {
        "type": "int",
        "description": "Seconds one step that calls the Kubernetes API server (or pulls a "
        "chart) may take before it fails the run: a request, or one poll of a wait; a step that "
        "waits gets its wait on top. 120 when unset. Shared by the add-on roles.",
    },
    "gpuinfra_helm_timeout": {
        "type": "str",
        "description": "How long Helm waits for a release's resources to be ready (a Go "
        "duration); 15m when unset. Shared by the add-on roles.",
    },
    "gpuinfra_chart_cache_dir": {
        "type": "path",
        "description": "Where the role keeps pulled charts whose CRDs it applies "
        "(kube-prometheus-stack); ~/.cache/gpuinfra/charts when unset. Shared by the add-on roles.",
    },
}
_CLUSTER = ("gpuinfra_kubeconfig", "gpuinfra_kubernetes_timeout")
_HELM = (*_CLUSTER, "gpuinfra_helm_timeout")

_ROLES: dict[str, _Role] = {
    "prometheus_stack": _Role(
        "Install kube-prometheus-stack with GPU dashboards and alerts from the gpuinfra add-on spec",
        (
            "Applies the chart's CRDs (server-side), then kube-prometheus-stack pinned in "
            "versions.yaml with the values the gpuinfra core renders, then the GPU alert rules and "
            "the DCGM dashboard.",
        ),
        (*_HELM, "gpuinfra_chart_cache_dir"),
    ),
    "gpu_operator": _Role(
        "Install the NVIDIA GPU Operator from the gpuinfra add-on spec",
        (
            "Applies the GPU Operator chart pinned in versions.yaml with the Helm values the "
            "gpuinfra core renders from these variables.",
            "Runs on a host that holds the cluster's kubeconfig; the values are never written in "
            "the role.",
        ),
        _HELM,
    ),
    "volcano": _Role(
        "Install the Volcano batch scheduler and its queues from the gpuinfra add-on spec",
        (
            "Applies the Volcano chart pinned in versions.yaml with the scheduler configuration "
            "the gpuinfra core renders, then the Queue objects.",
        ),
        _HELM,
    ),
    "kueue": _Role(
        "Install Kueue with GPU quotas per GPU type from the gpuinfra add-on spec",
        (
            "Applies the Kueue chart pinned in versions.yaml, then ResourceFlavors, the "
            "ClusterQueue, LocalQueues and WorkloadPriorityClasses rendered by the gpuinfra core.",
        ),
        _HELM,
    ),
    "triton": _Role(
        "Deploy Triton Inference Server and its model configurations from the gpuinfra add-on spec",
        (
            "Applies the Deployment, Service, HorizontalPodAutoscaler and ServiceMonitor rendered "
            "by the gpuinfra core (Triton has no chart), and uploads each model's config.pbtxt to "
            "an S3 model repository.",
        ),
        _CLUSTER,
    ),
    "keda": _Role(
        "Install KEDA and scale idle GPU Deployments to zero from the gpuinfra add-on spec",
        (
            "Applies the KEDA chart pinned in versions.yaml, then one ScaledObject per listed "
            "Deployment, whose Prometheus trigger reads the GPU utilisation of its pods.",
        ),
        _HELM,
    ),
    "loki": _Role(
        "Install Loki to store the GPU nodes' and Triton's logs from the gpuinfra add-on spec",
        (
            "Applies the Loki chart pinned in versions.yaml as one process (SingleBinary) with "
            "its chunks and index on a PersistentVolume, and a retention period.",
        ),
        _HELM,
    ),
    "alloy": _Role(
        "Install Alloy on the GPU nodes to ship their logs to Loki from the gpuinfra add-on spec",
        (
            "Applies the Alloy chart pinned in versions.yaml as a DaemonSet on the GPU nodes: "
            "their pod logs and the NVIDIA driver's kernel lines go to Loki's push endpoint.",
        ),
        _HELM,
    ),
}

_SCALARS: dict[type, str] = {bool: "bool", int: "int", float: "float", str: "str", Path: "path"}


def _header(addon: str) -> str:
    return (
        f"# Generated from the settings model in gpuinfra/addons/{addon}.py by `{COMMAND}`;\n"
        "# do not edit: change the model (a setting's type, default and description live there)\n"
        "# and run the command again.\n"
    )


class _Dumper(yaml.SafeDumper):
    """Block style with sequences indented under their key, as yamllint's default asks."""

    def increase_indent(self, flow: bool = False, indentless: bool = False) -> None:
        super().increase_indent(flow, False)


def _dump(data: Any) -> str:
    return yaml.dump(
        data,
        Dumper=_Dumper,
        sort_keys=False,
        default_flow_style=False,
        width=100,
        allow_unicode=True,
    )


def argument_type(annotation: Any) -> dict[str, Any]:
    """The argument_specs ``type`` (with ``elements`` and ``choices``) of a field's annotation."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        inner = [a for a in args if a is not type(None)]
        if len(inner) != 1:
            raise TypeError(f"no argument type for the union {annotation}")
        return argument_type(inner[0])
    if origin is typing.Annotated:
        return argument_type(args[0])
    if origin is typing.Literal:
        return {"type": _SCALARS[type(args[0])], "choices": list(args)}
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        values = [member.value for member in annotation]
        return {"type": _SCALARS[type(values[0])], "choices": values}
    if origin is list:
        element = argument_type(args[0])
        spec: dict[str, Any] = {"type": "list", "elements": element["type"]}
        if "choices" in element:
            spec["choices"] = element["choices"]
        return spec
    if origin is dict or (isinstance(annotation, type) and issubclass(annotation, BaseModel)):
        return {"type": "dict"}
    if annotation in _SCALARS:
        return {"type": _SCALARS[annotation]}
    raise TypeError(f"no argument type for {annotation}")


def _default(field: FieldInfo) -> Any:
    """The field's default as plain data, the way a role variable holds it (snake_case keys)."""
    value = field.get_default(call_default_factory=True)
    adapter: TypeAdapter[Any] = TypeAdapter(field.annotation or Any)
    return adapter.dump_python(value, mode="json")


def _option(addon: str, name: str, field: FieldInfo) -> dict[str, Any]:
    if not field.description:
        raise ValueError(
            f"gpuinfra/addons/{addon}.py: setting '{name}' has no description; give it "
            "Field(description=...)"
        )
    option: dict[str, Any] = {"description": " ".join(field.description.split())}
    option |= argument_type(field.annotation)
    if field.is_required():
        option["required"] = True
    else:
        default = _default(field)
        # Ansible has no null default: an unset option is None already.
        if default is not None:
            option["default"] = default
    return option


def defaults_file(addon: str) -> str:
    """``roles/<addon>/defaults/main.yml``: every setting that has a default, with it."""
    fields = settings_model(addon).model_fields
    defaults = {
        f"{addon}_{name}": _default(field)
        for name, field in fields.items()
        if not field.is_required()
    }
    return (
        _header(addon)
        + "# See meta/argument_specs.yml for what each variable does.\n"
        + _dump(defaults)
    )


def argument_specs_file(addon: str) -> str:
    """``roles/<addon>/meta/argument_specs.yml``: type, choices, default and words per setting."""
    role = _ROLES[addon]
    options = {
        f"{addon}_{name}": _option(addon, name, field)
        for name, field in settings_model(addon).model_fields.items()
    }
    options |= {name: dict(_SHARED[name]) for name in role.shared}
    document = {
        "argument_specs": {
            "main": {
                "short_description": role.short_description,
                "description": list(role.description),
                "options": options,
            }
        }
    }
    return (
        _header(addon)
        + "# <role>_<field> are the add-on's settings; gpuinfra_* are shared by the add-on roles.\n"
        + _dump(document)
    )


def role_files(roles_dir: Path) -> dict[Path, str]:
    """Every generated file of every add-on role, by path, with its content."""
    files: dict[Path, str] = {}
    for addon in ADDONS:
        role = roles_dir / addon
        files[role / "defaults" / "main.yml"] = defaults_file(addon)
        files[role / "meta" / "argument_specs.yml"] = argument_specs_file(addon)
    return files


def stale(roles_dir: Path) -> list[Path]:
    """The generated files that are missing or differ from what the settings models give."""
    return [
        path
        for path, text in role_files(roles_dir).items()
        if path.is_symlink() or not path.is_file() or _read(path) != text.encode("utf-8")
    ]


def _read(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except OSError:
        return None


def check(roles_dir: Path) -> None:
    """CheckFailed naming each stale file and the command that rewrites it."""
    outdated = stale(roles_dir)
    if outdated:
        raise CheckFailed(
            f"{display_path(path)}: stale, not what the settings model gives; run `{COMMAND}`"
            for path in outdated
        )


def write(roles_dir: Path) -> list[Path]:
    """Write the files that are stale; the paths written. Every path is checked before the
    first is written: a directory in the way, or a link (which the write would follow out of the
    role), is refused and nothing is written."""
    files = role_files(roles_dir)
    outdated = stale(roles_dir)
    for path in outdated:
        _check_target(roles_dir, path)
    written = []
    for path in outdated:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(files[path], encoding="utf-8")
        except OSError as exc:
            raise UsageError(
                f"--roles {excerpt(str(roles_dir), 80)}: cannot write "
                f"{display_path(path)}: {exc.strerror or exc}"
            ) from None
        written.append(path)
    return written


def _check_target(roles_dir: Path, path: Path) -> None:
    shown = f"--roles {excerpt(str(roles_dir), 80)}: {path.relative_to(roles_dir)}"
    for above in reversed(path.relative_to(roles_dir).parents[:-1]):
        folder = roles_dir / above
        if folder.exists() and not folder.is_dir():
            raise UsageError(
                f"{shown}: {above} is not a directory and the file is written into it "
                "(allowed: the role's folder; move the file away)"
            )
    if path.is_symlink():
        raise UsageError(
            f"{shown}: a link, which the write would follow to {excerpt(str(path.readlink()), 80)} "
            "(allowed: a plain file or none; remove the link)"
        )
    if path.is_dir():
        raise UsageError(
            f"{shown}: a directory where the generated file is written (allowed: a plain file "
            "or none; move the directory away)"
        )

"""Check rendered add-ons against the real upstream schemas.

- Helm values: every key path a spec sets must exist in the pinned chart's ``values.yaml``
  (Helm ignores a misspelled key silently). Map-typed values that take free keys (labels,
  selectors, ConfigMap data) are listed per chart in ``FREE_MAPS``; nothing else is exempt.
- Custom resources: validated against their CRD's OpenAPI schema, with unknown fields rejected
  wherever the CRD does not preserve them (the API server prunes them silently otherwise).
- Core objects: ``kubernetes-validate`` in strict mode at the pinned Kubernetes version.

Each function returns one line per problem; an empty list means valid.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import yaml

from gpuinfra.suggest import did_you_mean

# Chart name -> value paths whose contents are free-form maps (or documented structures the
# chart's values.yaml leaves empty). Anything under these is the consumer's schema, not Helm's.
FREE_MAPS: dict[str, frozenset[str]] = {
    "gpu-operator": frozenset(
        {
            "dcgmExporter.serviceMonitor.additionalLabels",
            "devicePlugin.config.data",
            "migManager.config.data",
        }
    ),
    "kube-prometheus-stack": frozenset(
        {
            "prometheus.prometheusSpec.serviceMonitorSelector",
            "prometheus.prometheusSpec.podMonitorSelector",
            "prometheus.prometheusSpec.ruleSelector",
            # A PersistentVolumeClaim template, checked by the operator's CRD.
            "prometheus.prometheusSpec.storageSpec",
        }
    ),
    "volcano": frozenset(),
    "kueue": frozenset(),
}


class _CrdLoader(yaml.SafeLoader):
    """YAML 1.1 reads a bare ``=`` as the obsolete "value" tag; CRD enums use it as a string."""


_CrdLoader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:value"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


def values_problems(
    values: Mapping[str, Any], chart_values: Mapping[str, Any], free: Iterable[str] = ()
) -> list[str]:
    """Key paths in ``values`` that the chart's ``values.yaml`` does not have."""
    free_paths = frozenset(free)
    problems: list[str] = []

    def walk(ours: Mapping[str, Any], theirs: Mapping[str, Any], path: str) -> None:
        for key, value in ours.items():
            here = f"{path}.{key}" if path else str(key)
            if key not in theirs:
                hint = did_you_mean(str(key), [str(k) for k in theirs])
                problems.append(f"{here}: not a value of the chart{hint}")
                continue
            upstream = theirs[key]
            if here in free_paths:
                if upstream is not None and not isinstance(upstream, dict):
                    problems.append(f"{here}: declared free-form but the chart has a scalar")
                continue
            if isinstance(value, Mapping):
                if isinstance(upstream, Mapping) and upstream:
                    walk(value, upstream, here)
                else:
                    kind = "an empty map" if isinstance(upstream, Mapping) else "a scalar"
                    problems.append(
                        f"{here}: the chart has {kind} here; its keys cannot be checked "
                        "(list it in FREE_MAPS if it takes free keys)"
                    )
            elif isinstance(upstream, Mapping) and upstream:
                problems.append(f"{here}: the chart expects a map here, got {value!r}")

    walk(values, chart_values, "")
    return problems


class CrdSchemas:
    """The OpenAPI schemas of a set of CRDs, by apiVersion and kind, closed to unknown fields."""

    def __init__(self, crd_files: Iterable[Path]) -> None:
        self._schemas: dict[tuple[str, str], dict[str, Any]] = {}
        for path in crd_files:
            for document in yaml.load_all(path.read_text(encoding="utf-8"), Loader=_CrdLoader):
                if (
                    isinstance(document, dict)
                    and document.get("kind") == "CustomResourceDefinition"
                ):
                    self._add(document)

    def _add(self, crd: dict[str, Any]) -> None:
        spec = crd["spec"]
        for version in spec.get("versions", []):
            schema = (version.get("schema") or {}).get("openAPIV3Schema")
            if schema is None or not version.get("served", False):
                continue
            key = (f"{spec['group']}/{version['name']}", spec["names"]["kind"])
            self._schemas[key] = closed(copy.deepcopy(schema))

    def kinds(self) -> list[tuple[str, str]]:
        return sorted(self._schemas)

    def has(self, obj: Mapping[str, Any]) -> bool:
        return (str(obj.get("apiVersion")), str(obj.get("kind"))) in self._schemas

    def problems(self, obj: Mapping[str, Any]) -> list[str]:
        key = (str(obj.get("apiVersion")), str(obj.get("kind")))
        schema = self._schemas.get(key)
        if schema is None:
            return [f"{_name(obj)}: no CRD serves {key[1]} at {key[0]}"]
        validator = jsonschema.Draft7Validator(schema)
        return [
            f"{_name(obj)}: {_path(error.absolute_path)}: {error.message}"
            for error in sorted(validator.iter_errors(dict(obj)), key=lambda e: list(e.path))
        ]


def closed(schema: dict[str, Any]) -> dict[str, Any]:
    """Reject unknown fields wherever the schema lists properties and keeps no unknown ones."""
    for node in _schema_nodes(schema):
        if (
            "properties" in node
            and "additionalProperties" not in node
            and not node.get("x-kubernetes-preserve-unknown-fields")
        ):
            node["additionalProperties"] = False
    return schema


def _schema_nodes(schema: Any) -> Iterator[dict[str, Any]]:
    if isinstance(schema, dict):
        yield schema
        for key in ("properties", "patternProperties"):
            for child in (schema.get(key) or {}).values():
                yield from _schema_nodes(child)
        for key in ("items", "additionalProperties", "not"):
            yield from _schema_nodes(schema.get(key))
        for key in ("allOf", "anyOf", "oneOf"):
            for child in schema.get(key) or []:
                yield from _schema_nodes(child)


def crd_files(upstream: Path) -> list[Path]:
    """Every CRD file under ``upstream/*/crds/``."""
    return sorted(upstream.glob("*/crds/*.yaml"))


def core_problems(obj: Mapping[str, Any], kubernetes_version: str) -> list[str]:
    """A core Kubernetes object against the API schemas, unknown fields rejected."""
    try:
        kubernetes_validate.validate(dict(obj), kubernetes_version, strict=True)
    except kubernetes_validate.ValidationError as exc:
        return [f"{_name(obj)}: {_path(exc.path)}: {exc.message}"]
    except kubernetes_validate.SchemaNotFoundError:
        return [f"{_name(obj)}: no schema for {obj.get('kind')} {obj.get('apiVersion')}"]
    return []


def _name(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    return f"{obj.get('kind')}/{meta.get('name')}"


def _path(parts: Iterable[Any]) -> str:
    out = ""
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(top)"

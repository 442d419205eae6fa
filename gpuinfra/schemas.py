"""Check rendered add-ons against the pinned upstream schemas.

- Helm values: every key path a spec sets must exist in the pinned chart's values tree
  (Helm ignores a misspelled key silently). Map-typed values that take free keys (labels,
  selectors, ConfigMap data) are listed per chart in ``FREE_MAPS``; nothing else is exempt.
- Custom resources: validated against their CRD's OpenAPI schema, with unknown fields rejected
  wherever the CRD does not preserve them (the API server prunes them silently otherwise).
- Core objects: ``kubernetes-validate`` in strict mode at the pinned Kubernetes version.

The values trees and CRD schemas are the repository's own copies, derived from each pinned chart
(``gpuinfra.chartdata``, ``gpuinfra schemas build``). Each check returns one line per problem;
an empty list means valid.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import jsonschema
import kubernetes_validate

from gpuinfra import chartdata
from gpuinfra.suggest import did_you_mean
from gpuinfra.versions import Versions, pinned

# Chart name -> value paths whose contents are free-form maps (or documented structures the
# chart's values.yaml leaves empty). Anything under these is the consumer's schema, not Helm's.
# The project's judgement, not the chart's: it stays here, apart from the derived data.
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
    "keda": frozenset(),
    # Loki's configuration blocks (the chart leaves some empty): Loki's own schema, not the
    # chart's; and a PodSecurityContext, Kubernetes' schema.
    "loki": frozenset(
        {"loki.schemaConfig", "loki.compactor", "loki.limits_config", "loki.podSecurityContext"}
    ),
    # A container's SecurityContext and a pod's Affinity: Kubernetes' schemas.
    "alloy": frozenset({"alloy.securityContext", "controller.affinity"}),
}


def pinned_chart_values(v: Versions | None = None) -> dict[str, dict[str, Any]]:
    """Chart name -> values tree, for every chart versions.yaml pins."""
    v = v or pinned()
    chartdata.require(v)
    return {
        chart: chartdata.load_values(chart, ver) for _, chart, ver, _ in chartdata.pinned_charts(v)
    }


def values_problems(
    values: Mapping[str, Any], chart_values: Mapping[str, Any], free: Iterable[str] = ()
) -> list[str]:
    """Key paths in ``values`` that the chart's values tree (its values.yaml) does not have."""
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
                    problems.append(
                        f"{here}: declared free-form but the chart has {_kind(upstream)}"
                    )
                continue
            if isinstance(value, Mapping):
                if isinstance(upstream, Mapping) and upstream:
                    walk(value, upstream, here)
                else:
                    problems.append(
                        f"{here}: the chart has {_kind(upstream)} here; its keys cannot be checked "
                        "(list it in FREE_MAPS if it takes free keys)"
                    )
            elif isinstance(upstream, Mapping) and upstream:
                problems.append(f"{here}: the chart expects a map here, got {value!r}")

    walk(values, chart_values, "")
    return problems


def values_schema_problems(
    values: Mapping[str, Any], chart_values: Mapping[str, Any], schema: Mapping[str, Any]
) -> list[str]:
    """The chart's defaults with ``values`` over them, as Helm merges them, against the chart's
    values.schema.json (Helm refuses to install a release whose values fail it)."""
    merged = _coalesced(chart_values, values)
    validator = jsonschema.Draft7Validator(dict(schema))
    return [
        f"{_path(error.absolute_path)}: {error.message}"
        for error in sorted(validator.iter_errors(merged), key=lambda e: list(e.path))
    ]


def _coalesced(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = _coalesced(out[key], value)
        else:
            out[key] = value
    return out


def _kind(upstream: Any) -> str:
    if isinstance(upstream, Mapping):
        return "a map" if upstream else "an empty map"
    return "a list" if isinstance(upstream, list) else "a scalar"


class CrdSchemas:
    """The OpenAPI schemas of a set of CRDs, by apiVersion and kind, closed to unknown fields."""

    def __init__(self, *crd_maps: chartdata.CrdMap) -> None:
        self._schemas: dict[tuple[str, str], dict[str, Any]] = {}
        for crds in crd_maps:
            for api_version, kinds in crds.items():
                for kind, schema in kinds.items():
                    self._schemas[(api_version, kind)] = closed(copy.deepcopy(schema))

    @classmethod
    def of_chart(cls, chart: str, version: str) -> CrdSchemas:
        return cls(chartdata.load_crds(chart, version))

    @classmethod
    def pinned(cls, v: Versions | None = None) -> CrdSchemas:
        """Every CRD that a chart versions.yaml pins ships, and the provided APIs'."""
        v = v or pinned()
        chartdata.require(v)
        return cls(
            *(chartdata.load_crds(c, ver) for _, c, ver, _ in chartdata.pinned_charts(v)),
            *(
                chartdata.load_api_crds(api, ver)
                for api, ver in sorted(chartdata.PROVIDED_APIS.items())
            ),
        )

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

"""The validation data the project carries, derived from upstream artefacts.

Per pinned Helm chart version, under ``data/charts/<chart>/<version>/``:

- ``values.json``: the chart's ``values.yaml`` as data. Keys, nesting and default values are kept
  (an empty map, a list and a scalar stay what they are); the YAML comments are not.
- ``crds.json``: the OpenAPI v3 schema of every CRD version the chart serves, by apiVersion and
  kind, with every ``description`` removed; types, enums, patterns, required fields, defaults
  and ``x-kubernetes-*`` markers are kept.

Per pinned DCGM exporter version, ``data/dcgm-exporter/<version>/counters.json``: each counter
list's metric names and Prometheus types, without the help column.

``read_chart`` reads a chart directory or a ``helm pull`` archive; ``chart_files`` turns it into
the files above, so regenerating after a chart bump is one command (``gpuinfra schemas build``).
``missing`` names the pins that have no data. Nothing here needs a network, a Helm binary or a
checkout of upstream.
"""

from __future__ import annotations

import csv
import io
import json
import re
import tarfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

import yaml

from gpuinfra.errors import ConfigError, Problem, UsageError, excerpt
from gpuinfra.loading import display_path, read_text
from gpuinfra.suggest import allowed, did_you_mean
from gpuinfra.versions import RuleProblem, Versions, pin_problem, versions_path

DATA = Path(__file__).resolve().parent / "data"
VALUES_FILE = "values.json"
CRDS_FILE = "crds.json"
# The chart's own JSON schema of its values, where it ships one (Helm validates the merged values
# against it); kept as the chart gives it, sorted, descriptions removed.
VALUES_SCHEMA_FILE = "values.schema.json"
COUNTERS_FILE = "counters.json"

# The DCGM exporter's counter lists that the GPU Operator's exporter reads (etc/ upstream).
COUNTER_LISTS = ("default-counters.csv", "dcp-metrics-included.csv")
# What a counter list's line holds, as the exporter reads it (internal/pkg/counters upstream):
# exactly three columns; a DCGM field (DCGM_FI_*, or a 1.x name such as dcgm_sm_clock) or one
# of the exporter's own fields; one of the Prometheus types it knows.
COUNTER_COLUMNS = ("DCGM field", "Prometheus metric type", "help message")
EXPORTER_FIELDS = (
    "DCGM_EXP_CLOCK_EVENTS_COUNT",
    "DCGM_EXP_GPU_HEALTH_STATUS",
    "DCGM_EXP_P2P_STATUS",
    "DCGM_EXP_XID_ERRORS_COUNT",
)
METRIC_TYPES = ("counter", "gauge", "histogram", "label", "summary")
_LIST_NAME = re.compile(r"[A-Za-z0-9._-]+", re.ASCII)
_DCGM_FIELD = re.compile(r"^(DCGM_FI_[A-Z0-9_]+|dcgm_[a-z0-9_]+)$")

# apiVersion -> kind -> OpenAPI v3 schema.
CrdMap = dict[str, dict[str, dict[str, Any]]]

# \Z, not $: a trailing newline would otherwise pass into the data's directory names.
_NAME = re.compile(r"^[a-z0-9]([a-z0-9-]*[a-z0-9])?\Z")
_VERSION = re.compile(r"^v?[0-9][0-9A-Za-z.+_-]*\Z")
# Files a chart holds that are never CRDs; skipping them spares parsing the largest ones.
_NOT_CRDS = re.compile(r"^(Chart\.yaml|values[^/]*\.ya?ml)$")


class _CrdLoader(yaml.SafeLoader):
    """YAML 1.1 reads a bare ``=`` as the obsolete "value" tag; CRD enums use it as a string."""


_CrdLoader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:value"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


# APIs whose CRDs the cluster brings (a Gateway API implementation installs its own), by the
# release whose schemas the emitted objects are checked against (docs/decisions/0051), and
# their API groups.
PROVIDED_APIS: dict[str, str] = {"gateway-api": "1.6.1"}
PROVIDED_GROUPS = frozenset({"gateway.networking.k8s.io"})


# --- where the data lives --------------------------------------------------------------------


def _version_dir(version: str) -> str:
    # Charts write their version with or without a "v" (gpu-operator v26.7.0, kueue 0.19.2) and
    # versions.yaml may differ from Chart.yaml in that; one directory name serves both.
    return version.removeprefix("v")


def chart_dir(chart: str, version: str, data: Path = DATA) -> Path:
    return data / "charts" / chart / _version_dir(version)


def counters_dir(version: str, data: Path = DATA) -> Path:
    return data / "dcgm-exporter" / _version_dir(version)


def api_dir(api: str, version: str, data: Path = DATA) -> Path:
    """CRDs of an API the cluster brings rather than a pinned chart (the Gateway API)."""
    return data / "apis" / api / _version_dir(version)


def _shown(path: Path) -> str:
    try:
        return str(path.relative_to(DATA.parent.parent))
    except ValueError:
        return str(path)


def build_hint(chart: str, version: str, repository: str | None = None) -> str:
    """The command that writes a chart's data."""
    archive = f"{chart}-{version}.tgz"
    if repository is None:
        return f"gpuinfra schemas build <chart dir or {archive} from helm pull>"
    if repository.startswith("oci://"):
        pull = f"helm pull {repository.rstrip('/')}/{chart} --version {version}"
    else:
        pull = f"helm pull {chart} --repo {repository} --version {version}"
    return f"{pull} && gpuinfra schemas build {archive}"


def counters_hint(version: str) -> str:
    return (
        f"gpuinfra schemas counters {version} {' '.join(COUNTER_LISTS)} "
        f"(etc/ of NVIDIA/dcgm-exporter at tag {version})"
    )


def _read_json(path: Path, what: str, hint: str) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UsageError(f"no {what} in {_shown(path.parent)}; run: {hint}") from None
    return json.loads(text)


def load_values(chart: str, version: str, data: Path = DATA) -> dict[str, Any]:
    """The pinned chart's values tree, as ``values_problems`` walks it."""
    path = chart_dir(chart, version, data) / VALUES_FILE
    values: dict[str, Any] = _read_json(
        path, f"values tree for chart {chart} {version}", build_hint(chart, version)
    )
    return values


def load_crds(chart: str, version: str, data: Path = DATA) -> CrdMap:
    """The CRD schemas the pinned chart ships, by apiVersion and kind."""
    path = chart_dir(chart, version, data) / CRDS_FILE
    crds: CrdMap = _read_json(
        path, f"CRD schemas for chart {chart} {version}", build_hint(chart, version)
    )
    return crds


def load_values_schema(chart: str, version: str, data: Path = DATA) -> dict[str, Any] | None:
    """The chart's JSON schema of its values, or None when the chart ships none."""
    path = chart_dir(chart, version, data) / VALUES_SCHEMA_FILE
    if not path.is_file():
        return None
    schema: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return schema


def load_api_crds(api: str, version: str, data: Path = DATA) -> CrdMap:
    """The CRD schemas of an API the project's objects use and the cluster provides."""
    hint = f"run `gpuinfra schemas api {api} {version} CRD.yaml...`"
    crds: CrdMap = _read_json(
        api_dir(api, version, data) / CRDS_FILE, f"CRD schemas for {api} {version}", hint
    )
    return crds


def load_counters(version: str, data: Path = DATA) -> dict[str, dict[str, str]]:
    """Counter list name -> metric name -> Prometheus type, for a DCGM exporter version."""
    path = counters_dir(version, data) / COUNTERS_FILE
    counters: dict[str, dict[str, str]] = _read_json(
        path, f"DCGM exporter {version} counter lists", counters_hint(version)
    )
    return counters


def pinned_charts(v: Versions) -> list[tuple[str, str, str, str]]:
    """(component, chart, version, repository) of every Helm chart versions.yaml pins."""
    return [
        (name, comp.source.chart, comp.version, comp.source.repository)
        for name, comp in v.entries()
        if comp.source.type == "helm" and comp.source.chart and comp.source.repository
    ]


def missing(v: Versions, data: Path = DATA) -> list[RuleProblem]:
    """One problem per pin whose validation data the repository does not carry."""
    problems: list[RuleProblem] = []
    for name, chart, version, repository in pinned_charts(v):
        if pin_problem(version, name):
            continue  # the pinning rules already refuse it
        folder = chart_dir(chart, version, data)
        if not all((folder / f).is_file() for f in (VALUES_FILE, CRDS_FILE)):
            problems.append(
                RuleProblem(
                    key=f"{name}.version",
                    message=(
                        f"no values tree or CRD schemas for chart {chart} {version} in "
                        f"{_shown(folder)}; run: {build_hint(chart, version, repository)}"
                    ),
                )
            )
    exporter = v.dcgm_exporter.version
    folder = counters_dir(exporter, data)
    if not pin_problem(exporter, "dcgm_exporter") and not (folder / COUNTERS_FILE).is_file():
        problems.append(
            RuleProblem(
                key="dcgm_exporter.version",
                message=(
                    f"no counter lists for the DCGM exporter {exporter} in {_shown(folder)}; "
                    f"run: {counters_hint(exporter)}"
                ),
            )
        )
    return problems


def require(v: Versions, data: Path = DATA) -> None:
    """Refuse, naming the pin in versions.yaml, a chart or exporter version whose validation
    data the repository does not carry: nothing is rendered or checked without it."""
    if problems := missing(v, data):
        shown = display_path(versions_path())
        raise ConfigError(Problem(shown, p.key, p.message) for p in problems)


# --- reading a chart -------------------------------------------------------------------------


@dataclass(frozen=True)
class ChartSource:
    """What the data is derived from: a chart's name, version, values and CRD documents."""

    name: str
    version: str
    values: dict[str, Any]
    # (where it was found, the CustomResourceDefinition document)
    crds: tuple[tuple[str, dict[str, Any]], ...]
    # The chart's values.schema.json, if it has one.
    values_schema: dict[str, Any] | None = None


def read_chart(path: Path, version: str | None = None) -> ChartSource:
    """A chart directory or archive (``.tgz``, as ``helm pull`` writes it).

    CRDs are taken from every plain-YAML file of the chart and of its subcharts, unpacked
    (``charts/<name>/``) or archived (``charts/*.tgz``): ``crds/`` directories and templates
    that hold no template directives. ``version`` overrides Chart.yaml's, for a source tree
    whose Chart.yaml carries a development placeholder (gpu-operator's says v1.0.0-devel).
    """
    if version is not None and not _VERSION.match(version):
        # An empty --version (an unset shell variable) must not fall back to Chart.yaml's.
        raise UsageError(f"--version {version!r}: not a chart version (allowed: e.g. 0.19.3)")
    no_chart = UsageError(
        f"{path}: Chart.yaml: "
        f"{'is a directory' if (path / 'Chart.yaml').is_dir() else 'missing'} (allowed: a Helm "
        "chart, with its Chart.yaml at the top)"
    )
    if path.is_dir():
        # Told before the tree is read: a directory given by mistake (/, $HOME) may be huge.
        if not (path / "Chart.yaml").is_file():
            raise no_chart
        files = dict(_directory_files(path))
    elif path.is_file():
        files = _archive_files(path)
    else:
        raise UsageError(f"{path}: no such chart directory or archive")
    if "Chart.yaml" not in files:
        raise no_chart
    meta = _yaml_mapping(files["Chart.yaml"], f"{path}: Chart.yaml")
    name = meta.get("name")
    if not isinstance(name, str) or not _NAME.match(name):
        shown = "missing" if name is None else f"{excerpt(repr(name))} is not a chart name"
        raise UsageError(
            f"{path}: Chart.yaml: name: {shown} (allowed: lowercase letters, digits and '-', "
            "e.g. gpu-operator)"
        )
    chosen = version or str(meta.get("version") or "")
    if not _VERSION.match(chosen):
        shown = f"{excerpt(repr(chosen))} is not a version" if chosen else "missing"
        raise UsageError(
            f"{path}: Chart.yaml: version: {shown} (allowed: e.g. 0.19.3; --version gives one "
            "for a development placeholder)"
        )
    values = _yaml_mapping(files.get("values.yaml", b"{}"), f"{path}: values.yaml")
    # A subchart's values are set under its name in the parent's values; the parent's own
    # settings for it override the subchart's defaults, as Helm merges them.
    for member, content in sorted(files.items()):
        parts = PurePosixPath(member).parts
        if len(parts) == 3 and parts[0] == "charts" and parts[2] == "values.yaml":
            defaults = _yaml_mapping(content, f"{path}: {member}")
            values[parts[1]] = _merged(defaults, values.get(parts[1]) or {})
    crds: list[tuple[str, dict[str, Any]]] = []
    for member, content in sorted(files.items()):
        where = PurePosixPath(member)
        if where.suffix not in (".yaml", ".yml") or _NOT_CRDS.match(where.name):
            continue
        if b"{{" in content:
            continue  # a Helm template: not plain YAML
        try:
            documents = list(yaml.load_all(content.decode("utf-8"), Loader=_CrdLoader))
        except (yaml.YAMLError, UnicodeDecodeError) as exc:
            if "crds" in where.parts:
                # Helm installs crds/ verbatim: a file there that does not parse is a broken chart.
                raise UsageError(f"{path}: {member}: not valid YAML ({_first_line(exc)})") from None
            continue
        for doc in documents:
            if isinstance(doc, dict) and doc.get("kind") == "CustomResourceDefinition":
                if not _crd_shaped(doc):
                    raise UsageError(f"{path}: {member}: {_CRD_SHAPE}")
                crds.append((member, doc))
    values_schema = None
    if "values.schema.json" in files:
        try:
            values_schema = json.loads(files["values.schema.json"].decode("utf-8"))
        except (ValueError, UnicodeDecodeError) as exc:
            raise UsageError(f"{path}: values.schema.json: not valid JSON ({exc})") from None
    return ChartSource(
        name=name, version=chosen, values=values, crds=tuple(crds), values_schema=values_schema
    )


_CRD_SHAPE = (
    "not a CustomResourceDefinition with spec.group, spec.names.kind and named spec.versions "
    "(allowed: a CRD as apiextensions.k8s.io/v1 defines it)"
)


def _crd_shaped(document: Mapping[str, Any]) -> bool:
    """Whether a CRD document has the fields its schemas are read from, of their types."""
    spec = document.get("spec")
    if not isinstance(spec, dict):
        return False
    names, versions = spec.get("names"), spec.get("versions")
    return (
        isinstance(spec.get("group"), str)
        and isinstance(names, dict)
        and isinstance(names.get("kind"), str)
        and isinstance(versions, list)
        and all(
            isinstance(v, dict)
            and isinstance(v.get("name"), str)
            and isinstance(v.get("schema") or {}, dict)
            for v in versions
        )
    )


def _merged(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = _merged(out[key], value)
        else:
            out[key] = value
    return out


def _directory_files(root: Path) -> Iterator[tuple[str, bytes]]:
    for file in sorted(root.rglob("*")):
        if not file.is_file():
            continue
        relative = file.relative_to(root).as_posix()
        if _is_subchart_archive(relative):
            yield from _archive_files(file, prefix=f"{PurePosixPath(relative).parent}/").items()
        else:
            try:
                yield relative, file.read_bytes()
            except OSError as exc:
                raise UsageError(
                    f"{root}: {relative}: cannot read ({exc.strerror or exc})"
                ) from None


def _is_subchart_archive(member: str) -> bool:
    where = PurePosixPath(member)
    return where.suffix == ".tgz" and where.parent.name == "charts"


def _archive_files(
    path: Path, prefix: str = "", nested: tuple[str, bytes] | None = None
) -> dict[str, bytes]:
    """Files of a chart archive, relative to the chart's top directory, subcharts unpacked.

    ``nested`` is a subchart archive read from inside ``path``: its name there and its bytes.
    """
    files: dict[str, bytes] = {}
    try:
        with tarfile.open(
            name=path if nested is None else None,
            fileobj=None if nested is None else io.BytesIO(nested[1]),
            mode="r:*",
        ) as archive:
            for member in archive.getmembers():
                parts = PurePosixPath(member.name).parts
                handle = archive.extractfile(member) if member.isfile() else None
                if handle is None or len(parts) < 2 or ".." in parts:
                    continue
                relative = "/".join(parts[1:])  # without the chart's own top directory
                if _is_subchart_archive(relative):
                    folder = f"{prefix}{PurePosixPath(relative).parent}/"
                    files.update(_archive_files(path, folder, (prefix + relative, handle.read())))
                else:
                    files[prefix + relative] = handle.read()
    except (tarfile.TarError, OSError, EOFError):
        where = str(path) if nested is None else f"{path}: {nested[0]}"
        raise UsageError(
            f"{where}: not a chart archive (a gzipped tar, as helm pull writes)"
        ) from None
    return files


def _yaml_mapping(content: bytes, where: str) -> dict[str, Any]:
    try:
        loaded = yaml.safe_load(content.decode("utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise UsageError(f"{where}: not valid YAML ({_first_line(exc)})") from None
    if loaded is None:
        return {}
    if not isinstance(loaded, dict):
        raise UsageError(f"{where}: expected a mapping at the top, got {type(loaded).__name__}")
    return loaded


def _first_line(exc: Exception) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__


# --- deriving the data -----------------------------------------------------------------------


def crd_schemas(documents: tuple[tuple[str, dict[str, Any]], ...]) -> CrdMap:
    """The served versions' schemas, descriptions removed; a conflicting duplicate is refused."""
    out: CrdMap = {}
    origin: dict[tuple[str, str], str] = {}
    for where, crd in documents:
        spec = crd.get("spec") or {}
        for version in spec.get("versions") or []:
            schema = (version.get("schema") or {}).get("openAPIV3Schema")
            if schema is None or not version.get("served", False):
                continue
            api_version = f"{spec['group']}/{version['name']}"
            kind = str(spec["names"]["kind"])
            stripped = without_descriptions(schema)
            known = out.get(api_version, {}).get(kind)
            if known is not None and known != stripped:
                raise UsageError(
                    f"{kind} {api_version} is defined twice with different schemas: "
                    f"{origin[(api_version, kind)]} and {where}"
                )
            out.setdefault(api_version, {})[kind] = stripped
            origin.setdefault((api_version, kind), where)
    return out


def without_descriptions(schema: Any) -> Any:
    """An OpenAPI schema without its ``description`` keywords (a property named so stays)."""
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key == "description":
            continue
        if key in ("properties", "patternProperties", "definitions") and isinstance(value, dict):
            out[key] = {name: without_descriptions(child) for name, child in value.items()}
        elif key in ("items", "additionalProperties", "not", "additionalItems"):
            out[key] = (
                [without_descriptions(c) for c in value]
                if isinstance(value, list)
                else without_descriptions(value)
            )
        elif key in ("allOf", "anyOf", "oneOf") and isinstance(value, list):
            out[key] = [without_descriptions(child) for child in value]
        else:
            out[key] = value  # enums, defaults, examples, x-kubernetes-* markers: data
    return out


def _plain(value: Any) -> Any:
    """YAML data as JSON data: keys as strings (as Helm reads them), dates as their text."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return str(value)


def values_text(values: Mapping[str, Any]) -> str:
    return json.dumps(_plain(values), sort_keys=True, indent=1) + "\n"


def crds_text(crds: CrdMap) -> str:
    """One line per kind: compact, yet a chart bump's diff says which kinds changed."""
    groups = []
    for api_version in sorted(crds):
        kinds = ",\n".join(
            f"  {json.dumps(kind)}: "
            f"{json.dumps(crds[api_version][kind], sort_keys=True, separators=(',', ':'))}"
            for kind in sorted(crds[api_version])
        )
        groups.append(f" {json.dumps(api_version)}: {{\n{kinds}\n }}")
    return "{\n" + ",\n".join(groups) + "\n}\n" if groups else "{}\n"


def chart_files(source: ChartSource) -> dict[str, str]:
    """The data files of one chart version, by path relative to the data directory."""
    folder = f"charts/{source.name}/{_version_dir(source.version)}"
    files = {
        f"{folder}/{VALUES_FILE}": values_text(source.values),
        f"{folder}/{CRDS_FILE}": crds_text(crd_schemas(source.crds)),
    }
    if source.values_schema is not None:
        schema = without_descriptions(source.values_schema)
        files[f"{folder}/{VALUES_SCHEMA_FILE}"] = (
            json.dumps(schema, sort_keys=True, indent=1) + "\n"
        )
    return files


def _counters(name: str, text: str) -> dict[str, str]:
    """One counter list's fields and types; every line the exporter refuses, and every field
    listed twice (the data file holds one type per field), raises together."""
    metrics: dict[str, str] = {}
    first: dict[str, int] = {}
    problems: list[Problem] = []
    for number, line in enumerate(text.split("\n"), start=1):
        # The exporter skips blank lines and comments (a line that starts with "#").
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        field, kind, message = _counter(line)
        if not message and field in first:
            message = (
                f"{field} is listed again, first on line {first[field]} "
                "(allowed: each field once; remove one of the two lines)"
            )
        if message:
            problems.append(Problem(name, f"line {number}", message))
            continue
        first[field] = number
        metrics[field] = kind
    if problems:
        raise ConfigError(problems)
    if not metrics:
        raise ConfigError(
            [
                Problem(
                    name,
                    "",
                    f"lists no counter (allowed: lines of {', '.join(COUNTER_COLUMNS)}, such as "
                    "'DCGM_FI_DEV_GPU_TEMP, gauge, GPU temperature (in C).'; # starts a comment)",
                )
            ]
        )
    return metrics


def _counter(line: str) -> tuple[str, str, str]:
    """One line of a counter list: its field, its type and what is wrong ("" when nothing)."""
    columns = f"(allowed: {', '.join(COUNTER_COLUMNS)})"
    try:
        row = [cell.strip() for cell in next(csv.reader([line], strict=True))]
    except csv.Error as exc:
        return "", "", f"not a CSV line: {exc} {columns}"
    if len(row) != len(COUNTER_COLUMNS):
        count = f"{len(row)} column" + ("" if len(row) == 1 else "s")
        return "", "", f"{count}, expected {len(COUNTER_COLUMNS)} {columns}"
    field, kind, _help = row
    if field not in EXPORTER_FIELDS and not _DCGM_FIELD.match(field):
        hint = did_you_mean(field, EXPORTER_FIELDS) if field.startswith("DCGM_EXP") else ""
        exporters = "the exporter's DCGM_EXP_ fields" if hint else allowed(EXPORTER_FIELDS)
        return (
            field,
            kind,
            f"{excerpt(repr(field))} is not a DCGM field name{hint} (allowed: DCGM_FI_<NAME> in "
            f"capitals, digits and _, a 1.x name dcgm_<name> in lower case, or {exporters})",
        )
    if kind not in METRIC_TYPES:
        return (
            field,
            kind,
            f"metric type {excerpt(repr(kind))} is not allowed{did_you_mean(kind, METRIC_TYPES)} "
            f"(allowed: {allowed(METRIC_TYPES)})",
        )
    return field, kind, ""


def counter_files(version: str, csv_files: list[Path]) -> dict[str, str]:
    """The counters data file of a DCGM exporter version, from its CSV counter lists."""
    if not _VERSION.match(version):
        raise UsageError(
            f"VERSION {excerpt(repr(version))}: not a DCGM exporter version (allowed: e.g. "
            "4.6.0-4.8.3: a digit first, then letters, digits and . + _ -)"
        )
    lists: dict[str, dict[str, str]] = {}
    problems: list[Problem] = []
    for path in csv_files:
        # The file's name is the list's key in the data (default-counters).
        if not _LIST_NAME.fullmatch(path.stem):
            problems.append(
                Problem(
                    excerpt(repr(str(path)), 80),
                    "",
                    "not a counter list's name (allowed: letters, digits, '.', '_' and '-', "
                    f"such as {' or '.join(COUNTER_LISTS)})",
                )
            )
            continue
        try:
            lists[path.stem] = _counters(display_path(path), read_text(path))
        except ConfigError as exc:
            problems += exc.problems
    if problems:
        raise ConfigError(problems)
    text = json.dumps(lists, sort_keys=True, indent=1) + "\n"
    return {f"dcgm-exporter/{_version_dir(version)}/{COUNTERS_FILE}": text}


def api_files(api: str, version: str, crd_files: list[Path]) -> dict[str, str]:
    """The data file of an API's CRDs (plain CRD YAML files, as its release publishes them)."""
    if not _NAME.match(api):
        raise UsageError(
            f"NAME {excerpt(repr(api))}: not an API name (allowed: lowercase letters, digits "
            "and '-', e.g. gateway-api)"
        )
    if not _VERSION.match(version):
        raise UsageError(
            f"VERSION {excerpt(repr(version))}: not a release (allowed: e.g. 1.6.1: a digit "
            "first, then letters, digits and . + _ -)"
        )
    documents = []
    for path in crd_files:
        try:
            text = path.read_bytes()
        except OSError as exc:
            raise UsageError(f"{path}: cannot read ({exc.strerror or exc})") from None
        document = _yaml_mapping(text, str(path))
        if document.get("kind") != "CustomResourceDefinition" or not _crd_shaped(document):
            raise UsageError(
                f"{path}: {_CRD_SHAPE.removesuffix(')')}; one CRD per file, as the API's "
                "release publishes them)"
            )
        if not crd_schemas(((str(path), document),)):
            raise UsageError(f"{path}: the CRD serves no version with an openAPIV3Schema")
        documents.append((str(path), document))
    folder = f"apis/{api}/{_version_dir(version)}"
    return {f"{folder}/{CRDS_FILE}": crds_text(crd_schemas(tuple(documents)))}


def write(files: Mapping[str, str], data: Path = DATA) -> list[Path]:
    """Write data files under ``data``; the paths written, in order."""
    written = []
    for relative, text in sorted(files.items()):
        target = data / relative
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text, encoding="utf-8")
        except OSError as exc:
            raise UsageError(
                f"--out {excerpt(str(data), 80)}: cannot write {excerpt(relative, 80)}: "
                f"{exc.strerror or exc}"
            ) from None
        written.append(target)
    return written

"""The validation data: built from a chart directory or archive, loaded, and asked for by the
versions check when a pin has none."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path
from typing import Any

import pytest

from gpuinfra import chartdata, schemas, versions
from gpuinfra.errors import UsageError
from tests.conftest import ROOT, run_cli, run_main

CHART = """\
apiVersion: v2
name: demo
version: 1.2.3
"""

VALUES = """\
# Upstream prose about the chart, which the data leaves out.
operator:
  # Whether to upgrade the CRDs before the release.
  upgradeCRD: true
  labels: {}
  tolerations: []
  resources:
    limits:
      cpu: 100m
image: repo/demo  # the image
nothing: ~
"""

WIDGET_CRD = """\
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.demo.example.com
spec:
  group: demo.example.com
  names: {kind: Widget, plural: widgets}
  scope: Namespaced
  versions:
    - name: v1
      served: true
      storage: true
      schema:
        openAPIV3Schema:
          description: A widget, described at length upstream.
          type: object
          properties:
            apiVersion: {type: string}
            kind: {type: string}
            metadata: {type: object}
            spec:
              description: What the widget should be.
              type: object
              required: [size]
              properties:
                size:
                  description: How big.
                  type: integer
                  minimum: 1
                operator:
                  type: string
                  enum: ["=", "!="]
                description:
                  description: A field that happens to be called description.
                  type: string
                extra:
                  type: object
                  x-kubernetes-preserve-unknown-fields: true
    - name: v0
      served: false
      storage: false
      schema:
        openAPIV3Schema: {type: object}
"""

GADGET_CRD = """\
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: gadgets.sub.example.com
spec:
  group: sub.example.com
  names: {kind: Gadget, plural: gadgets}
  scope: Cluster
  versions:
    - name: v1alpha1
      served: true
      storage: true
      schema:
        openAPIV3Schema:
          description: Shipped by a subchart.
          type: object
          properties:
            spec: {type: object, properties: {count: {type: integer}}}
"""

TEMPLATE = """\
apiVersion: apps/v1
kind: Deployment
metadata:
  name: {{ .Release.Name }}
"""


def chart_tree(root: Path, subchart_archived: bool = False) -> dict[str, bytes]:
    """A small chart: nested maps, an empty map, a list, CRDs in crds/ and in a subchart."""
    files = {
        "demo/Chart.yaml": CHART.encode(),
        "demo/values.yaml": VALUES.encode(),
        "demo/crds/widgets.yaml": WIDGET_CRD.encode(),
        "demo/templates/deployment.yaml": TEMPLATE.encode(),
    }
    sub = {
        "sub/Chart.yaml": b"apiVersion: v2\nname: sub\nversion: 0.1.0\n",
        "sub/crds/gadgets.yaml": GADGET_CRD.encode(),
    }
    if subchart_archived:
        files["demo/charts/sub-0.1.0.tgz"] = tgz(sub)
    else:
        files.update({f"demo/charts/{k}": v for k, v in sub.items()})
    for relative, content in files.items():
        target = root / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(content)
    return files


def tgz(files: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for name, content in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(content)
            archive.addfile(info, io.BytesIO(content))
    return buffer.getvalue()


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The data for the small chart, written by the real command from its directory."""
    tmp = tmp_path_factory.mktemp("chart")
    chart_tree(tmp / "src")
    out = tmp / "data"
    result = run_cli("schemas", "build", str(tmp / "src" / "demo"), "--out", str(out))
    assert result.code == 0, result.stderr
    assert "demo 1.2.3: 3 top-level values, 2 CRD schemas" in result.stdout
    return out


def _schema_keys(node: Any) -> set[str]:
    """Every keyword used in a schema, not counting the names of its properties."""
    if not isinstance(node, dict):
        return set()
    keys = set(node)
    for name, child in node.items():
        children = child.values() if name == "properties" else [child]
        for item in children:
            for sub in item if isinstance(item, list) else [item]:
                keys |= _schema_keys(sub)
    return keys


def test_the_values_tree_keeps_structure_and_defaults_and_drops_comments(built: Path) -> None:
    text = (built / "charts" / "demo" / "1.2.3" / "values.json").read_text()
    assert text.endswith("}\n")
    assert "prose" not in text and "the image" not in text
    tree = chartdata.load_values("demo", "1.2.3", data=built)
    assert tree["operator"]["upgradeCRD"] is True
    assert tree["operator"]["labels"] == {}
    assert tree["operator"]["tolerations"] == []
    assert tree["operator"]["resources"] == {"limits": {"cpu": "100m"}}
    assert tree["image"] == "repo/demo"
    assert tree["nothing"] is None


def test_a_misspelled_value_still_gets_a_suggestion(built: Path) -> None:
    tree = chartdata.load_values("demo", "1.2.3", data=built)
    assert schemas.values_problems({"operator": {"upgradeCRDs": False}}, tree) == [
        "operator.upgradeCRDs: not a value of the chart; did you mean 'upgradeCRD'?"
    ]


def test_the_tree_tells_a_map_an_empty_map_a_list_and_a_scalar_apart(built: Path) -> None:
    tree = chartdata.load_values("demo", "1.2.3", data=built)
    values = {
        "operator": {
            "resources": {"limits": {"cpu": "1"}},
            "labels": {"team": "ml"},
            "tolerations": {"key": "gpu"},
        },
        "image": {"repository": "x"},
    }
    tail = "; its keys cannot be checked (list it in FREE_MAPS if it takes free keys)"
    assert schemas.values_problems(values, tree) == [
        f"operator.labels: the chart has an empty map here{tail}",
        f"operator.tolerations: the chart has a list here{tail}",
        f"image: the chart has a scalar here{tail}",
    ]
    assert (
        schemas.values_problems(
            {"operator": {"labels": {"team": "ml"}}}, tree, free={"operator.labels"}
        )
        == []
    )
    assert schemas.values_problems({"operator": "on"}, tree) == [
        "operator: the chart expects a map here, got 'on'"
    ]


def test_crd_schemas_keep_the_rules_and_drop_every_description(built: Path) -> None:
    crds = chartdata.load_crds("demo", "1.2.3", data=built)
    # Served versions only, from crds/ and from the subchart; not from the templated file.
    assert {(api, kind) for api in crds for kind in crds[api]} == {
        ("demo.example.com/v1", "Widget"),
        ("sub.example.com/v1alpha1", "Gadget"),
    }
    widget = crds["demo.example.com/v1"]["Widget"]
    assert "description" not in _schema_keys(widget)
    spec = widget["properties"]["spec"]
    assert spec["required"] == ["size"]
    assert spec["properties"]["size"] == {"type": "integer", "minimum": 1}
    assert spec["properties"]["operator"]["enum"] == ["=", "!="]
    assert spec["properties"]["description"] == {"type": "string"}
    assert spec["properties"]["extra"]["x-kubernetes-preserve-unknown-fields"] is True


def test_the_built_schemas_validate_objects(built: Path) -> None:
    crds = schemas.CrdSchemas(chartdata.load_crds("demo", "1.2.3", data=built))
    good = {
        "apiVersion": "demo.example.com/v1",
        "kind": "Widget",
        "metadata": {"name": "w"},
        "spec": {"size": 2, "operator": "=", "extra": {"anything": 1}},
    }
    assert crds.problems(good) == []
    wrong = {**good, "spec": {"size": 0, "colour": "red"}}
    assert crds.problems(wrong) == [
        "Widget/w: spec: Additional properties are not allowed ('colour' was unexpected)",
        "Widget/w: spec.size: 0 is less than the minimum of 1",
    ]


def test_an_archive_gives_the_same_files_as_the_directory(tmp_path: Path, built: Path) -> None:
    files = chart_tree(tmp_path / "src", subchart_archived=True)
    archive = tmp_path / "demo-1.2.3.tgz"
    archive.write_bytes(tgz(files))
    out = tmp_path / "data"
    result = run_cli("schemas", "build", str(archive), "--out", str(out))
    assert result.code == 0, result.stderr
    for name in (chartdata.VALUES_FILE, chartdata.CRDS_FILE):
        relative = Path("charts", "demo", "1.2.3", name)
        assert (out / relative).read_bytes() == (built / relative).read_bytes(), name


def test_a_version_can_replace_a_development_placeholder(tmp_path: Path) -> None:
    chart_tree(tmp_path)
    chart = tmp_path / "demo" / "Chart.yaml"
    chart.write_text(CHART.replace("1.2.3", "v1.0.0-devel"))
    source = chartdata.read_chart(tmp_path / "demo", version="v26.7.0")
    assert sorted(chartdata.chart_files(source)) == [
        "charts/demo/26.7.0/crds.json",
        "charts/demo/26.7.0/values.json",
    ]


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda p: p / "nope", "{path}: no such chart directory or archive"),
        (
            lambda p: p,
            "{path}: Chart.yaml: missing (allowed: a Helm chart, with its Chart.yaml at the top)",
        ),
    ],
)
def test_a_bad_path_is_one_line_and_exit_2(tmp_path: Path, make: Any, message: str) -> None:
    path = make(tmp_path)
    result = run_cli("schemas", "build", str(path), "--out", str(tmp_path / "data"))
    assert result.code == 2
    assert "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines() == [f"error: {message.format(path=path)}"]
    assert not (tmp_path / "data").exists()


def test_counter_lists_keep_names_and_types_only(tmp_path: Path) -> None:
    listing = tmp_path / "default-counters.csv"
    listing.write_text(
        "# Format\n# DCGM FIELD, Prometheus metric type, help message\n\n"
        "DCGM_FI_DEV_GPU_TEMP,    gauge, GPU temperature (in C).\n"
        "# DCGM_FI_PROF_PCIE_TX_BYTES,  counter, Not exported.\n"
        "DCGM_FI_DEV_XID_ERRORS,  gauge, Value of the last XID error.\n"
    )
    files = chartdata.counter_files("4.6.0-4.8.3", [listing])
    written = chartdata.write(files, tmp_path / "data")
    assert [p.relative_to(tmp_path / "data").as_posix() for p in written] == [
        "dcgm-exporter/4.6.0-4.8.3/counters.json"
    ]
    assert chartdata.load_counters("4.6.0-4.8.3", data=tmp_path / "data") == {
        "default-counters": {"DCGM_FI_DEV_GPU_TEMP": "gauge", "DCGM_FI_DEV_XID_ERRORS": "gauge"}
    }


def test_counter_lists_read_every_form_the_exporter_reads(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Its own fields, 1.x names, every Prometheus type, spaces before a comma, CRLF, a BOM."""
    listing = tmp_path / "dcp-metrics-included.csv"
    listing.write_bytes(
        "\ufeff# DCGM FIELD, Prometheus metric type, help message\r\n"
        "DCGM_FI_DEV_DEC_UTIL ,     gauge, Decoder utilization (in %).\r\n"
        "\r\n"
        "   # DCGM_FI_DEV_ECC_SBE_VOL_TOTAL, counter, indented comment\r\n"
        'DCGM_FI_DRIVER_VERSION,        label,"Driver Version, as a label"\r\n'
        "DCGM_EXP_XID_ERRORS_COUNT, counter, reported XIDs during last window\r\n"
        "dcgm_sm_clock,     gauge, SM clock frequency (in MHz).\r\n"
        "DCGM_FI_PROF_SM_ACTIVE, histogram,\r\n"
        "DCGM_FI_PROF_SM_OCCUPANCY, summary, Occupancy.".encode()
    )
    data = tmp_path / "data"
    code, out, err = run_main(
        capsys, "schemas", "counters", "4.6.0-4.8.3", str(listing), "--out", str(data)
    )
    assert (code, err) == (0, "")
    assert out.count("wrote ") == 1
    assert chartdata.load_counters("4.6.0-4.8.3", data=data) == {
        "dcp-metrics-included": {
            "DCGM_FI_DEV_DEC_UTIL": "gauge",
            "DCGM_FI_DRIVER_VERSION": "label",
            "DCGM_EXP_XID_ERRORS_COUNT": "counter",
            "dcgm_sm_clock": "gauge",
            "DCGM_FI_PROF_SM_ACTIVE": "histogram",
            "DCGM_FI_PROF_SM_OCCUPANCY": "summary",
        }
    }


def test_every_bad_counter_list_is_named_and_nothing_is_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    good = tmp_path / "default-counters.csv"
    good.write_text("DCGM_FI_DEV_GPU_TEMP, gauge, GPU temperature (in C).\n")
    bad = tmp_path / "dcp-metrics-included.csv"
    bad.write_text(
        "DCGM_FI_DEV_GPU_TEMP, gauge, ok\nDCGM_FI_DEV_SM_CLOCK, Gauge, SM clock\n"
        "DCGM_FI_DEV_MEM_CLOCK, gauge, memory clock\nDCGM_FI_DEV_GPU_TEMP, counter, again\n"
        "DCGM_FI_DEV_POWER_USAGE, gauge\n"
    )
    empty = tmp_path / "empty.csv"
    empty.write_text("")
    data = tmp_path / "data"
    argv = ("schemas", "counters", "4.6.0-4.8.3", str(good), str(bad), str(empty))
    code, out, err = run_main(capsys, *argv, "--out", str(data))
    assert (code, out) == (2, "")
    assert err.splitlines() == [
        f"error: {bad}: line 2: metric type 'Gauge' is not allowed; did you mean 'gauge'? "
        "(allowed: 'counter', 'gauge', 'histogram', 'label' or 'summary')",
        f"error: {bad}: line 4: DCGM_FI_DEV_GPU_TEMP is listed again, first on line 1 "
        "(allowed: each field once; remove one of the two lines)",
        f"error: {bad}: line 5: 2 columns, expected 3 (allowed: DCGM field, Prometheus metric "
        "type, help message)",
        f"error: {empty}: lists no counter (allowed: lines of DCGM field, Prometheus metric "
        "type, help message, such as 'DCGM_FI_DEV_GPU_TEMP, gauge, GPU temperature (in C).'; "
        "# starts a comment)",
    ]
    assert not data.exists()


def test_the_repository_carries_data_for_every_pin_and_no_other() -> None:
    v = versions.load()
    pinned = {
        (chart, version.removeprefix("v")) for _, chart, version, _ in chartdata.pinned_charts(v)
    }
    carried = {(p.parent.name, p.name) for p in (chartdata.DATA / "charts").glob("*/*")}
    assert carried == pinned
    exporters = {p.name for p in (chartdata.DATA / "dcgm-exporter").iterdir()}
    assert exporters == {v.dcgm_exporter.version}
    assert chartdata.missing(v) == []


def test_a_loaded_chart_without_data_names_the_command(tmp_path: Path) -> None:
    with pytest.raises(UsageError) as raised:
        chartdata.load_values("kueue", "0.19.3", data=tmp_path)
    assert str(raised.value) == (
        f"no values tree for chart kueue 0.19.3 in {tmp_path / 'charts' / 'kueue' / '0.19.3'}; "
        "run: gpuinfra schemas build <chart dir or kueue-0.19.3.tgz from helm pull>"
    )


def test_versions_check_names_a_bumped_chart_without_data(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    root.mkdir()
    text = (ROOT / "versions.yaml").read_text()
    assert 'kueue:\n  version: "0.19.2"' in text
    (root / "versions.yaml").write_text(
        text.replace('kueue:\n  version: "0.19.2"', 'kueue:\n  version: "0.19.3"')
    )
    result = run_cli("versions", "check", root=root)
    assert result.code == 1, result
    assert result.stderr.strip().splitlines() == [
        "error: versions.yaml: kueue.version: no values tree or CRD schemas for chart kueue "
        "0.19.3 in gpuinfra/data/charts/kueue/0.19.3; run: helm pull "
        "oci://registry.k8s.io/kueue/charts/kueue --version 0.19.3 && gpuinfra schemas build "
        "kueue-0.19.3.tgz"
    ]
    # The compatibility rules other commands enforce still pass: plan and diff keep working.
    assert versions.check(versions.load(root / "versions.yaml")) == []


def test_the_data_files_are_sorted_json_with_a_trailing_newline() -> None:
    for path in sorted(chartdata.DATA.glob("*/**/*.json")):
        text = path.read_text(encoding="utf-8")
        assert text.endswith("}\n"), path
        data = json.loads(text)
        assert list(data) == sorted(data), path


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ("counters", "4.6.0\n", "{csv}"),
            "VERSION '4.6.0\\n': not a DCGM exporter version (allowed: e.g. 4.6.0-4.8.3: a "
            "digit first, then letters, digits and . + _ -)",
        ),
        (
            ("api", "gateway-api\n", "1.6.1", "{csv}"),
            "NAME 'gateway-api\\n': not an API name (allowed: lowercase letters, digits and "
            "'-', e.g. gateway-api)",
        ),
        (
            ("api", "gateway-api", "1.6.1\n", "{csv}"),
            "VERSION '1.6.1\\n': not a release (allowed: e.g. 1.6.1: a digit first, then "
            "letters, digits and . + _ -)",
        ),
        (
            ("build", "{chart}", "--version", "1.2.3\n"),
            "--version '1.2.3\\n': not a chart version (allowed: e.g. 0.19.3)",
        ),
    ],
)
def test_a_newline_in_a_name_or_version_is_refused_and_nothing_is_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: tuple[str, ...], message: str
) -> None:
    """A trailing newline would become part of a directory name under the data directory."""
    chart_tree(tmp_path / "src")
    listing = tmp_path / "default-counters.csv"
    listing.write_text("DCGM_FI_DEV_GPU_TEMP, gauge, GPU temperature (in C).\n")
    places = {"csv": str(listing), "chart": str(tmp_path / "src" / "demo")}
    data = tmp_path / "data"
    args = [a.format(**places) for a in argv]
    code, out, err = run_main(capsys, "schemas", *args, "--out", str(data))
    assert (code, out, err.splitlines()) == (2, "", [f"error: {message}"])
    assert not data.exists()


def test_a_newline_in_chart_yamls_name_or_version_is_refused(tmp_path: Path) -> None:
    chart_tree(tmp_path)
    chart = tmp_path / "demo" / "Chart.yaml"
    for text in ('name: "demo\\n"\nversion: 1.2.3\n', 'name: demo\nversion: "1.2.3\\n"\n'):
        chart.write_text(text)
        with pytest.raises(UsageError) as caught:
            chartdata.read_chart(tmp_path / "demo")
        assert "\\n" in caught.value.message


BAD_CRD = "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\n"


@pytest.mark.parametrize(
    ("files", "message"),
    [
        (
            {"Chart.yaml/x": ""},
            "Chart.yaml: is a directory (allowed: a Helm chart, with its Chart.yaml at the top)",
        ),
        (
            {"Chart.yaml": "version: 1.2.3\n"},
            "Chart.yaml: name: missing (allowed: lowercase letters, digits and '-', "
            "e.g. gpu-operator)",
        ),
        (
            {"Chart.yaml": "name: [demo]\nversion: 1.2.3\n"},
            "Chart.yaml: name: ['demo'] is not a chart name (allowed: lowercase letters, digits "
            "and '-', e.g. gpu-operator)",
        ),
        (
            {"Chart.yaml": "name: demo\n"},
            "Chart.yaml: version: missing (allowed: e.g. 0.19.3; --version gives one for a "
            "development placeholder)",
        ),
        (
            {"Chart.yaml": "name: demo\nversion: [1]\n"},
            "Chart.yaml: version: '[1]' is not a version (allowed: e.g. 0.19.3; --version gives "
            "one for a development placeholder)",
        ),
        (
            {"Chart.yaml": CHART, "crds/a.yaml": BAD_CRD + "spec: 3\n"},
            "crds/a.yaml: not a CustomResourceDefinition with spec.group, spec.names.kind and "
            "named spec.versions (allowed: a CRD as apiextensions.k8s.io/v1 defines it)",
        ),
        (
            {
                "Chart.yaml": CHART,
                "crds/a.yaml": BAD_CRD
                + "spec:\n  versions:\n  - {name: v1, served: true, schema: {openAPIV3Schema: {}}}\n",
            },
            "crds/a.yaml: not a CustomResourceDefinition with spec.group, spec.names.kind and "
            "named spec.versions (allowed: a CRD as apiextensions.k8s.io/v1 defines it)",
        ),
    ],
)
def test_a_broken_chart_is_one_line_naming_the_file_and_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], files: dict[str, str], message: str
) -> None:
    chart = tmp_path / "chart"
    for relative, text in files.items():
        (chart / relative).parent.mkdir(parents=True, exist_ok=True)
        (chart / relative).write_text(text)
    data = tmp_path / "data"
    code, out, err = run_main(capsys, "schemas", "build", str(chart), "--out", str(data))
    assert (code, out, err.splitlines()) == (2, "", [f"error: {chart}: {message}"])
    assert not data.exists()


@pytest.mark.parametrize("link", ["", "dcgm-exporter", "dcgm-exporter/4.6.0/counters.json"])
def test_schemas_write_nothing_through_a_dangling_link(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], link: str
) -> None:
    listing = tmp_path / "default-counters.csv"
    listing.write_text("DCGM_FI_DEV_GPU_TEMP, gauge, GPU temperature (in C).\n")
    data = tmp_path / "data"
    target = tmp_path / "elsewhere"
    place = data / link if link else data
    place.parent.mkdir(parents=True, exist_ok=True)
    place.symlink_to(target)
    argv = ("schemas", "counters", "4.6.0", str(listing), "--out", str(data))
    code, out, err = run_main(capsys, *argv)
    (line,) = err.splitlines()
    assert (code, out) == (2, "")
    assert line.startswith(f"error: --out {data}: ") and f"link to {target}" in line, line
    assert not target.exists()


def test_a_counter_list_named_with_a_newline_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The file's name becomes the list's key in the data."""
    listing = tmp_path / "default\ncounters.csv"
    listing.write_text("DCGM_FI_DEV_GPU_TEMP, gauge, GPU temperature (in C).\n")
    data = tmp_path / "data"
    code, out, err = run_main(
        capsys, "schemas", "counters", "4.6.0", str(listing), "--out", str(data)
    )
    assert (code, out) == (2, "")
    (line,) = err.splitlines()
    assert line.endswith(
        "counters.csv': not a counter list's name (allowed: letters, digits, '.', '_' and '-', "
        "such as default-counters.csv or dcp-metrics-included.csv)"
    )
    assert not data.exists()


def test_a_directory_without_chart_yaml_is_refused_before_its_files_are_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A home directory given by mistake: reading its whole tree first could take minutes.
    (tmp_path / "notes.yaml").write_text("a: 1\n")

    def read_tree(root: Path) -> Any:
        raise AssertionError(f"{root} was read")

    monkeypatch.setattr(chartdata, "_directory_files", read_tree)
    with pytest.raises(UsageError, match=r"Chart\.yaml: missing"):
        chartdata.read_chart(tmp_path)

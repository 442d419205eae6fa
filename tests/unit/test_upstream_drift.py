"""The data and fixtures the repository carries are what their upstream sources give.

The only tests that read the upstream copies beside the repository (``../shared``, or
``$GPUINFRA_SHARED``): they regenerate each pinned chart's data and the DCGM counter lists from
them and compare byte for byte. A clone without those copies skips them and needs nothing else.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
from pathlib import Path

import pytest

from gpuinfra import chartdata
from gpuinfra.versions import pinned
from tests.conftest import ROOT

SHARED = Path(os.environ.get("GPUINFRA_SHARED") or ROOT.parent / "shared")
UPSTREAM = SHARED / "upstream"
H200_UPSTREAM = SHARED / "fixtures" / "nvidia-h200"
H200 = ROOT / "tests" / "fixtures" / "nvidia-h200"

# Chart name -> its folder in the upstream copies.
UPSTREAM_DIRS = {
    "alloy": "alloy",
    "gpu-operator": "gpu-operator",
    "keda": "keda",
    "kube-prometheus-stack": "kube-prometheus-stack",
    "kueue": "kueue",
    "loki": "loki",
    "nvidia-device-plugin": "k8s-device-plugin",
    "volcano": "volcano",
}

# Subcharts whose values gpuinfra sets, by parent chart; each is an upstream folder of its own.
SUBCHARTS = {"kube-prometheus-stack": ("kube-state-metrics",)}

needs_upstream = pytest.mark.skipif(
    not UPSTREAM.is_dir(), reason=f"no upstream copies at {UPSTREAM}: nothing to compare with"
)


def assert_same_files(written: list[Path], out: Path, fix: str) -> None:
    assert written
    for path in written:
        relative = path.relative_to(out)
        committed = chartdata.DATA / relative
        assert committed.is_file(), f"gpuinfra/data/{relative} is missing; run: {fix}"
        assert committed.read_bytes() == path.read_bytes(), (
            f"gpuinfra/data/{relative} differs from upstream; run: {fix}"
        )


@needs_upstream
@pytest.mark.parametrize(
    ("chart", "version"), [(c, v) for _, c, v, _ in chartdata.pinned_charts(pinned())]
)
def test_chart_data_matches_the_pinned_chart(tmp_path: Path, chart: str, version: str) -> None:
    folder = UPSTREAM / UPSTREAM_DIRS[chart]
    subcharts = SUBCHARTS.get(chart, ())
    if subcharts:
        # The upstream copies keep subcharts beside the chart; its archive holds them in charts/.
        assembled = tmp_path / "chart"
        shutil.copytree(folder, assembled)
        for sub in subcharts:
            shutil.copytree(UPSTREAM / sub, assembled / "charts" / sub)
        folder = assembled
    source = chartdata.read_chart(folder)
    if source.version.endswith("-devel"):
        # gpu-operator's source tree: its release sets the chart version when it publishes.
        source = dataclasses.replace(source, version=version)
    assert source.version.removeprefix("v") == version.removeprefix("v"), (
        f"{folder} holds {chart} {source.version}, versions.yaml pins {version}"
    )
    out = tmp_path / "data"
    written = chartdata.write(chartdata.chart_files(source), out)
    assert_same_files(written, out, f"gpuinfra schemas build {folder} --version {version}")


@needs_upstream
def test_dcgm_counters_match_the_exporters_lists(tmp_path: Path) -> None:
    version = pinned().dcgm_exporter.version
    lists = [UPSTREAM / "dcgm-exporter" / name for name in chartdata.COUNTER_LISTS]
    written = chartdata.write(chartdata.counter_files(version, lists), tmp_path)
    fix = f"gpuinfra schemas counters {version} {' '.join(map(str, lists))}"
    assert_same_files(written, tmp_path, fix)


@pytest.mark.skipif(
    not H200_UPSTREAM.is_dir(), reason=f"no H200 outputs at {H200_UPSTREAM}: nothing to compare"
)
def test_h200_fixtures_are_the_machines_outputs() -> None:
    copies = sorted(p for p in H200.iterdir() if p.name != "README.md")
    assert copies
    for copy in copies:
        original = H200_UPSTREAM / copy.name
        assert copy.read_bytes() == original.read_bytes(), f"{copy} differs from {original}"

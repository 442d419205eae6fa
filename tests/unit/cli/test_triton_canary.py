"""``gpuinfra triton canary``: a bad weight, group or state is one line, exit 2, and the file
is left as it was."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from gpuinfra import cli
from tests.conftest import ROOT

GROUPS = (
    "triton_gateway: {name: inference, namespace: gateways}\n"
    "triton_serving_groups:\n"
    "  - name: vision  # the ResNet's own pods\n"
    "    models: [resnet50]\n"
)


@pytest.fixture
def site(tmp_path: Path) -> Path:
    copy = tmp_path / "site"
    shutil.copytree(ROOT / "inventory" / "example", copy)
    variables = copy / "group_vars" / "all" / "triton.yml"
    variables.write_text(variables.read_text() + GROUPS)
    return copy


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = 0
    try:
        cli.main(["triton", "canary", *argv])
    except SystemExit as done:
        code = int(done.code or 0)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_a_weight_is_written_as_a_small_change(
    site: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    variables = site / "group_vars" / "all" / "triton.yml"
    code, out, _ = _run(capsys, "vision", "10", "--site", str(site))
    assert code == 0
    assert variables.read_text().endswith(
        "  - name: vision  # the ResNet's own pods\n"
        "    models: [resnet50]\n"
        "    canary:\n"
        "      weight: 10\n"
    )
    assert "+    canary:" in out
    code, _, _ = _run(capsys, "vision", "0", "--site", str(site))
    assert code == 0
    assert variables.read_text().endswith("      weight: 0\n")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (("vision", "101"), "error: WEIGHT: 101 is not a percentage (allowed: 0 to 100)"),
        (
            ("text", "10"),
            "triton.yml: no serving group 'text' in triton_serving_groups (groups: vision)",
        ),
        (("vision", "--remove"), "triton.yml: serving group 'vision' has no canary to remove"),
        (("vision", "10", "--remove"), "error: give exactly one of WEIGHT (0 to 100) or --remove"),
    ],
)
def test_bad_input_is_one_line_and_changes_nothing(
    site: Path, capsys: pytest.CaptureFixture[str], argv: tuple[str, ...], message: str
) -> None:
    variables = site / "group_vars" / "all" / "triton.yml"
    before = variables.read_text()
    code, _, err = _run(capsys, *argv, "--site", str(site))
    assert code == 2
    (line,) = err.strip().splitlines()
    assert message in line
    assert variables.read_text() == before


def test_a_canary_without_a_gateway_is_refused(
    site: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    variables = site / "group_vars" / "all" / "triton.yml"
    variables.write_text(variables.read_text().replace(GROUPS.splitlines()[0] + "\n", ""))
    before = variables.read_text()
    code, _, err = _run(capsys, "vision", "10", "--site", str(site))
    assert code == 2
    (line,) = err.strip().splitlines()
    assert "triton.yml: triton_serving_groups: serving group 'vision' has a canary" in line
    assert "set gateway" in line
    assert variables.read_text() == before

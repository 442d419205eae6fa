"""A warning is one line, whatever the terminal's width, and says what it says verbatim."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from gpuinfra import integrity, support, versions
from gpuinfra.cli import console
from gpuinfra.cli.review import diff_tables
from gpuinfra.review import diff as diff_mod
from tests.conftest import example_site_with_full_l4_quota, run_main

NARROW = 40
# A date on which several pins are past or near their end of support (test_support.py).
AS_OF = dt.date(2026, 12, 1)


@pytest.fixture
def narrow(monkeypatch: pytest.MonkeyPatch) -> None:
    """A 40-column terminal, as the consoles would see one."""
    monkeypatch.setenv("COLUMNS", str(NARROW))
    monkeypatch.setattr(console.out, "width", NARROW)
    monkeypatch.setattr(console.err, "width", NARROW)


def assert_one_line_each(output: str, expected: list[str]) -> None:
    lines = output.splitlines()
    assert expected
    assert any(len(line) > 120 for line in expected), "no warning long enough to wrap"
    for line in expected:
        assert line in lines, f"not one line: {line}"
    assert [line for line in lines if line.startswith("warning: ")] == expected


@pytest.mark.usefixtures("narrow")
def test_versions_check_warnings_are_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_main(capsys, "versions", "check", "--as-of", AS_OF.isoformat())
    assert (code, err) == (0, "")
    findings = support.check(versions.pinned(), AS_OF)
    expected = [f"warning: versions.yaml: {f}" for f in findings if f.state in ("past", "soon")]
    assert_one_line_each(out, expected)
    # The lines around them are plain lines, whole too.
    assert support.eks_ami_hint(versions.pinned()) in out.splitlines()


@pytest.mark.usefixtures("narrow")
def test_config_check_site_warnings_are_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Kueue granting all of the L4 host's GPUs beside Triton's replica: a long warning.
    site = example_site_with_full_l4_quota(tmp_path)
    code, out, err = run_main(capsys, "config", "check", "--site", str(site))
    assert (code, err) == (0, ""), err
    warnings = integrity.load_checked_site(site).warnings
    expected = [f"warning: {w.object} {w.path}: {w.message}" for w in warnings]
    assert_one_line_each(out, expected)


def test_diff_text_warnings_are_one_line_and_not_markup(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(console, "WIDTH", NARROW)
    long = (
        "nvidia_driver.releases[trixie]: 580.95.05 breaks rule [bold]cuda-minimum[/bold]: "
        "the pinned CUDA toolkit needs a driver of branch R580 or later, and this one is older"
    )
    report = diff_mod.Report(
        base="HEAD",
        base_commit="0" * 40,
        versions=diff_mod.VersionsDiff(warnings=(long,)),
        targets=(),
    )
    text = console.render_text(diff_tables(report))
    assert text.splitlines() == [f"warning: {long}"]

"""``gpuinfra addons render --out DIR`` owns the files it wrote in DIR: what it no longer
renders (an add-on turned off) goes on the next render; what else is in DIR stays."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuinfra.errors import excerpt
from tests.conftest import run_main, user_repo

KEDA_ON = "    keda:\n      enabled: true\n"
KEDA_OFF = "    keda:\n      enabled: false\n"


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return user_repo(tmp_path / "repo", monkeypatch)


def test_an_addon_turned_off_leaves_dir_on_the_next_render(
    repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = repo / "build" / "addons"
    out.mkdir(parents=True)
    (out / "NOTES.md").write_text("mine\n")
    code, stdout, err = run_main(
        capsys, "addons", "render", "--stack", "dev", "--out", "build/addons"
    )
    assert (code, err) == (0, ""), err
    assert (out / "keda" / "release.yaml").is_file()
    assert "keda" in stdout

    stack = repo / "stacks" / "Pulumi.dev.yaml"
    text = stack.read_text()
    assert KEDA_ON in text
    stack.write_text(text.replace(KEDA_ON, KEDA_OFF))
    (out / "gpu_operator" / "mine.txt").write_text("mine\n")
    code, stdout, err = run_main(
        capsys, "addons", "render", "--stack", "dev", "--out", "build/addons"
    )
    assert (code, err) == (0, ""), err
    assert not (out / "keda").exists()
    assert "removed 3 files an earlier render wrote and this one does not: keda/" in stdout
    # Files the render did not write are the user's.
    assert (out / "NOTES.md").read_text() == "mine\n"
    assert (out / "gpu_operator" / "mine.txt").read_text() == "mine\n"
    assert (out / "gpu_operator" / "values.yaml").is_file()
    owned = json.loads((out / ".gpuinfra-render.json").read_text())["files"]
    assert not any(f.startswith("keda/") for f in owned)
    assert "gpu_operator/values.yaml" in owned


def test_a_stale_addon_dir_holding_a_file_of_the_user_keeps_that_file(
    repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run_main(capsys, "addons", "render", "--stack", "dev", "--out", "out")[0] == 0
    (repo / "out" / "keda" / "keep.txt").write_text("mine\n")
    stack = repo / "stacks" / "Pulumi.dev.yaml"
    stack.write_text(stack.read_text().replace(KEDA_ON, KEDA_OFF))
    assert run_main(capsys, "addons", "render", "--stack", "dev", "--out", "out")[0] == 0
    assert sorted(p.name for p in (repo / "out" / "keda").iterdir()) == ["keep.txt"]


def test_a_manifest_naming_paths_outside_dir_deletes_nothing_there(
    repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = repo / "out"
    out.mkdir()
    outside = repo / "outside.txt"
    outside.write_text("mine\n")
    manifest = {"files": ["../outside.txt", str(outside), "", 3]}
    (out / ".gpuinfra-render.json").write_text(json.dumps(manifest))
    code, _, err = run_main(capsys, "addons", "render", "--stack", "dev", "--out", "out")
    assert (code, err) == (0, ""), err
    assert outside.read_text() == "mine\n"


def test_a_manifest_that_is_not_json_is_replaced(
    repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = repo / "out"
    out.mkdir()
    (out / ".gpuinfra-render.json").write_text("{not json")
    code, _, err = run_main(capsys, "addons", "render", "--stack", "dev", "--out", "out")
    assert (code, err) == (0, ""), err
    assert "keda/release.yaml" in json.loads((out / ".gpuinfra-render.json").read_text())["files"]


@pytest.mark.parametrize(
    ("link", "message"),
    [
        (
            "",
            "--out {out}: a link to {target}, which does not exist (allowed: a directory, or a "
            "path where one can be created)",
        ),
        (
            "kueue",
            "--out {out}: kueue is a link to {target}, which does not exist, and a file is "
            "written into it (remove the link)",
        ),
        (
            "kueue/objects.yaml",
            "--out {out}: kueue/objects.yaml is a link to {target} where a file is written, "
            "which the write would follow (remove the link)",
        ),
        (
            ".gpuinfra-render.json",
            "--out {out}: .gpuinfra-render.json is a link to {target} where a file is written, "
            "which the write would follow (remove the link)",
        ),
    ],
)
def test_a_dangling_link_in_out_is_one_line_and_nothing_is_written_through_it(
    repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], link: str, message: str
) -> None:
    out = repo / "build" / "addons"
    target = tmp_path / "elsewhere"
    place = out / link if link else out
    place.parent.mkdir(parents=True, exist_ok=True)
    place.symlink_to(target)
    code, stdout, err = run_main(capsys, "addons", "render", "--stack", "dev", "--out", str(out))
    assert (code, stdout) == (2, "")
    shown = {"out": excerpt(str(out), 80), "target": excerpt(str(target), 80)}
    assert err.splitlines() == ["error: " + message.format(**shown)]
    assert not target.exists()


def test_a_render_of_no_addon_into_a_new_directory_records_that_it_wrote_none(
    repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    stack = repo / "stacks" / "Pulumi.dev.yaml"
    text = stack.read_text().replace(KEDA_ON, KEDA_OFF)
    addons = "  gpuinfra:addons:\n"
    off = "".join(
        f"    {name}: {{enabled: false}}\n" for name in ("gpuOperator", "kueue", "prometheusStack")
    )
    head, tail = text.split(addons)
    # The add-ons the stack sets itself are dropped; every add-on is then off.
    kept = tail[tail.index("    keda:") :]
    stack.write_text(head + addons + off + kept)
    code, stdout, err = run_main(capsys, "addons", "render", "--stack", "dev", "--out", "fresh")
    assert (code, err) == (0, ""), err
    assert stdout.strip() == "wrote 0 files under fresh (add-ons: none)"
    assert json.loads((repo / "fresh" / ".gpuinfra-render.json").read_text())["files"] == []

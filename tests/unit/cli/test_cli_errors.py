"""The error contract, through the real CLI: one line per problem, exit code, no traceback."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.conftest import ROOT, run_cli


def copy_root(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    root.mkdir()
    shutil.copy(ROOT / "versions.yaml", root / "versions.yaml")
    return root


def edit_versions(root: Path, text_from: str, text_to: str) -> None:
    path = root / "versions.yaml"
    text = path.read_text()
    assert text_from in text
    path.write_text(text.replace(text_from, text_to, 1))


def assert_clean_error(result, code: int, lines: list[str]) -> None:
    assert result.code == code, result
    assert "Traceback" not in result.stderr + result.stdout
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert errors == [f"error: {line}" for line in lines]


def test_versions_check_passes_on_the_repository() -> None:
    result = run_cli("versions", "check")
    assert result.code == 0, result.stderr
    assert "all compatibility rules pass" in result.stdout


def test_versions_show_json_lists_every_component() -> None:
    import json

    result = run_cli("versions", "show", "--format", "json")
    assert result.code == 0
    rows = {row["component"]: row for row in json.loads(result.stdout)["versions"]}
    assert rows["kube_prometheus_stack"]["version"] == "88.5.3"
    assert rows["nvidia_driver.distro"]["from"].endswith("bookworm non-free")
    trixie = rows["nvidia_driver.distro.releases.trixie"]
    assert (trixie["version"], trixie["tag"]) == ("550.163.01", "550.163.01-2")
    assert trixie["from"].endswith("trixie non-free")
    assert rows["containerd.releases.trixie"]["tag"] == "1.7.24~ds1-6+deb13u1"


CUDA_13_1 = (
    "driver 580.159.04 is older than 590.44.01, the minimum for CUDA 13.1 (NVIDIA CUDA Toolkit "
    "Release Notes, Table 3 (Linux x86_64))"
)


@pytest.mark.parametrize(
    ("command", "text_from", "text_to", "code", "lines"),
    [
        pytest.param(
            "check",
            "kueue:\n  version:",
            "kueue:\n  channel: stable\n  version:",
            2,
            [
                "versions.yaml: kueue.channel: unknown key 'channel' (allowed: 'digest', 'note', "
                "'releases', 'source', 'tag' or 'version')"
            ],
            id="unknown-key",
        ),
        pytest.param(
            "show",
            "volcano:\n  version:",
            "volcano:\n  verison:",
            2,
            # One mistake, one line: the key it names is not also reported missing.
            ["versions.yaml: volcano.verison: unknown key 'verison'; did you mean 'version'?"],
            id="misspelled-key",
        ),
        pytest.param(
            "check",
            "packages: [containerd]",
            "packages: containerd",
            2,
            ["versions.yaml: containerd.source.packages: input should be a list, got 'containerd'"],
            id="wrong-type",
        ),
        pytest.param(
            "check",
            "source: {type: helm, repository: https://volcano",
            "source: {type: hlem, repository: https://volcano",
            2,
            [
                "versions.yaml: volcano.source.type: 'hlem' is not allowed; did you mean 'helm'? "
                "(allowed: 'apt', 'dnf', 'eks', 'eks-ami', 'helm', 'image' or 'preinstalled')"
            ],
            id="misspelled-choice",
        ),
        pytest.param(
            "check",
            'version: "0.19.2"',
            'version: "latest"',
            1,
            ["versions.yaml: kueue.version: 'latest' floats; pin an exact version"],
            id="floating-version",
        ),
        pytest.param(
            "check",
            'version: "13.0"',
            'version: "13.1"',
            1,
            [
                f"versions.yaml: nvidia_driver.cuda_repo.version: {CUDA_13_1}",
                f"versions.yaml: nvidia_driver.preinstalled.version: {CUDA_13_1}",
            ],
            id="driver-too-old-for-cuda",
        ),
    ],
)
def test_a_bad_pin_is_one_line_per_problem(
    tmp_path: Path, command: str, text_from: str, text_to: str, code: int, lines: list[str]
) -> None:
    root = copy_root(tmp_path)
    edit_versions(root, text_from, text_to)
    assert_clean_error(run_cli("versions", command, root=root), code, lines)


def test_yaml_syntax_error_names_the_line(tmp_path: Path) -> None:
    root = copy_root(tmp_path)
    (root / "versions.yaml").write_text("kueue:\n  version: [1.2\n")
    result = run_cli("versions", "check", root=root)
    assert result.code == 2
    assert "Traceback" not in result.stderr
    assert result.stderr.startswith("error: versions.yaml: line ")


def test_missing_versions_file(tmp_path: Path) -> None:
    result = run_cli("versions", "check", root=tmp_path)
    assert_clean_error(result, 2, ["versions.yaml: file not found"])


@pytest.mark.parametrize("argv", [["versions", "nope"], ["versions", "show", "--format", "xml"]])
def test_usage_errors_exit_2_without_traceback(argv: list[str]) -> None:
    result = run_cli(*argv)
    assert result.code == 2
    assert "Traceback" not in result.stderr


def test_unknown_stack_suggests_a_name(tmp_path: Path) -> None:
    root = copy_root(tmp_path)
    (root / "stacks").mkdir()
    (root / "stacks" / "Pulumi.dev.yaml").write_text(yaml.safe_dump({"config": {}}))
    result = run_cli("config", "check", "--stack", "dve", root=root)
    assert_clean_error(
        result,
        2,
        ["no stack 'dve' (stacks/Pulumi.dve.yaml not found); did you mean 'dev'?; stacks: dev"],
    )


def test_a_missing_tool_is_exit_3(tmp_path: Path) -> None:
    """The machine, not the input: git is not on PATH for `diff`."""
    env = {k: v for k, v in os.environ.items() if k != "GPUINFRA_ROOT"}
    env["PATH"] = str(tmp_path)  # nothing in it: no git
    proc = subprocess.run(
        [sys.executable, "-m", "gpuinfra", "diff", "--base", "HEAD"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 3, proc.stderr
    assert proc.stderr.strip() == "error: git is not installed; gpuinfra diff needs it"


def test_a_defect_is_exit_70_with_its_traceback(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from gpuinfra import cli, versions

    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("boom")

    monkeypatch.setattr(versions, "load", broken)
    with pytest.raises(SystemExit) as caught:
        cli.main(["versions", "check"])
    assert caught.value.code == 70
    stderr = capsys.readouterr().err
    assert "Traceback" in stderr
    assert stderr.strip().splitlines()[-1] == (
        "error: internal error: RuntimeError: boom; this is a defect in gpuinfra"
    )


def test_diff_outside_a_git_repository_says_so(tmp_path: Path) -> None:
    shutil.copy(ROOT / "Pulumi.yaml", tmp_path / "Pulumi.yaml")
    shutil.copy(ROOT / "versions.yaml", tmp_path / "versions.yaml")
    result = run_cli("diff", "--base", "HEAD", root=tmp_path, cwd=tmp_path)
    assert_clean_error(
        result,
        2,
        [
            f"{tmp_path.resolve()}: not a git repository; gpuinfra diff compares a commit with "
            "the working tree"
        ],
    )


def test_output_read_only_in_part_ends_quietly_with_exit_141() -> None:
    """``gpuinfra ... | head -1``: the reader leaves after one line, as SIGPIPE would end it."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpuinfra", "addons", "render", "--stack", "prod"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        # A pipe smaller than the document: the command is still writing when the reader leaves.
        pipesize=4096,
    )
    assert proc.stdout is not None and proc.stderr is not None
    assert proc.stdout.readline().startswith(b"# --- ")
    proc.stdout.close()
    stderr = proc.stderr.read()
    assert (proc.wait(timeout=120), stderr) == (141, b"")

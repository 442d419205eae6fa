"""``gpuinfra addons role-files --roles DIR``: DIR must be a roles directory that exists, and
the files it names are the paths a user can open."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from gpuinfra.addons import ADDONS
from tests.conftest import ROOT, run_main


@pytest.fixture
def roles(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The add-on roles' generated files, copied; kueue's defaults stale. The command runs from
    another directory, so that paths show as given."""
    copy = tmp_path / "roles"
    for addon in ADDONS:
        for part in ("defaults", "meta"):
            shutil.copytree(ROOT / "roles" / addon / part, copy / addon / part)
    stale = copy / "kueue" / "defaults" / "main.yml"
    stale.write_text(stale.read_text() + "# edited by hand\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.setenv("GPUINFRA_ROOT", str(ROOT))
    monkeypatch.chdir(elsewhere)
    return copy


@pytest.mark.parametrize("check", [False, True])
def test_a_roles_dir_that_does_not_exist_is_one_line_and_not_created(
    check: bool, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "no" / "roles"
    code, out, err = run_main(
        capsys, "addons", "role-files", *(["--check"] if check else []), "--roles", str(missing)
    )
    assert (code, out) == (2, "")
    (line,) = err.splitlines()
    assert line.startswith(f"error: --roles {missing}: no such directory (allowed: a roles ")
    assert not (tmp_path / "no").exists()


def test_a_file_given_as_roles_is_not_a_directory(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    readme = tmp_path / "README.md"
    readme.write_text("# readme\n")
    code, out, err = run_main(capsys, "addons", "role-files", "--check", "--roles", str(readme))
    assert (code, out) == (2, "")
    (line,) = err.splitlines()
    assert line.startswith(f"error: --roles {readme}: not a directory (allowed: a roles ")
    assert readme.read_text() == "# readme\n"


def test_paths_written_and_stale_keep_their_leading_slash(
    roles: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    stale = roles / "kueue" / "defaults" / "main.yml"
    code, out, err = run_main(capsys, "addons", "role-files", "--check", "--roles", str(roles))
    assert code == 1
    assert err.splitlines() == [
        f"error: {stale}: stale, not what the settings model gives; "
        "run `gpuinfra addons role-files`"
    ]
    code, out, err = run_main(capsys, "addons", "role-files", "--roles", str(roles))
    assert (code, err) == (0, "")
    assert out.splitlines() == [f"wrote {stale}"]
    assert stale.read_text() == (ROOT / "roles" / "kueue" / "defaults" / "main.yml").read_text()
    code, out, err = run_main(capsys, "addons", "role-files", "--check", "--roles", str(roles))
    assert (code, err) == (0, "")
    assert out.splitlines() == [f"role files under {roles} are up to date"]


@pytest.mark.parametrize("check", [False, True])
@pytest.mark.parametrize("value", ["", " "])
def test_an_empty_roles_value_is_refused(
    value: str, check: bool, capsys: pytest.CaptureFixture[str]
) -> None:
    """An unset shell variable must not mean the current directory."""
    flags = ["--check"] if check else []
    code, out, err = run_main(capsys, "addons", "role-files", *flags, "--roles", value)
    assert (code, out) == (2, "")
    assert err.splitlines() == [
        "error: gpuinfra addons role-files: invalid value for '--roles': "
        f"{value!r} is empty (allowed: a roles directory holding the add-on roles, e.g. roles) "
        "(see gpuinfra addons role-files --help)"
    ]


def _in_the_way(roles: Path, tmp_path: Path, kind: str) -> str:
    target = roles / "kueue" / "defaults" / "main.yml"
    target.unlink()
    if kind == "directory":
        target.mkdir()
        return (
            "kueue/defaults/main.yml: a directory where the generated file is written (allowed: "
            "a plain file or none; move the directory away)"
        )
    if kind == "dangling link":
        target.symlink_to(tmp_path / "outside.yml")
        return (
            f"kueue/defaults/main.yml: a link, which the write would follow to "
            f"{tmp_path / 'outside.yml'} (allowed: a plain file or none; remove the link)"
        )
    shutil.rmtree(target.parent)
    target.parent.write_text("")
    return (
        "kueue/defaults/main.yml: kueue/defaults is not a directory and the file is written into "
        "it (allowed: the role's folder; move the file away)"
    )


@pytest.mark.parametrize("kind", ["directory", "dangling link", "file as folder"])
def test_a_path_in_the_way_is_one_line_and_nothing_is_written(
    roles: Path, tmp_path: Path, kind: str, capsys: pytest.CaptureFixture[str]
) -> None:
    message = _in_the_way(roles, tmp_path, kind)
    other = roles / "triton" / "defaults" / "main.yml"
    other.write_text("# edited by hand\n")
    code, out, err = run_main(capsys, "addons", "role-files", "--roles", str(roles))
    assert (code, out) == (2, "")
    assert err.splitlines() == [f"error: --roles {roles}: {message}"]
    assert other.read_text() == "# edited by hand\n"
    assert not (tmp_path / "outside.yml").exists()

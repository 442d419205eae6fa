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

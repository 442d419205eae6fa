"""A model's settings written into the file that declares it: the edit, and a name not there."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from gpuinfra import modeledit
from gpuinfra.errors import UsageError
from tests.conftest import ROOT


@pytest.fixture
def where(tmp_path: Path) -> modeledit.TritonFile:
    site = tmp_path / "site"
    shutil.copytree(ROOT / "inventory" / "example", site)
    return modeledit.TritonFile.site(site / "group_vars" / "all" / "triton.yml", "models")


def test_a_models_settings_change_and_nothing_else(where: modeledit.TritonFile) -> None:
    before, after = modeledit.edit(where, "resnet50", {"instance_group": {"count": 3}})
    assert before == where.path.read_text(), "nothing is written"
    changed = [
        (old, new)
        for old, new in zip(before.splitlines(), after.splitlines(), strict=True)
        if old != new
    ]
    assert [new.strip() for _, new in changed] == ["count: 3"]


def test_a_model_the_file_does_not_declare_is_one_line(where: modeledit.TritonFile) -> None:
    with pytest.raises(UsageError) as refused:
        modeledit.edit(where, "bert", {"max_batch_size": 8})
    assert str(refused.value).endswith(
        "triton.yml: no model 'bert' in triton_models (models: resnet50)"
    )

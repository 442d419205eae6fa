"""A model's settings written into the file that declares it: the edit, and a name not there."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

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


ALIASED_BATCHING = """\
triton_models:
  - name: resnet50
    backend: onnxruntime
    max_batch_size: 8
    dynamic_batching: &batching
      max_queue_delay_microseconds: 200
  - name: bert
    backend: onnxruntime
    max_batch_size: 8
    dynamic_batching: *batching
"""
# bert merges resnet50's mapping, its batch size included.
MERGED_MODEL = """\
triton_models:
  - &resnet50
    name: resnet50
    backend: onnxruntime
    max_batch_size: 8
  - <<: *resnet50
    name: bert
"""


def _declaring(tmp_path: Path, text: str) -> modeledit.TritonFile:
    path = tmp_path / "triton.yml"
    path.write_text(text)
    return modeledit.TritonFile.site(path, "models")


@pytest.mark.parametrize(
    ("text", "model", "values", "path"),
    [
        (
            ALIASED_BATCHING,
            "resnet50",
            {"dynamic_batching": {"max_queue_delay_microseconds": 100}},
            "triton_models[0].dynamic_batching",
        ),
        (
            ALIASED_BATCHING,
            "bert",
            {"dynamic_batching": {"preferred_batch_size": None}},
            "triton_models[1].dynamic_batching",
        ),
        (MERGED_MODEL, "bert", {"max_batch_size": 16}, "triton_models[1].max_batch_size"),
        (MERGED_MODEL, "resnet50", {"instance_group": {"count": 3}}, "triton_models[0]"),
    ],
)
def test_settings_the_file_shares_through_an_anchor_are_refused(
    tmp_path: Path, text: str, model: str, values: dict[str, Any], path: str
) -> None:
    where = _declaring(tmp_path, text)
    message = (
        f"{where.path}: {path} is shared through a YAML anchor (alias or << merge key), so the "
        "edit would change every place using it; write it out in full there first"
    )
    for check in (modeledit.edit, modeledit.check_shared):
        with pytest.raises(UsageError) as refused:
            check(where, model, values)
        assert str(refused.value) == message
    assert where.path.read_text() == text


def test_settings_beside_a_shared_one_are_edited(tmp_path: Path) -> None:
    where = _declaring(tmp_path, ALIASED_BATCHING)
    before, after = modeledit.edit(where, "bert", {"instance_group": {"count": 3}})
    assert after == before + "    instance_group:\n      count: 3\n"

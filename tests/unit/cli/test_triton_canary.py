"""``gpuinfra triton canary``: a bad weight, group or state is one line, exit 2, and the file
is left as it was."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.conftest import ROOT, run_main

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


def test_a_weight_is_written_as_a_small_change(
    site: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    variables = site / "group_vars" / "all" / "triton.yml"
    code, out, _ = run_main(capsys, "triton", "canary", "vision", "10", "--site", str(site))
    assert code == 0
    assert variables.read_text().endswith(
        "  - name: vision  # the ResNet's own pods\n"
        "    models: [resnet50]\n"
        "    canary:\n"
        "      weight: 10\n"
    )
    assert "+    canary:" in out
    code, _, _ = run_main(capsys, "triton", "canary", "vision", "0", "--site", str(site))
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
    code, _, err = run_main(capsys, "triton", "canary", *argv, "--site", str(site))
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
    code, _, err = run_main(capsys, "triton", "canary", "vision", "10", "--site", str(site))
    assert code == 2
    (line,) = err.strip().splitlines()
    assert "triton.yml: triton_serving_groups: serving group 'vision' has a canary" in line
    assert "set gateway" in line
    assert variables.read_text() == before


def test_a_site_without_serving_groups_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    copy = tmp_path / "plain"
    shutil.copytree(ROOT / "inventory" / "example", copy)
    code, _, err = run_main(capsys, "triton", "canary", "vision", "10", "--site", str(copy))
    assert code == 2
    assert err.strip() == "error: plain: no triton_serving_groups in the site's variables"


STACK_TAIL = """\
    triton:
      enabled: true
      modelRepository: {s3: "s3://models/repo"}
      gpuType: l4
      cpu: "2"
      memory: 8Gi
      gateway: {name: inference}
      models:
        - {name: resnet50, backend: onnxruntime}
      servingGroups:
        - name: vision  # the ResNet's own pods
          models: [resnet50]
"""


def _stack(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tail: str) -> Path:
    for name in ("versions.yaml", "Pulumi.yaml"):
        shutil.copy(ROOT / name, tmp_path / name)
    for name in ("stacks", "policies"):
        shutil.copytree(ROOT / name, tmp_path / name, ignore=shutil.ignore_patterns("__pycache__"))
    stack = tmp_path / "stacks" / "Pulumi.dev.yaml"
    stack.write_text(stack.read_text() + tail)
    monkeypatch.setenv("GPUINFRA_ROOT", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    return stack


def test_a_stacks_group_gets_its_canary_in_the_stack_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    stack = _stack(tmp_path, monkeypatch, STACK_TAIL)
    code, out, err = run_main(capsys, "triton", "canary", "vision", "25", "--stack", "dev")
    assert code == 0, err
    assert stack.read_text().endswith(
        "        - name: vision  # the ResNet's own pods\n"
        "          models: [resnet50]\n"
        "          canary:\n"
        "            weight: 25\n"
    )
    assert "+          canary:" in out
    code, _, err = run_main(capsys, "triton", "canary", "bert", "25", "--stack", "dev")
    assert code == 2
    assert "no serving group 'bert' in config.gpuinfra:addons.triton.servingGroups" in err


# config check refuses this stack: triton-bert asks for 16Gi (Triton's default) on an l4 node
# (g6.xlarge) that allocates 14.5Gi.
TOO_LARGE = """\
    triton:
      enabled: true
      modelRepository: {s3: "s3://models/repo"}
      gpuType: l4
      gateway: {name: inference}
      models:
        - {name: bert, backend: onnxruntime}
      servingGroups: [{name: bert, models: [bert], cpu: "2"}]
"""
MISFIT = "memory 16.0Gi requested, 14.5Gi allocatable"


@pytest.mark.parametrize("argv", [("25",), ("25", "--dry-run"), ("0",)])
def test_a_stack_config_check_refuses_is_not_written(
    argv: tuple[str, ...],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    stack = _stack(tmp_path, monkeypatch, TOO_LARGE)
    before = stack.read_text()
    checked = run_main(capsys, "config", "check", "--stack", "dev")
    assert checked[0] == 2 and MISFIT in checked[2]
    code, out, err = run_main(capsys, "triton", "canary", "bert", *argv, "--stack", "dev")
    assert (code, out) == (2, "")
    lines = err.strip().splitlines()
    # One line per problem, as config check gives them: the group and its new canary.
    assert lines, err
    for line in lines:
        assert line.startswith("error: stacks/Pulumi.dev.yaml: Deployment triton/triton-bert")
        assert MISFIT in line
    assert stack.read_text() == before


def test_a_site_config_check_refuses_is_not_written(
    site: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The vision group asks for a MIG slice no host's layout gives: refused, named in the
    site's own file, whichever directory the check read."""
    variables = site / "group_vars" / "all" / "triton.yml"
    variables.write_text(variables.read_text() + "    gpuResource: nvidia.com/mig-3g.71gb\n")
    before = variables.read_text()
    assert run_main(capsys, "config", "check", "--site", str(site))[0] == 2
    code, out, err = run_main(capsys, "triton", "canary", "vision", "10", "--site", str(site))
    assert (code, out) == (2, "")
    lines = err.strip().splitlines()
    assert lines, err
    for line in lines:
        assert line.startswith(f"error: {site}: Deployment triton/triton-vision"), line
        assert "no declared node can run it" in line
    assert "gpuinfra-edit-" not in err
    assert variables.read_text() == before


def test_groups_in_the_inventory_files_all_vars_are_edited_there(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Add-on settings may stand in hosts.yml's ``all: vars``: the canary is written there."""
    copy = tmp_path / "site"
    shutil.copytree(ROOT / "inventory" / "example", copy)
    hosts = copy / "hosts.yml"
    hosts.write_text(
        hosts.read_text()
        + "all:\n  vars:\n"
        + "".join(f"    {line}\n" for line in GROUPS.splitlines())
    )
    code, out, err = run_main(capsys, "triton", "canary", "vision", "10", "--site", str(copy))
    assert code == 0, err
    assert hosts.read_text().endswith(
        "    triton_serving_groups:\n"
        "      - name: vision  # the ResNet's own pods\n"
        "        models: [resnet50]\n"
        "        canary:\n"
        "          weight: 10\n"
    )
    assert "+        canary:" in out


# A second model, for a second group (the example's triton_models ends the file).
BERT = "  - name: bert\n    backend: onnxruntime\n"
GATEWAY = "triton_gateway: {name: inference, namespace: gateways}\n"
ALIASED_CANARY = """\
triton_serving_groups:
  - name: vision
    models: [resnet50]
    canary: &canary {weight: 10}
  - name: text
    models: [bert]
    canary: *canary
"""
# text merges vision's mapping, canary included.
MERGED_CANARY = """\
triton_serving_groups:
  - &vision
    name: vision
    models: [resnet50]
    canary: {weight: 10}
  - <<: *vision
    name: text
    models: [bert]
"""
# text merges vision's mapping and has a canary of its own.
MERGED_GROUP = """\
triton_serving_groups:
  - &vision
    name: vision
    models: [resnet50]
    memory: 8Gi
  - <<: *vision
    name: text
    models: [bert]
    canary: {weight: 10}
"""


def _two_groups(tmp_path: Path, groups: str) -> Path:
    copy = tmp_path / "site"
    shutil.copytree(ROOT / "inventory" / "example", copy)
    variables = copy / "group_vars" / "all" / "triton.yml"
    variables.write_text(variables.read_text() + BERT + GATEWAY + groups)
    return variables


@pytest.mark.parametrize(
    ("groups", "argv", "path"),
    [
        (ALIASED_CANARY, ("vision", "30"), "triton_serving_groups[0].canary"),
        (ALIASED_CANARY, ("text", "0"), "triton_serving_groups[1].canary"),
        (MERGED_CANARY, ("text", "30"), "triton_serving_groups[1].canary"),
        (MERGED_CANARY, ("vision", "30"), "triton_serving_groups[0].canary"),
        # Removed from text, vision's canary would still come through the merge.
        (MERGED_CANARY, ("text", "--remove"), "triton_serving_groups[1].canary"),
        (MERGED_CANARY, ("vision", "--remove"), "triton_serving_groups[0]"),
        # A canary added to vision would be text's too.
        (MERGED_GROUP, ("vision", "30"), "triton_serving_groups[0]"),
    ],
)
def test_a_canary_the_file_shares_through_an_anchor_is_refused(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    groups: str,
    argv: tuple[str, ...],
    path: str,
) -> None:
    variables = _two_groups(tmp_path, groups)
    before = variables.read_text()
    code, out, err = run_main(
        capsys, "triton", "canary", *argv, "--site", str(variables.parents[2])
    )
    assert (code, out) == (2, "")
    assert err == (
        f"error: {variables}: {path} is shared through a YAML anchor (alias or << merge key), so "
        "the edit would change every place using it; write it out in full there first\n"
    )
    assert variables.read_text() == before


def test_a_canary_of_its_own_beside_a_merge_key_is_edited(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    variables = _two_groups(tmp_path, MERGED_GROUP)
    before = variables.read_text()
    code, out, err = run_main(
        capsys, "triton", "canary", "text", "30", "--site", str(variables.parents[2])
    )
    assert code == 0, err
    assert variables.read_text() == before.replace(
        "    canary: {weight: 10}\n", "    canary: {weight: 30}\n"
    )
    assert "+    canary: {weight: 30}" in out


def test_a_canary_for_triton_turned_off_is_written_with_a_warning(
    site: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    variables = site / "group_vars" / "all" / "triton.yml"
    variables.write_text(
        variables.read_text().replace("triton_enabled: true", "triton_enabled: false")
    )
    code, out, _ = run_main(capsys, "triton", "canary", "vision", "10", "--site", str(site))
    assert code == 0
    assert out.splitlines()[0] == (
        "warning: Triton is off (triton_enabled: false): no route carries this weight until it "
        "is on"
    )
    assert variables.read_text().endswith("    canary:\n      weight: 10\n")
    # Turned on, the same change is quiet.
    variables.write_text(
        variables.read_text().replace("triton_enabled: false", "triton_enabled: true")
    )
    code, out, _ = run_main(capsys, "triton", "canary", "vision", "20", "--site", str(site))
    assert code == 0
    assert "warning:" not in out

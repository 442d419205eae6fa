"""MIG layouts against the GPU models that take them: the profile table, and the integrity rule
that refuses a layout a node's GPUs cannot take."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from gpuinfra import addons, config, gpus, integrity
from tests.conftest import ROOT, run_cli
from tests.unit.test_integrity import site_copy, site_findings, stack

H200_LGIP = ROOT / "tests" / "fixtures" / "nvidia-h200" / "mig-lgip.txt"


def test_the_h200_row_is_what_nvidia_smi_lists_on_an_h200() -> None:
    # "|   0  MIG 1g.18gb         19     7/7        16.00 ..." : name, profile ID, free/total.
    listed = {
        name: int(total)
        for name, total in re.findall(r"MIG (\S+)\s+\d+\s+\d+/(\d+)", H200_LGIP.read_text())
    }
    (h200,) = gpus.MIG_GPUS["h200"]
    assert listed == {name: profile.most for name, profile in h200.profiles.items()}


def test_every_gpu_model_with_a_driver_branch_is_either_mig_capable_or_not() -> None:
    no_mig = set(gpus.GPU_MIN_BRANCH) - set(gpus.MIG_GPUS)
    assert no_mig == {"a10", "a10g", "a40", "l4", "l40", "l40s"}
    assert gpus.mig_layout_problem("l4", None, "split", {"1g.10gb": 7}).startswith(
        "its L4 GPUs have no MIG, so the MIG manager cannot apply the layout split"
    )


@pytest.mark.parametrize(
    ("model", "memory", "layout", "problem"),
    [
        ("h100", 80, {"1g.10gb": 7}, ""),
        ("h100", 80, {"3g.40gb": 1, "4g.40gb": 1}, ""),
        ("h100", 80, {"2g.20gb": 3, "1g.10gb": 1}, ""),
        ("h200", 141, {"1g.18gb": 7}, ""),
        ("a30", 24, {"2g.12gb": 2}, ""),
        # An A100 of unknown size (a site's host): 1g.10gb is a profile of both sizes, seven of
        # it fit only the 80 GB one.
        ("a100", None, {"1g.10gb": 7}, ""),
        (
            "h200",
            141,
            {"1g.10gb": 7},
            "the MIG layout split has 1g.10gb, which the H200 (141 GB) does not offer (allowed: "
            "1g.18gb, 1g.18gb+me, 1g.35gb, 2g.35gb, 3g.71gb, 4g.71gb, 7g.141gb; "
            f"{gpus.MIG_TABLE_SOURCE})",
        ),
        (
            "h100",
            80,
            {"4g.40gb": 2},
            "the MIG layout split has 2 of 4g.40gb, and one H100 (80 GB) holds at most 1",
        ),
        (
            "h100",
            80,
            {"3g.40gb": 2, "1g.10gb": 1},
            "the MIG layout split takes 7 compute and 9 memory slices of each H100 (80 GB), "
            "which has 7 and 8",
        ),
        (
            "a100",
            40,
            {"1g.10gb": 7},
            "the MIG layout split has 7 of 1g.10gb, and one A100 (40 GB) holds at most 4",
        ),
        # A model outside the tables is not judged.
        ("rtx6000", None, {"1g.10gb": 7}, ""),
    ],
)
def test_a_layout_is_judged_against_the_gpu_s_profiles(
    model: str, memory: int | None, layout: dict[str, int], problem: str
) -> None:
    assert gpus.mig_layout_problem(model, memory, "split", layout) == problem


def _prod_split(layout: dict[str, int]) -> config.StackConfig:
    """prod (p5.48xlarge H100s and g6e.2xlarge L40S) with every GPU split by ``layout``."""
    operator = {"migStrategy": "mixed", "migProfiles": {"split": layout}}
    return stack("prod", gpuOperator={**operator, "migDefaultProfile": "split"})


def _mig_findings(cfg: config.StackConfig) -> list[tuple[str, str, str]]:
    found = integrity.check(integrity.stack_state(cfg, addons.render_all(cfg.addons)))
    return [(f.severity, f.object, f.path) for f in found if f.rule == "mig"]


def test_a_stack_whose_default_layout_reaches_an_l40s_pool_is_an_error() -> None:
    assert _mig_findings(_prod_split({"1g.10gb": 7})) == [
        ("error", "node pool serving", "gpuOperator.migDefaultProfile")
    ]


def test_a_layout_an_h100_pool_cannot_take_is_an_error_at_its_label() -> None:
    cfg = _prod_split({"1g.18gb": 7})
    pools = [
        p.model_copy(update={"labels": {**p.labels, "nvidia.com/mig.config": "split"}})
        if p.name == "h100"
        else p.model_copy(update={"labels": {**p.labels, "nvidia.com/mig.config": "all-disabled"}})
        for p in cfg.node_pools
    ]
    cfg = cfg.model_copy(update={"node_pools": pools})
    assert _mig_findings(cfg) == [("error", "node pool h100", "labels.nvidia.com/mig.config")]


def test_a_site_host_whose_gpu_has_no_mig_is_an_error(tmp_path: Path) -> None:
    labels = {"nvidia.com/mig.config": "inference"}
    host: dict[str, Any] = {
        "gpu_node_registration_labels": labels,
        "gpu_node_registration_gpu_type": "l4",
        "gpu_node_check_mig_mode": "enabled",
    }
    site = site_copy(tmp_path, {"gpu-node-01": host})
    found = [f for f in site_findings(site) if f.rule == "mig"]
    assert [(f.severity, f.object, f.path) for f in found] == [
        ("error", "host gpu-node-01", "gpu_node_registration_labels")
    ]
    assert "its L4 GPUs have no MIG" in found[0].message


def test_config_check_refuses_an_l4_pool_split_by_mig(tmp_path: Path) -> None:
    from tests.unit.test_stacks import edit_dev, repo_copy

    root = repo_copy(tmp_path)
    edit_dev(
        root,
        "      rootVolumeGib: 150\n",
        "      rootVolumeGib: 150\n      labels: {nvidia.com/mig.config: inference}\n",
    )
    edit_dev(
        root,
        "      driverMode: host\n",
        "      driverMode: host\n      migStrategy: single\n"
        "      migProfiles: {inference: {1g.10gb: 7}}\n",
    )
    result = run_cli("config", "check", "--stack", "dev", root=root, cwd=root)
    assert (result.code, result.stdout) == (2, "")
    assert result.stderr.splitlines() == [
        "error: stacks/Pulumi.dev.yaml: node pool l4 labels.nvidia.com/mig.config: its L4 GPUs "
        "have no MIG, so the MIG manager cannot apply the layout inference and leaves them "
        "whole (MIG: A100, A30, H100, H200)"
    ]

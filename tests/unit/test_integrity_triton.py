"""Triton on a MIG slice: the integrity check follows the GPU resource each pod requests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from gpuinfra import config, integrity
from tests.unit.test_integrity import findings, only, site_copy, site_findings, stack


def _triton_on_h100_slices(site: Path) -> None:
    variables = site / "group_vars" / "all" / "triton.yml"
    settings = yaml.safe_load(variables.read_text())
    settings |= {"triton_gpu_type": "h100", "triton_gpu_resource": "nvidia.com/mig-1g.10gb"}
    variables.write_text(yaml.safe_dump(settings))


def test_a_mig_slice_fits_a_host_split_by_a_mig_layout(tmp_path: Path) -> None:
    labels = {"nvidia.com/mig.config": "inference"}
    site = site_copy(
        tmp_path,
        {
            "gpu-node-01": {
                "gpu_node_registration_labels": labels,
                "gpu_node_check_mig_mode": "enabled",
            }
        },
    )
    _triton_on_h100_slices(site)
    assert only(site_findings(site), "scheduling") == []


def test_a_mig_slice_no_host_offers_is_an_error(tmp_path: Path) -> None:
    site = site_copy(tmp_path, {})
    _triton_on_h100_slices(site)
    (error,) = only(site_findings(site), "scheduling")
    assert error.object == "Deployment triton/triton"
    assert "host gpu-node-01: nvidia.com/mig-1g.10gb 1 requested, 0 allocatable" in error.message


# --- serving groups on a stack: a node pool declares its MIG layout by the label the GPU
# Operator's MIG manager reads (nvidia.com/mig.config=<layout from gpuOperator.migProfiles>).

_MIG_OPERATOR = {
    "migStrategy": "mixed",
    "migProfiles": {"half": {"3g.71gb": 2}},
    "migDefaultProfile": "all-disabled",
}
_GROUPS = {
    "enabled": True,
    "modelRepository": {"s3": "s3://models-prod/triton"},
    "models": [
        {"name": "bert", "backend": "onnxruntime"},
        {"name": "resnet50", "backend": "onnxruntime"},
    ],
    "servingGroups": [
        {"name": "text", "models": ["bert"], "gpuType": "l40s"},
        {
            "name": "vision",
            "models": ["resnet50"],
            "gpuType": "h100",
            "gpuResource": "nvidia.com/mig-3g.71gb",
        },
    ],
}


def _prod(pool_labels: dict[str, str], **addons: Any) -> config.StackConfig:
    cfg = stack("prod", gpuOperator=_MIG_OPERATOR, triton=_GROUPS, **addons)
    pools = [
        p.model_copy(update={"labels": pool_labels}) if p.name == "h100" else p
        for p in cfg.node_pools
    ]
    return cfg.model_copy(update={"node_pools": pools})


def test_a_group_on_a_mig_slice_fits_a_pool_that_declares_the_layout() -> None:
    cfg = _prod({"nvidia.com/mig.config": "half"})
    nodes = {n.name: n for n in integrity.stack_nodes(cfg)}
    # p5.48xlarge: 8 H100s, each split into two 3g slices.
    assert nodes["node pool h100"].allocatable["nvidia.com/mig-3g.71gb"] == 16
    assert nodes["node pool h100"].allocatable["nvidia.com/gpu"] == 0
    assert only(findings(cfg), "scheduling") == []


def test_a_group_on_a_mig_slice_no_pool_offers_is_refused() -> None:
    (error,) = only(findings(_prod({})), "scheduling")
    assert error.severity == "error"
    assert error.object == "Deployment triton/triton-vision"
    assert "node pool h100: nvidia.com/mig-3g.71gb 1 requested, 0 allocatable" in error.message


def test_kueue_covers_the_mig_slices_the_flavor_gives_quota_of() -> None:
    flavors = [
        # The pool's EFA interfaces covered, as prod covers them: only the slices are in question.
        {"gpuType": "h100", "gpus": 0, "cpu": "190", "memory": "2000Gi", "efaInterfaces": 32},
        {"gpuType": "l40s", "gpus": 4, "cpu": "31", "memory": "248Gi"},
    ]
    uncovered = only(
        findings(_prod({"nvidia.com/mig.config": "half"}, kueue={"flavors": flavors})), "quotas"
    )
    assert any(
        "offer nvidia.com/mig-3g.71gb, which the queue does not cover" in f.message
        for f in uncovered
    )
    flavors[0]["migSlices"] = {"3g.71gb": 16}
    covered = only(
        findings(_prod({"nvidia.com/mig.config": "half"}, kueue={"flavors": flavors})), "quotas"
    )
    assert not any("does not cover" in f.message for f in covered)
    flavors[0]["migSlices"] = {"3g.71gb": 40}
    (error,) = [
        f
        for f in only(
            findings(_prod({"nvidia.com/mig.config": "half"}, kueue={"flavors": flavors})), "quotas"
        )
        if f.severity == "error" and f.object == "ClusterQueue gpu"
    ]
    assert (
        "flavor h100 grants 40 nvidia.com/mig-3g.71gb, the nodes it selects can give 32"
        in error.message
    )


def test_a_site_host_of_unknown_gpu_count_offers_its_layouts_slices(tmp_path: Path) -> None:
    labels = {"nvidia.com/mig.config": "inference"}
    site = site_copy(
        tmp_path,
        {
            "gpu-node-01": {
                "gpu_node_registration_labels": labels,
                "gpu_node_check_mig_mode": "enabled",
                "gpu_node_check_expected_gpu_count": None,
            }
        },
    )
    _triton_on_h100_slices(site)
    assert only(site_findings(site), "scheduling") == []

"""Triton on a MIG slice: the integrity check follows the GPU resource each pod requests."""

from __future__ import annotations

from pathlib import Path

import yaml

from tests.unit.test_integrity import only, site_copy, site_findings


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

"""The monthly estimate: priced lines from the dated tables, lacking prices named, never guessed."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from gpuinfra import catalog
from gpuinfra.config import StackConfig, parse_stack
from gpuinfra.review import cost
from tests.conftest import ROOT, run_cli


def stack(**overrides: Any) -> StackConfig:
    config: dict[str, Any] = {
        "aws:region": "us-east-1",
        "gpuinfra:environment": "staging",
        "gpuinfra:tags": {"team": "ml", "project": "llm", "costCenter": "cc-1"},
        "gpuinfra:network": {
            "availabilityZones": ["us-east-1a", "us-east-1b", "us-east-1c"],
            "singleNatGateway": False,
        },
        "gpuinfra:nodePools": [
            {
                "name": "serve",
                "instanceType": "g6e.xlarge",
                "minSize": 1,
                "desiredSize": 2,
                "maxSize": 5,
                "rootVolumeGib": 300,
            },
            {
                "name": "batch",
                "instanceType": "g6.xlarge",
                "capacityType": "spot",
                "maxSize": 4,
            },
        ],
        "gpuinfra:storage": {"fsx": {"enabled": True, "storageCapacityGib": 2400}},
    }
    config.update(overrides)
    return parse_stack({"config": config}, "stacks/Pulumi.staging.yaml")


def line(estimate: cost.CostEstimate, item: str) -> cost.CostLine:
    matches = [entry for entry in estimate.lines if entry.item.startswith(item)]
    assert len(matches) == 1, [entry.item for entry in estimate.lines]
    return matches[0]


def test_on_demand_pool_is_priced_at_desired_and_max_size() -> None:
    estimate = cost.estimate(stack())
    hourly = catalog.instance_types()["g6e.xlarge"].on_demand_usd_per_hour
    assert hourly is not None
    serve = line(estimate, "pool serve: g6e.xlarge")
    assert serve.status == "priced"
    assert serve.monthly_desired_usd == pytest.approx(round(hourly * 730 * 2, 2))
    assert serve.monthly_max_usd == pytest.approx(round(hourly * 730 * 5, 2))
    volumes = line(estimate, "pool serve: root volumes")
    assert volumes.monthly_desired_usd == pytest.approx(2 * 300 * 0.08)
    assert volumes.monthly_max_usd == pytest.approx(5 * 300 * 0.08)


def test_spot_nat_and_control_plane_are_lacking_not_guessed() -> None:
    estimate = cost.estimate(stack())
    batch = line(estimate, "pool batch: g6.xlarge (spot)")
    assert (batch.status, batch.monthly_desired_usd, batch.monthly_max_usd) == (
        "lacking",
        None,
        None,
    )
    nat = line(estimate, "NAT gateways")
    assert nat.status == "lacking"
    assert nat.quantity_desired == 3  # one per zone without singleNatGateway
    assert "EKS control plane" in estimate.lacking
    assert batch.item in estimate.lacking


def test_totals_are_the_sum_of_priced_lines_only() -> None:
    estimate = cost.estimate(stack())
    priced = [entry for entry in estimate.lines if entry.status == "priced"]
    assert estimate.monthly_desired_usd == pytest.approx(
        sum(entry.monthly_desired_usd or 0 for entry in priced)
    )
    assert estimate.monthly_max_usd > estimate.monthly_desired_usd


def test_fsx_priced_only_for_the_known_throughput_tier() -> None:
    known = line(cost.estimate(stack()), "FSx for Lustre")
    assert known.status == "priced"
    assert known.monthly_desired_usd == pytest.approx(2400 * 0.145)
    faster = stack(**{"gpuinfra:storage": {"fsx": {"enabled": True, "throughputPerTib": 250}}})
    unknown = line(cost.estimate(faster), "FSx for Lustre")
    assert unknown.status == "lacking"
    assert unknown.monthly_desired_usd is None


def test_io2_volumes_say_their_provisioned_iops_are_not_in_the_price() -> None:
    storage = {"ebsVolumeType": "io2", "ebsIops": 16000, "fsx": {"enabled": False}}
    io2 = line(cost.estimate(stack(**{"gpuinfra:storage": storage})), "EBS volumes claimed")
    assert io2.item == "EBS volumes claimed by workloads (io2)"
    assert io2.unit_usd == 0.125
    assert io2.note.endswith(
        ", plus 16000 provisioned IOPS per volume, which the price table lacks"
    )
    gp3 = line(cost.estimate(stack()), "EBS volumes claimed")
    assert gp3.note == "billed per GB claimed through the StorageClass"


def test_document_carries_the_date_and_source_of_each_price_table() -> None:
    document = cost.estimate(stack()).document()
    assert document["prices"]["instances"]["as_of"] == catalog.PRICE_DATE
    assert document["prices"]["storage"]["as_of"] == "2026-07-20"
    assert "karpenter" in document["prices"]["instances"]["source"]
    assert "NAT gateways" in document["lacking_prices"]


def test_system_nodes_are_counted_but_lack_a_price() -> None:
    system = line(cost.estimate(stack()), "system nodes")
    assert system.status == "lacking"
    assert system.quantity_desired == stack().cluster.system_node_count


def test_cost_refuses_a_stack_config_check_refuses(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    (root / "stacks").mkdir(parents=True)
    (root / "policies").mkdir()
    for name in ("versions.yaml", "policies/limits.yaml", "stacks/Pulumi.dev.yaml"):
        shutil.copy(ROOT / name, root / name)
    stack = root / "stacks" / "Pulumi.dev.yaml"
    stack.write_text(stack.read_text().replace("maxSize: 2", "maxSize: 5", 1))
    line = (
        "error: stacks/Pulumi.dev.yaml: config.gpuinfra:nodePools[0].maxSize: maxSize 5 is over "
        "dev's maxNodes 4 in policies/limits.yaml (allowed: 0 to 4)"
    )
    for command in (("config", "check"), ("cost",)):
        result = run_cli(*command, "--stack", "dev", root=root, cwd=root)
        assert (result.code, result.stdout, result.stderr.splitlines()) == (2, "", [line])

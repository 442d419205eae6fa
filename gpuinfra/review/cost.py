"""Monthly cost estimate of a stack, line by line, from the dated price tables in the repository.

GPU instances are priced on demand from ``data/aws_gpu_instances.json``; storage from
``data/aws_storage_prices.json``. A price the tables do not hold (spot, Capacity Blocks, NAT
gateways, the EKS control plane, CPU system nodes, FSx tiers other than PERSISTENT_2 at
125 MB/s/TiB) is reported as lacking instead of guessed, so a total never silently includes an
invented figure.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any, Literal

from gpuinfra import catalog
from gpuinfra.config import NodePoolConfig, StackConfig

HOURS_PER_MONTH = 730.0

# How a line's figure is known: from a price in the tables, lacking a price, or priced per unit
# of use that the stack does not fix (bytes stored in S3, volumes claimed by workloads).
Status = Literal["priced", "lacking", "usage"]


@dataclass(frozen=True)
class StoragePrices:
    as_of: str
    region: str
    source: str
    per_gb_month: dict[str, float]


@cache
def storage_prices() -> StoragePrices:
    text = resources.files("gpuinfra.data").joinpath("aws_storage_prices.json").read_text()
    raw: dict[str, Any] = json.loads(text)
    return StoragePrices(
        as_of=str(raw["as_of"]),
        region=str(raw["region"]),
        source=str(raw["source"]),
        per_gb_month={str(k): float(v) for k, v in raw["usd_per_gb_month"].items()},
    )


@dataclass(frozen=True)
class CostLine:
    """One billed thing: its quantity at the pools' desired and max sizes and its monthly cost."""

    category: str
    item: str
    unit: str
    status: Status
    unit_usd: float | None
    quantity_desired: float
    quantity_max: float
    note: str = ""

    @property
    def monthly_desired_usd(self) -> float | None:
        return self._monthly(self.quantity_desired)

    @property
    def monthly_max_usd(self) -> float | None:
        return self._monthly(self.quantity_max)

    def _monthly(self, quantity: float) -> float | None:
        if self.status != "priced" or self.unit_usd is None:
            return None
        return round(self.unit_usd * quantity, 2)

    def document(self) -> dict[str, Any]:
        return {
            "category": self.category,
            "item": self.item,
            "unit": self.unit,
            "status": self.status,
            "unit_usd": self.unit_usd,
            "quantity_desired": self.quantity_desired,
            "quantity_max": self.quantity_max,
            "monthly_desired_usd": self.monthly_desired_usd,
            "monthly_max_usd": self.monthly_max_usd,
            "note": self.note,
        }


@dataclass(frozen=True)
class CostEstimate:
    environment: str
    region: str
    lines: tuple[CostLine, ...]

    @property
    def monthly_desired_usd(self) -> float:
        return round(sum(line.monthly_desired_usd or 0.0 for line in self.lines), 2)

    @property
    def monthly_max_usd(self) -> float:
        return round(sum(line.monthly_max_usd or 0.0 for line in self.lines), 2)

    @property
    def lacking(self) -> list[str]:
        return [line.item for line in self.lines if line.status == "lacking"]

    def document(self) -> dict[str, Any]:
        storage = storage_prices()
        return {
            "environment": self.environment,
            "region": self.region,
            "hours_per_month": HOURS_PER_MONTH,
            "prices": {
                "instances": {
                    "as_of": catalog.PRICE_DATE,
                    "region": catalog.PRICE_REGION,
                    "source": catalog.price_source(),
                },
                "storage": {
                    "as_of": storage.as_of,
                    "region": storage.region,
                    "source": storage.source,
                },
            },
            "lines": [line.document() for line in self.lines],
            "monthly_desired_usd": self.monthly_desired_usd,
            "monthly_max_usd": self.monthly_max_usd,
            "lacking_prices": self.lacking,
        }


def estimate(cfg: StackConfig) -> CostEstimate:
    """The monthly estimate of one environment, every pool at its desired and its max size."""
    lines: list[CostLine] = []
    for pool in cfg.node_pools:
        lines.append(_instances(pool, cfg.region))
        lines.append(_root_volumes(pool))
    system = cfg.cluster
    lines.append(
        CostLine(
            category="system-instances",
            item=f"system nodes: {system.system_instance_type} (on-demand)",
            unit="instance-month",
            status="lacking",
            unit_usd=None,
            quantity_desired=system.system_node_count,
            quantity_max=system.system_node_count,
            note=(
                "CPU instance prices are not in the price tables; their root volumes "
                "are not counted"
            ),
        )
    )
    lines.extend(_network(cfg))
    lines.extend(_storage(cfg))
    if cfg.region != storage_prices().region:
        lines = [_unpriced_here(line, storage_prices().region, cfg.region) for line in lines]
    lines.append(
        CostLine(
            category="control-plane",
            item="EKS control plane",
            unit="cluster-month",
            status="lacking",
            unit_usd=None,
            quantity_desired=1,
            quantity_max=1,
            note="no EKS price in the price tables",
        )
    )
    return CostEstimate(environment=cfg.environment, region=cfg.region, lines=tuple(lines))


def _unpriced_here(line: CostLine, priced_region: str, region: str) -> CostLine:
    """A storage line of a region the tables hold no prices for: lacking, not borrowed."""
    if line.category not in ("storage", "fsx") or line.status == "lacking":
        return line
    return dataclasses.replace(
        line,
        status="lacking",
        unit_usd=None,
        note=f"no price for {region} (the storage price table holds {priced_region} only)",
    )


def _instances(pool: NodePoolConfig, region: str) -> CostLine:
    def line(status: Status, unit_usd: float | None, note: str) -> CostLine:
        return CostLine(
            category="gpu-instances",
            item=f"pool {pool.name}: {pool.instance_type} ({pool.capacity_type})",
            unit="instance-month",
            status=status,
            unit_usd=unit_usd,
            quantity_desired=pool.desired_size,
            quantity_max=pool.max_size,
            note=note,
        )

    if pool.capacity_type == "spot":
        return line("lacking", None, "spot prices move by the hour and zone; not estimated")
    if pool.capacity_type == "capacity-block":
        return line(
            "lacking",
            None,
            "Capacity Blocks are priced per block at purchase; not in the price tables",
        )
    hourly = catalog.hourly_on_demand_usd(pool.instance_type, region)
    monthly = catalog.monthly_on_demand_usd(
        pool.instance_type, 1, hours=HOURS_PER_MONTH, region=region
    )
    if region != catalog.PRICE_REGION:
        return line(
            "lacking",
            None,
            f"no on-demand price for {region} (the price table holds {catalog.PRICE_REGION} only)",
        )
    if hourly is None or monthly is None:
        return line(
            "lacking", None, f"no on-demand price for {pool.instance_type} in the price table"
        )
    note = f"on-demand {hourly} USD/hour x {HOURS_PER_MONTH:g} hours"
    if pool.capacity_type == "capacity-reservation":
        note += "; a capacity reservation bills at the on-demand rate, used or not"
    return line("priced", monthly, note)


def _root_volumes(pool: NodePoolConfig) -> CostLine:
    price = storage_prices().per_gb_month["ebs:gp3"]
    return CostLine(
        category="storage",
        item=f"pool {pool.name}: root volumes (gp3, {pool.root_volume_gib} GiB each)",
        unit="GB-month",
        status="priced",
        unit_usd=price,
        quantity_desired=pool.root_volume_gib * pool.desired_size,
        quantity_max=pool.root_volume_gib * pool.max_size,
        note="baseline 3000 IOPS and 125 MB/s included",
    )


def _network(cfg: StackConfig) -> list[CostLine]:
    gateways = 1 if cfg.network.single_nat_gateway else len(cfg.network.availability_zones)
    return [
        CostLine(
            category="network",
            item="NAT gateways",
            unit="gateway-month",
            status="lacking",
            unit_usd=None,
            quantity_desired=gateways,
            quantity_max=gateways,
            note="no NAT gateway price (hourly or per GB processed) in the price tables",
        )
    ]


def _storage(cfg: StackConfig) -> list[CostLine]:
    prices = storage_prices().per_gb_month
    lines = [
        CostLine(
            category="storage",
            item="S3 model repository (Standard)",
            unit="GB-month",
            status="usage",
            unit_usd=prices["s3:standard"],
            quantity_desired=0,
            quantity_max=0,
            note="billed per GB stored; the stack does not fix how much",
        ),
        CostLine(
            category="storage",
            item=f"EBS volumes claimed by workloads ({cfg.storage.ebs_volume_type})",
            unit="GB-month",
            status="usage",
            unit_usd=prices[f"ebs:{cfg.storage.ebs_volume_type}"],
            quantity_desired=0,
            quantity_max=0,
            note="billed per GB claimed through the StorageClass"
            + (
                f", plus {cfg.storage.ebs_iops} provisioned IOPS per volume, which the price "
                "table lacks"
                if cfg.storage.ebs_volume_type == "io2"
                else ""
            ),
        ),
    ]
    fsx = cfg.storage.fsx
    if fsx.enabled:
        key = f"fsx-lustre:PERSISTENT_2:{fsx.throughput_per_tib}"
        price = prices.get(key)
        item = f"FSx for Lustre PERSISTENT_2, {fsx.throughput_per_tib} MB/s/TiB"
        lines.append(
            CostLine(
                category="fsx",
                item=item,
                unit="GB-month",
                status="lacking" if price is None else "priced",
                unit_usd=price,
                quantity_desired=fsx.storage_capacity_gib,
                quantity_max=fsx.storage_capacity_gib,
                note=(
                    f"no price for the {fsx.throughput_per_tib} MB/s/TiB tier in the table"
                    if price is None
                    else ""
                ),
            )
        )
    return lines

"""GPU instance facts for AWS: GPU model and count, memory, EFA interfaces, on-demand price,
and the regions each family is offered in.

The data files are dated snapshots with their sources (``price_source()``, ``regions_source()``);
a cost estimate shows the date. Prices are known for ``PRICE_REGION`` only: a stack in another
region gets "no price" rather than another region's figure.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from importlib import resources

PRICE_DATE = "2026-07-20"
PRICE_REGION = "us-east-1"


@dataclass(frozen=True)
class InstanceType:
    name: str
    vcpu: int
    memory_mib: int
    gpu_count: int
    gpu_name: str
    gpu_memory_mib_per_gpu: int
    efa_interfaces: int
    network_bandwidth_mbps: int
    local_nvme_gb: int
    on_demand_usd_per_hour: float | None

    @property
    def family(self) -> str:
        return self.name.split(".", 1)[0]


@cache
def _raw() -> dict[str, object]:
    text = resources.files("gpuinfra.data").joinpath("aws_gpu_instances.json").read_text()
    data: dict[str, object] = json.loads(text)
    return data


@cache
def instance_types() -> dict[str, InstanceType]:
    raw = _raw()["instances"]
    assert isinstance(raw, dict)
    return {
        name: InstanceType(
            name=name,
            vcpu=spec["vcpu"],
            memory_mib=spec["memory_mib"],
            gpu_count=spec["gpu_count"],
            gpu_name=spec["gpu_name"],
            gpu_memory_mib_per_gpu=spec["gpu_memory_mib_per_gpu"],
            efa_interfaces=spec["efa_interfaces"],
            network_bandwidth_mbps=spec["network_bandwidth_mbps"],
            local_nvme_gb=spec["local_nvme_gb"],
            on_demand_usd_per_hour=spec.get("on_demand_usd_per_hour_us_east_1"),
        )
        for name, spec in raw.items()
    }


def price_source() -> str:
    return str(_raw()["source_prices"])


def hourly_on_demand_usd(instance_type: str, region: str = PRICE_REGION) -> float | None:
    """The on-demand hourly price in ``region``; None where the snapshot has none."""
    spec = instance_types().get(instance_type)
    if spec is None or region != PRICE_REGION:
        return None
    return spec.on_demand_usd_per_hour


def monthly_on_demand_usd(
    instance_type: str, count: int, hours: float = 730.0, *, region: str = PRICE_REGION
) -> float | None:
    """On-demand cost of ``count`` instances for ``hours`` (730 = an average month).

    None when the type is unknown or has no price in the snapshot for ``region`` (p5e; any
    region but PRICE_REGION): a ceiling check must say it cannot price the pool rather than
    count it as free or borrow another region's price.
    """
    hourly = hourly_on_demand_usd(instance_type, region)
    if hourly is None:
        return None
    return round(hourly * count * hours, 2)


@cache
def _regions_raw() -> dict[str, object]:
    text = resources.files("gpuinfra.data").joinpath("aws_gpu_regions.json").read_text()
    data: dict[str, object] = json.loads(text)
    return data


def regions_source() -> str:
    raw = _regions_raw()
    return f"{raw['source']} (as of {raw['as_of']})"


def regions_as_of() -> str:
    return str(_regions_raw()["as_of"])


def offered_regions(instance_type: str) -> tuple[str, ...]:
    """The regions the catalog records ``instance_type``'s family as offered in."""
    families = _regions_raw()["families"]
    assert isinstance(families, dict)
    return tuple(families.get(instance_type.split(".", 1)[0], ()))


# Availability zone names per region (AWS "Regions and Zones" documentation, 2026). Names, not
# zone ids: which physical zone a name maps to differs between accounts.
REGION_ZONES: dict[str, tuple[str, ...]] = {
    "us-east-1": tuple(f"us-east-1{c}" for c in "abcdef"),
    "us-east-2": tuple(f"us-east-2{c}" for c in "abc"),
    "us-west-2": tuple(f"us-west-2{c}" for c in "abcd"),
    "ca-central-1": ("ca-central-1a", "ca-central-1b", "ca-central-1d"),
    "eu-west-1": tuple(f"eu-west-1{c}" for c in "abc"),
    "eu-west-2": tuple(f"eu-west-2{c}" for c in "abc"),
    "eu-central-1": tuple(f"eu-central-1{c}" for c in "abc"),
    "eu-north-1": tuple(f"eu-north-1{c}" for c in "abc"),
    "ap-northeast-1": ("ap-northeast-1a", "ap-northeast-1c", "ap-northeast-1d"),
    "ap-south-1": tuple(f"ap-south-1{c}" for c in "abc"),
    "ap-southeast-2": tuple(f"ap-southeast-2{c}" for c in "abc"),
}


def availability_zones(region: str) -> tuple[str, ...] | None:
    """The zone names of ``region``, or None for a region the catalog does not list."""
    return REGION_ZONES.get(region)


def region_of_zone(zone: str) -> str | None:
    """The region whose zone ``zone`` is (us-west-2a: us-west-2), or None for a name the
    catalog does not list."""
    return next((region for region, zones in REGION_ZONES.items() if zone in zones), None)

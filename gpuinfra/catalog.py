"""GPU instance facts for AWS: GPU model and count, memory, EFA interfaces, on-demand price.

The data file is a dated snapshot (see ``PRICE_SOURCE``); a cost estimate shows that date.
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

"""The morning check on an EFA pool: its nodes must offer the interfaces the pool declares,
which only the EFA device plugin makes allocatable."""

from __future__ import annotations

from typing import Any

from gpuinfra import config, integrity
from gpuinfra.ops import doctor
from gpuinfra.ops.doctor import Declared

PROD = config.load_stack("prod")


def _node(name: str, pool_name: str, allocatable: dict[str, str]) -> dict[str, Any]:
    """A Ready node of one of prod's pools, labelled as the node pool component labels it."""
    (pool,) = [p for p in PROD.node_pools if p.name == pool_name]
    labels = integrity.pool_labels(pool.name, pool.instance_type, pool.labels, efa=pool.efa)
    return {
        "metadata": {"name": name, "labels": labels},
        "status": {
            "allocatable": allocatable,
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def _items(*nodes: dict[str, Any]) -> dict[str, tuple[str, str]]:
    declared = Declared(integrity.stack_nodes(PROD))
    found = doctor.node_items({"items": list(nodes)}, declared)
    return {item.subject: (item.status, item.detail) for item in found}


def test_an_efa_node_without_its_interfaces_fails_naming_the_plugin() -> None:
    items = _items(
        _node("ip-10-42-0-1", "h100", {"nvidia.com/gpu": "8"}),
        _node("ip-10-42-0-2", "h100", {"nvidia.com/gpu": "8", "vpc.amazonaws.com/efa": "32"}),
        _node("ip-10-42-1-1", "serving", {"nvidia.com/gpu": "1"}),
    )
    assert items == {
        "ip-10-42-0-1": (
            "fail",
            "allocatable vpc.amazonaws.com/efa 0, declared 32 (node pool h100): is the EFA "
            "device plugin running there?",
        ),
        "ip-10-42-0-2": (
            "ok",
            "Ready, 8 GPUs and 32 EFA interfaces allocatable as declared (node pool h100)",
        ),
        "ip-10-42-1-1": ("ok", "Ready, 1 GPU allocatable as declared (node pool serving)"),
    }

"""Nested plan documents as leaves by path, which both the plan and the diff compare."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    """Leaves of a nested document by path: ``{"a": {"b": [1]}}`` -> ``{"a.b[0]": 1}``."""
    if isinstance(value, Mapping):
        if not value and prefix:
            return {prefix: {}}
        out: dict[str, Any] = {}
        for key in sorted(value, key=str):
            out.update(flatten(value[key], f"{prefix}.{key}" if prefix else str(key)))
        return out
    if isinstance(value, list):
        if not value:
            return {prefix: []}
        out = {}
        for index, item in enumerate(value):
            out.update(flatten(item, f"{prefix}[{index}]"))
        return out
    return {prefix: value}

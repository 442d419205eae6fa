"""In-cluster add-ons: one spec per add-on, used by both delivery paths.

Each spec module (``gpu_operator``, ``volcano``, ``kueue``, ``triton``, ``prometheus_stack``)
provides typed settings, a function settings -> Helm values and a function settings -> extra
Kubernetes objects. ``render_all`` is what the Pulumi ``ClusterAddons`` component, the Ansible
add-on roles, ``gpuinfra addons render`` and the plan call; no Helm value is written anywhere
else.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Chart:
    """Coordinates of a pinned Helm chart, read from versions.yaml."""

    repository: str
    name: str
    version: str


@dataclass(frozen=True)
class AddonRender:
    """Everything one add-on applies to a cluster, fully resolved."""

    name: str
    release: str
    namespace: str
    chart: Chart | None
    values: dict[str, Any] = field(default_factory=dict)
    objects: list[dict[str, Any]] = field(default_factory=list)
    # Files the add-on ships besides objects, by relative path (Triton's config.pbtxt files).
    files: dict[str, str] = field(default_factory=dict)

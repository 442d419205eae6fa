"""The Kubernetes objects a stack or a site applies besides its Helm charts, as manifests.

For a stack, every Kubernetes resource its Pulumi program registers (Namespaces, the add-ons'
objects, Grafana's admin Secret, the StorageClass), with the inputs it registers them with; for
a site, the add-on objects its roles apply. Helm releases are left out: their templates need the
charts and ``helm``, which the review path does not run. ``tests/unit/review/test_checkov.py``
scans these with checkov.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gpuinfra import addons
from gpuinfra import site as site_mod
from gpuinfra.paths import repo_root
from gpuinfra.review import stackrun

# Registered by the program but not objects in the cluster: chart releases and the provider.
_NOT_OBJECTS = ("kubernetes:helm.sh/", "pulumi:providers:")


def stack_manifests(env: str, root: Path | None = None) -> list[dict[str, Any]]:
    run = stackrun.run_stack(env, root=root or repo_root())
    return [
        dict(r.inputs)
        for r in run.resources
        if r.custom and r.type_.startswith("kubernetes:") and not r.type_.startswith(_NOT_OBJECTS)
    ]


def site_manifests(path: Path) -> list[dict[str, Any]]:
    site = site_mod.load_site(path)
    renders = addons.render_all(addons.settings_from_site(site))
    return [dict(obj) for render in renders for obj in render.objects]

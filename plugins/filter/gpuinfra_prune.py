"""Ansible filter: objects found in the cluster that a render no longer has.

The roles apply what the gpuinfra core renders and nothing deletes by itself: an object the
settings stopped rendering (Triton's single Deployment once serving groups replace it, a removed
group or canary) would keep running. ``k8s_info`` finds an add-on's objects by its labels; this
filter keeps those the render does not name, to be removed.
"""

from __future__ import annotations

from typing import Any


def _key(api_version: str, kind: str, namespace: str, name: str) -> tuple[str, str, str, str]:
    # The group, not its version: an HPA read as autoscaling/v2 is the one rendered as v2.
    group = api_version.rpartition("/")[0] if "/" in api_version else ""
    return (group, kind, namespace, name)


def gpuinfra_unrendered(
    results: list[dict[str, Any]], rendered: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """From a looped ``k8s_info`` (each item: api_version, kind, namespace), the objects found
    that ``rendered`` lacks, as {apiVersion, kind, namespace, name}."""
    names = {
        _key(o["apiVersion"], o["kind"], o["metadata"].get("namespace", ""), o["metadata"]["name"])
        for o in rendered
    }
    stale = []
    for result in results:
        query = result["item"]
        for found in result.get("resources") or []:
            meta = found.get("metadata") or {}
            namespace = meta.get("namespace") or query["namespace"]
            key = _key(query["api_version"], query["kind"], namespace, meta["name"])
            if key not in names:
                stale.append(
                    {
                        "apiVersion": query["api_version"],
                        "kind": query["kind"],
                        "namespace": namespace,
                        "name": meta["name"],
                    }
                )
    return stale


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"gpuinfra_unrendered": gpuinfra_unrendered}

"""inventory/example, the site users copy, passes the same validation as their own will."""

from __future__ import annotations

from pathlib import Path

from gpuinfra import site


def test_example_site_is_valid(repo_root: Path) -> None:
    loaded = site.load_site(repo_root / "inventory" / "example")
    assert sorted(loaded.groups["gpu_nodes"]) == ["gpu-node-01", "gpu-node-02"]
    node = loaded.hosts["gpu-node-01"]
    assert node.vars["nvidia_driver_source"] == "distro"
    assert node.vars["nvidia_container_toolkit_runtimes"] == ["containerd"]
    # The version comes from versions.yaml, never from the site.
    assert "nvidia_driver_version" not in node.vars

"""The package request of the nvidia_container_toolkit role, from the host's facts.

What roles/node_packages installs and holds for the toolkit, and whether that is settled already:
the pinned packages installed and held, and containerd present when it is a listed runtime (from
Docker's repository: containerd.io installed and held at its pin). The
repository, the runtimes' configuration and the services are not decided here: the role's file,
copy, template and systemd_service tasks compare and change those themselves.
"""

from __future__ import annotations

from typing import Any


def nvidia_container_toolkit_request(host: dict[str, Any], want: dict[str, Any]) -> dict[str, Any]:
    """The request for one host, from its facts (library/nvidia_container_toolkit_facts.py)."""
    packages: list[str] = list(want["packages"])
    version = want["package_version"]
    installed = host["packages"]
    held = all(
        p in installed
        and installed[p]["version"] == version
        and installed[p]["status"] == "hold ok installed"
        for p in packages
    )
    listed = "containerd" in want["runtimes"]
    containerd = want.get("containerd_package", "containerd")
    containerd_version = want["containerd_package_version"]
    if want.get("containerd_source") == "docker":
        # Docker's containerd.io: installed and held at the pin, as the toolkit is. Installing it
        # removes the distribution's containerd and runc, which it replaces.
        found = installed.get(containerd, {})
        needs_containerd = listed and (
            found.get("version") != containerd_version or found.get("status") != "hold ok installed"
        )
        holds = [*packages, containerd] if listed else packages
    else:
        # The distribution's containerd: installed where there is none, and left to its updates.
        needs_containerd = listed and not host["containerd"]
        holds = packages
    return {
        "role": "nvidia_container_toolkit",
        "packages": [f"{p}={version}" for p in packages]
        + ([f"{containerd}={containerd_version}"] if needs_containerd else []),
        "hold": holds,
        "settled": held and not needs_containerd,
    }


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"nvidia_container_toolkit_request": nvidia_container_toolkit_request}

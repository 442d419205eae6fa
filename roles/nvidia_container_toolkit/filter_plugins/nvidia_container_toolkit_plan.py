"""What the nvidia_container_toolkit role must do on a host, read from its probe.

The role reads the host once with a shell probe (``_nvidia_container_toolkit_probe_script``):
KEY=VALUE lines, ``dpkg=PACKAGE VERSION STATUS`` lines for the toolkit packages, and ``path PATH
dir OWNER:GROUP:MODE``, ``path PATH file SHA1 OWNER:GROUP:MODE`` or ``path PATH absent`` for each
path the role writes. ``nvidia_container_toolkit_plan`` turns those lines and the role's resolved
inputs (``_nvidia_container_toolkit_inputs``) into one dictionary: which paths differ, what the
package run must install, and whether containerd needs anything. The tasks read its keys.

Python rather than chains of role variables, for the reason given in the nvidia_driver role's
filter: each reference to a role variable is compiled and rendered again in every task's worker.
"""

from __future__ import annotations

import re
from typing import Any

DIRECTORY = "dir root:root:755"


def nvidia_container_toolkit_plan(lines: list[str], want: dict[str, Any]) -> dict[str, Any]:
    """The role's decisions for one host, from its probe lines and resolved inputs."""
    pairs = (line.split("=", 1) for line in lines if re.match(r"[a-z_]+=", line))
    host = {key: value for key, value in pairs if key != "dpkg"}
    dpkg = [line[len("dpkg=") :] for line in lines if line.startswith("dpkg=")]
    paths = dict(line[len("path ") :].split(" ", 1) for line in lines if line.startswith("path "))

    packages: list[str] = list(want["packages"])
    version = want["package_version"]
    names = "|".join(re.escape(name) for name in packages)
    held = sum(
        1
        for line in dpkg
        if re.fullmatch(rf"({names}) {re.escape(version)} hold ok installed", line)
    )
    needs_containerd = "containerd" in want["runtimes"] and "containerd" not in host
    settled = not needs_containerd and held == len(packages)

    def file_differs(path: str, sha1: str) -> bool:
        return paths.get(path) != f"file {sha1} root:root:644"

    write_keyrings = paths.get("/etc/apt/keyrings") != DIRECTORY
    # The key's content is the repository's: it is fetched when missing, its owner and mode set
    # when they differ.
    write_key = not re.fullmatch(r"file [0-9a-f]+ root:root:644", paths.get(want["keyring"], ""))
    write_sources = file_differs(want["sources_file"], want["sources_sha1"])
    write_dropin_dir = paths.get(want["dropin_dir"]) != DIRECTORY
    write_dropin = file_differs(want["dropin"], want["dropin_sha1"])

    containerd_drift = (
        write_dropin_dir
        or write_dropin
        or host.get("main_config") != "imports"
        or host.get("containerd_enabled") != "enabled"
        or host.get("containerd_active") != "active"
    )
    runtimes = want["runtimes"]
    configure_containerd = "containerd" in runtimes and containerd_drift
    # daemon.json is read and merged on every run: other tools write to it too.
    configure_docker = "docker" in runtimes
    # Written when missing; nvidia-ctk needs a GPU device node to describe.
    write_cdi = want["cdi"] and "devnode" in host and paths.get(want["cdi_spec"]) == "absent"

    return {
        "host": host,
        "request": {
            "role": "nvidia_container_toolkit",
            "packages": [f"{p}={version}" for p in packages]
            + ([f"containerd={want['containerd_package_version']}"] if needs_containerd else []),
            "hold": packages,
            "settled": settled,
        },
        "write_keyrings": write_keyrings,
        "write_key": write_key,
        "write_sources": write_sources,
        "repo_drift": write_keyrings or write_key or write_sources,
        "write_dropin_dir": write_dropin_dir,
        "write_dropin": write_dropin,
        "configure_containerd": configure_containerd,
        "configure_docker": configure_docker,
        "write_cdi": write_cdi,
        # Whether runtimes.yml has anything to do when no package run precedes it.
        "configure": configure_containerd or configure_docker or write_cdi,
    }


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"nvidia_container_toolkit_plan": nvidia_container_toolkit_plan}

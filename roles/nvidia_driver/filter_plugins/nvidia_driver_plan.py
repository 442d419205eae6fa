"""What the nvidia_driver role must do on a host, read from its probe.

The role reads the host once with a shell probe (``_nvidia_driver_probe_script``): KEY=VALUE lines,
``dpkg PACKAGE VERSION STATUS`` lines for the driver's package set, and ``file PATH SHA1
OWNER:GROUP:MODE`` (or ``file PATH absent``) for each file the role writes. ``nvidia_driver_plan``
turns those lines and the role's resolved inputs (``_nvidia_driver_inputs``) into one dictionary:
which files differ, whether the package run has anything to do or must not start, and what the
check and the report say. The tasks read its keys; none of them re-derives anything.

It is Python rather than chains of role variables because every reference to a role variable is
compiled and rendered again in each task's worker: on a converged host this decision was most of
what a re-converge spent on the controller.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

CONTAINER_VIRT = ("container", "podman", "docker", "lxc")
# The task file prepare.yml includes, by install source (and OS family for the packaged ones).
SOURCE_TASKS = {
    "distro/Debian": "repositories_distro.yml",
    "cuda_repo/Debian": "repositories_cuda_repo_apt.yml",
    "cuda_repo/RedHat": "install_cuda_repo_dnf.yml",
    "preinstalled": "preinstalled.yml",
}
OWNED = " root:root:644"
# Where Debian keeps the driver (non-free), its firmware (non-free-firmware) and the helpers it
# depends on (contrib).
COMPONENTS = ("contrib", "non-free", "non-free-firmware")


def probe_state(lines: list[str]) -> dict[str, str]:
    """The probe's KEY=VALUE lines."""
    pairs = (line.split("=", 1) for line in lines if re.match(r"[a-z_]+=", line))
    return {key: value for key, value in pairs}


def probe_files(lines: list[str]) -> dict[str, str]:
    """PATH -> 'SHA1 OWNER:GROUP:MODE' or 'absent', from the probe's file lines."""
    pairs = (line[len("file ") :].split(" ", 1) for line in lines if line.startswith("file "))
    return {path: state for path, state in pairs}


def sha1(text: str) -> str:
    # The probe reads files with sha1sum.
    return hashlib.sha1(text.encode()).hexdigest()


def components_file(uri: str, suite: str, components: list[str]) -> str:
    """The deb822 source that enables Debian's components the host's other sources lack."""
    return (
        "# Managed by gpuinfra (roles/nvidia_driver); local edits are overwritten.\n"
        "Types: deb\n"
        f"URIs: {uri}\n"
        f"Suites: {suite}\n"
        f"Components: {' '.join(components)}\n"
    )


def _count(lines: list[str], pattern: str) -> int:
    return sum(1 for line in lines if re.fullmatch(pattern, line))


def _alternatives(names: list[str]) -> str:
    return "|".join(re.escape(name) for name in names)


def nvidia_driver_plan(lines: list[str], want: dict[str, Any]) -> dict[str, Any]:
    """The role's decisions for one host, from its probe lines and resolved inputs."""
    state = probe_state(lines)
    files = probe_files(lines)
    # The probe reads the running kernel; the fact is the fallback (and may predate a reboot).
    kernel = state.get("kernel") or want["kernel"]
    dpkg = [line[len("dpkg ") :] for line in lines if line.startswith("dpkg ")]
    in_container = state.get("container") == "0" or (
        want["virtualization_type"] in CONTAINER_VIRT and want["virtualization_role"] == "guest"
    )
    has_headers = state.get("headers") == "0"

    # The driver's set at the pinned build, held; the extras (the persistence daemon where the set
    # lacks it, the running kernel's headers where DKMS will build) at any version.
    apt_packages: list[str] = list(want["apt_packages"])
    headers = want["install_kernel_headers"] and want["dkms"] and not in_container
    extras = list(want["extra_packages"]) + ([f"linux-headers-{kernel}"] if headers else [])
    build = re.escape(want["apt_version"]).replace(r"\*", ".*")
    held = _count(dpkg, rf"({_alternatives(apt_packages)}) {build} hold ok installed")
    extra = _count(dpkg, rf"({_alternatives(extras)}) \S+ \S+ ok installed") if extras else 0
    settled = not want["uses_apt"] or (held == len(apt_packages) and extra == len(extras))

    def differs(path: str, sha: str) -> bool:
        return files.get(path) != f"{sha}{OWNED}"

    # Only Debian's distro source probes the components; the file names those no other source has.
    nonfree_content = ""
    if want["distribution"] == "Debian" and "components_elsewhere" in state:
        missing = [c for c in COMPONENTS if c not in state["components_elsewhere"].split()]
        if missing:
            nonfree_content = components_file(
                want["distro_repo_url"], want["distro_suite"], missing
            )
    nonfree = want["nonfree_file"]
    write_nonfree = bool(nonfree_content) and differs(nonfree, sha1(nonfree_content))
    remove_nonfree = (
        "components_elsewhere" in state
        and not nonfree_content
        and files.get(nonfree, "absent") != "absent"
    )
    write_pref = want["uses_apt"] and differs(want["pref_file"], want["files"][want["pref_file"]])
    write_unattended = want["uses_apt"] and differs(
        want["unattended_file"], want["files"][want["unattended_file"]]
    )
    repo_drift = write_nonfree or remove_nonfree or write_pref or write_unattended

    source, family = want["source"], want["os_family"]
    if source == "distro" and family == "Debian" and not repo_drift:
        source_tasks = ""
    else:
        source_tasks = SOURCE_TASKS.get(
            source if source == "preinstalled" else f"{source}/{family}", ""
        )

    blocked = ""
    wont_build = want["uses_apt"] and want["dkms"] and not in_container and not has_headers
    if wont_build and not want["install_kernel_headers"]:
        blocked = (
            f"no kernel headers for the running kernel {kernel} on {want['host']} and "
            "nvidia_driver_install_kernel_headers is false: DKMS could not build the NVIDIA "
            "module. Install the headers package or set nvidia_driver_install_kernel_headers "
            "to true."
        )

    unit = "persistenced_unit" in state
    devnode = "devnode" in state
    start_persistenced = (
        want["persistence_mode"]
        and unit
        and (
            state.get("persistenced_enabled") != "enabled"
            or (devnode and state.get("persistenced_active") != "active")
        )
    )

    nouveau = want["nouveau_file"]
    write_nouveau = want["blacklist_nouveau"] and differs(nouveau, want["files"][nouveau])

    return {
        "state": state,
        "kernel": kernel,
        "in_container": in_container,
        # What roles/node_packages reads: settled when apt and the holds have nothing to do.
        "request": {
            "role": "nvidia_driver",
            "packages": [f"{p}={want['apt_version']}" for p in apt_packages] + extras
            if want["uses_apt"]
            else [],
            "hold": apt_packages if want["uses_apt"] else [],
            "settled": settled,
            "blocked": blocked,
        },
        "source_tasks": source_tasks,
        "nonfree_content": nonfree_content,
        "write_nonfree": write_nonfree,
        "remove_nonfree": remove_nonfree,
        "write_pref": write_pref,
        "write_unattended": write_unattended,
        "write_nouveau": write_nouveau,
        "start_persistenced": start_persistenced,
        # Whether configure.yml has anything to do when no package run precedes it.
        "configure": write_nouveau or start_persistenced,
        "failure": _failure(state, want, kernel, in_container, has_headers),
        "report": _report(state, want, kernel, in_container),
    }


def _failure(
    state: dict[str, str], want: dict[str, Any], kernel: str, in_container: bool, has_headers: bool
) -> str:
    """Why the check fails, or '' when the pinned build is installed and DKMS can build."""
    installed = state.get("installed", "")
    if want["source"] != "preinstalled" and not re.match(re.escape(want["version"]), installed):
        package = want["apt_packages"][0] if want["os_family"] == "Debian" else "nvidia-driver"
        return (
            f"{package} on {want['host']} is {installed or 'not installed'}, "
            f"expected {want['version']}."
        )
    if want["dkms"] and not in_container and not has_headers:
        return (
            f"No kernel headers for the running kernel {kernel} on {want['host']}: DKMS cannot "
            f"build the NVIDIA module. Install linux-headers-{kernel} (or kernel-devel), or reboot "
            "into a kernel whose headers are installed, then converge again."
        )
    return ""


def _report(
    state: dict[str, str], want: dict[str, Any], kernel: str, in_container: bool
) -> list[str]:
    """Secure Boot always, and why no module or persistence where that holds."""
    if state.get("mokutil") == "0":
        secure_boot = state.get("secure_boot") or "unknown"
    else:
        secure_boot = "unknown (mokutil not available)"
    lines = [
        f"Secure Boot: {secure_boot}. With Secure Boot enabled, the DKMS-built module must be "
        "signed with an enrolled key (MOK)."
    ]
    if want["dkms"] and in_container:
        lines.append(
            f"{want['host']} is a container running the host kernel {kernel}: the driver "
            "packages install, DKMS builds no module and no GPU is usable here. That is expected "
            "in the lab, not a broken host."
        )
    if want["persistence_mode"] and "persistenced_unit" not in state:
        lines.append(
            "nvidia-persistenced is not installed on this host; persistence mode stays as the "
            "driver sets it"
        )
    elif want["persistence_mode"] and "devnode" not in state:
        lines.append(
            "no GPU device node: nvidia-persistenced is enabled for the next boot, not started now"
        )
    return lines


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"nvidia_driver_plan": nvidia_driver_plan}

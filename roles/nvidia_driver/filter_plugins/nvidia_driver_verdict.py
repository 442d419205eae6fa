"""The nvidia_driver role's verdicts on a host, from its facts (library/nvidia_driver_facts.py).

Three questions that are more than a comparison, answered in one place with unit tests:

- the package request handed to the package run (roles/node_packages): what to install and
  hold, whether it is settled already, and why it must not start (DKMS without kernel headers);
- whether the host is a container (the lab) or a machine whose driver should work;
- what the final check says: the failure, naming what to change, and the report.

Files, services and repositories are not decided here: the role's template, copy and
systemd_service tasks compare and change those themselves.
"""

from __future__ import annotations

import re
from typing import Any

CONTAINER_VIRT = ("container", "podman", "docker", "lxc")


def _matching(packages: dict[str, dict[str, str]], name: str, version: str, held: bool) -> bool:
    found = packages.get(name)
    if not found or not found["status"].endswith("ok installed"):
        return False
    if held and not found["status"].startswith("hold "):
        return False
    return re.fullmatch(re.escape(version).replace(r"\*", ".*"), found["version"]) is not None


def nvidia_driver_verdict(host: dict[str, Any], want: dict[str, Any]) -> dict[str, Any]:
    """The request, the container verdict, and the check's failure and report for one host."""
    kernel = host["kernel"]
    in_container = host["in_container"] or (
        want["virtualization_type"] in CONTAINER_VIRT and want["virtualization_role"] == "guest"
    )
    packages = host["packages"]

    # The driver's set at the pinned build, held; the extras (the persistence daemon where the set
    # lacks it, the running kernel's headers where DKMS will build) at any version.
    apt_packages: list[str] = list(want["apt_packages"])
    headers = want["install_kernel_headers"] and want["dkms"] and not in_container
    extras = list(want["extra_packages"]) + ([f"linux-headers-{kernel}"] if headers else [])
    # Kernels cannot break the driver (decision 0045): the flavour's headers meta-package makes
    # every kernel apt installs bring its headers, so DKMS builds the module before the reboot;
    # the kernel is held with the driver, so it moves only when an operator releases it.
    flavour = host.get("kernel_flavour")
    kernel_policy = want["dkms"] and not in_container and want["uses_apt"]
    if kernel_policy and flavour and headers and want.get("kernel_headers_meta", True):
        extras.append(f"linux-headers-{flavour}")
    kernel_holds = []
    if kernel_policy and want.get("hold_kernel", True):
        names = [f"linux-image-{kernel}", f"linux-headers-{kernel}"]
        if flavour:
            names[1:1] = [f"linux-image-{flavour}"]
            names.append(f"linux-headers-{flavour}")
        kernel_holds = [
            name for name in names if name in extras or _matching(packages, name, "*", held=False)
        ]
    settled = not want["uses_apt"] or (
        all(_matching(packages, p, want["apt_version"], held=True) for p in apt_packages)
        and all(_matching(packages, p, "*", held=False) for p in extras)
        and all(_matching(packages, p, "*", held=True) for p in kernel_holds)
    )

    blocked = ""
    wont_build = (
        want["uses_apt"] and want["dkms"] and not in_container and not host["kernel_headers"]
    )
    if wont_build and not want["install_kernel_headers"]:
        blocked = (
            f"no kernel headers for the running kernel {kernel} on {want['host']} and "
            "nvidia_driver_install_kernel_headers is false: DKMS could not build the NVIDIA "
            "module. Install the headers package or set nvidia_driver_install_kernel_headers "
            "to true."
        )

    return {
        "kernel": kernel,
        "in_container": in_container,
        # The build installed when this verdict was taken: a later read that differs means the
        # driver changed and the host needs a reboot.
        "installed": host["installed"],
        "request": {
            "role": "nvidia_driver",
            "packages": [f"{p}={want['apt_version']}" for p in apt_packages] + extras
            if want["uses_apt"]
            else [],
            "hold": apt_packages + kernel_holds if want["uses_apt"] else [],
            "settled": settled,
            "blocked": blocked,
        },
        "failure": _failure(host, want, in_container),
        "report": _report(host, want, in_container),
    }


def _failure(host: dict[str, Any], want: dict[str, Any], in_container: bool) -> str:
    """Why the check fails, or '' when the pinned build is installed and DKMS can build."""
    installed, kernel = host["installed"], host["kernel"]
    if want["source"] != "preinstalled" and not re.match(re.escape(want["version"]), installed):
        package = want["apt_packages"][0] if want["os_family"] == "Debian" else "nvidia-driver"
        return (
            f"{package} on {want['host']} is {installed or 'not installed'}, "
            f"expected {want['version']}."
        )
    if want["dkms"] and not in_container and not host["kernel_headers"]:
        return (
            f"No kernel headers for the running kernel {kernel} on {want['host']}: DKMS cannot "
            f"build the NVIDIA module. Install linux-headers-{kernel} (or kernel-devel), or reboot "
            "into a kernel whose headers are installed, then converge again."
        )
    return ""


def _report(host: dict[str, Any], want: dict[str, Any], in_container: bool) -> list[str]:
    """Secure Boot always, and why no module or persistence where that holds."""
    secure_boot = host["secure_boot"] or "unknown (mokutil not available)"
    lines = [
        f"Secure Boot: {secure_boot}. With Secure Boot enabled, the DKMS-built module must be "
        "signed with an enrolled key (MOK)."
    ]
    if want["dkms"] and in_container:
        lines.append(
            f"{want['host']} is a container running the host kernel {host['kernel']}: the driver "
            "packages install, DKMS builds no module and no GPU is usable here. That is expected "
            "in the lab, not a broken host."
        )
    if want["persistence_mode"] and not host["persistenced_unit"]:
        lines.append(
            "nvidia-persistenced is not installed on this host; persistence mode stays as the "
            "driver sets it"
        )
    elif want["persistence_mode"] and not host["device_node"]:
        lines.append(
            "no GPU device node: nvidia-persistenced is enabled for the next boot, not started now"
        )
    return lines


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"nvidia_driver_verdict": nvidia_driver_verdict}

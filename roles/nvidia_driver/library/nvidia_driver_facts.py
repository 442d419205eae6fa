#!/usr/bin/python
"""Ansible module: read what the nvidia_driver role decides from, as facts."""

from __future__ import annotations

DOCUMENTATION = r"""
module: nvidia_driver_facts
short_description: Read a host's NVIDIA driver packages, kernel and services
description:
  - Reads, without changing anything, what the nvidia_driver role decides from, and returns it as
    the fact C(nvidia_driver_host).
  - The files the role writes are compared by its own template, copy and file tasks. This module
    only tells whether those tasks can be skipped, from a stamp that records the state of those
    paths and a fingerprint of the role's inputs as they were when the tasks last ran to the end
    (C(files_converged)); with C(write_stamp) it writes that stamp.
options:
  packages:
    description: Debian packages whose version and status are read with dpkg-query.
    type: list
    elements: str
    default: []
  headers_package:
    description: Also read the running kernel's headers package, C(linux-headers-<kernel>).
    type: bool
    default: false
  version_package:
    description: The package whose installed version is the driver's (dpkg or rpm).
    type: str
  services:
    description: systemd units whose enabled and active states are read.
    type: list
    elements: str
    default: []
  paths:
    description: The paths the role writes (files or directories, or paths it removes).
    type: list
    elements: path
    default: []
  fingerprint:
    description:
      - A digest of every input the role's file tasks read; the components other sources enable
        (see I(components_exclude)) are added to it here.
    type: str
    default: ""
  stamp:
    description: Where the stamp is kept.
    type: path
    default: /var/lib/gpuinfra/nvidia_driver.json
  write_stamp:
    description:
      - Record the paths' states and the fingerprint in the stamp (not in check mode), and return
        no facts: those read before stay as they are.
    type: bool
    default: false
  components_exclude:
    description:
      - When set, read which of Debian's components contrib, non-free and non-free-firmware the
        host's apt sources enable, ignoring this file (the one the role writes).
    type: path
"""

RETURN = r"""
ansible_facts:
  description: >-
    nvidia_driver_host: in_container, kernel (running), kernel_flavour (amd64, generic, or
    null), kernel_headers (its build directory
    exists), secure_boot (mokutil's first line, why it could not tell, or null without
    mokutil), initramfs_tool (path or
    null), persistenced_unit, device_node (/dev/nvidiactl), packages (name: version, status),
    installed (version of version_package, '' when absent), services (unit: enabled, active),
    components_elsewhere (list, or null when not asked), files_converged (the stamp matches the
    paths and the fingerprint), files_drift (why not, or '').
  returned: unless write_stamp
  type: dict
"""

import glob
import os
import re
import shutil

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.gpuinfra_node_state import (
    dpkg_packages,
    stamp_drift,
    unit_states,
    write_stamp,
)

COMPONENTS = ("contrib", "non-free", "non-free-firmware")
INITRAMFS_TOOLS = ("/usr/sbin/update-initramfs", "/usr/bin/dracut")
PERSISTENCED_UNIT = "/usr/lib/systemd/system/nvidia-persistenced.service"


def installed_version(module, package, packages):
    if not package:
        return ""
    if package in packages:
        return (
            packages[package]["version"]
            if packages[package]["status"].endswith(" installed")
            else ""
        )
    if shutil.which("rpm"):
        rc, out, _err = module.run_command(["rpm", "-q", "--qf", "%{VERSION}", package])
        return out.strip() if rc == 0 else ""
    return ""


APT_ETC = "/etc/apt"


def source_files():
    """The host's apt sources, one-line and deb822; /etc/apt/sources.list may be absent (Debian 13's
    default has only sources.list.d/debian.sources)."""
    parts = os.path.join(APT_ETC, "sources.list.d")
    return [os.path.join(APT_ETC, "sources.list")] + sorted(
        glob.glob(os.path.join(parts, "*.list")) + glob.glob(os.path.join(parts, "*.sources"))
    )


def components_elsewhere(module, exclude):
    """Which of COMPONENTS some apt source other than ``exclude`` names, one-line or deb822."""
    found = set()
    for path in source_files():
        if path == exclude or not os.path.exists(path):
            continue
        try:
            with open(path, encoding="utf-8", errors="replace") as handle:
                text = handle.read()
        except OSError as err:
            module.fail_json(msg="cannot read the apt source %s: %s" % (path, err))
        for line in text.splitlines():
            words = line.split("#", 1)[0].split()
            found.update(c for c in COMPONENTS if c in words[1:])
    return [c for c in COMPONENTS if c in found]


def kernel_flavour(release):
    """The flavour of a Debian or Ubuntu kernel release (6.1.0-28-amd64: amd64, 6.8.0-45-generic:
    generic), which names its meta-packages; None for a kernel not packaged that way."""
    match = re.match(r"^\d+\.\d+\.\d+-\d+(?:\.\d+)?-([a-z][a-z0-9-]*)$", release)
    return match.group(1) if match else None


def in_container(module):
    tool = shutil.which("systemd-detect-virt")
    if not tool:
        return False
    rc, _out, _err = module.run_command([tool, "--container"])
    return rc == 0


def secure_boot(module):
    tool = shutil.which("mokutil")
    if not tool:
        return None
    rc, out, err = module.run_command([tool, "--sb-state"])
    if rc == 0 and out.strip():
        return out.splitlines()[0].strip()
    return "unknown (mokutil: %s)" % ((err or out).strip().splitlines() or ["no answer"])[0]


def main():
    module = AnsibleModule(
        argument_spec={
            "packages": {"type": "list", "elements": "str", "default": []},
            "headers_package": {"type": "bool", "default": False},
            "version_package": {"type": "str"},
            "services": {"type": "list", "elements": "str", "default": []},
            "paths": {"type": "list", "elements": "path", "default": []},
            "fingerprint": {"type": "str", "default": ""},
            "stamp": {"type": "path", "default": "/var/lib/gpuinfra/nvidia_driver.json"},
            "write_stamp": {"type": "bool", "default": False},
            "components_exclude": {"type": "path"},
        },
        supports_check_mode=True,
    )
    params = module.params
    components = (
        components_elsewhere(module, params["components_exclude"])
        if params["components_exclude"]
        else None
    )
    # Which components the role's own source file names depends on the host's other sources: part
    # of what the file tasks read, so part of the fingerprint.
    fingerprint = params["fingerprint"] + ("" if components is None else " " + ",".join(components))
    if params["write_stamp"]:
        # Bookkeeping only: writing the stamp configures nothing, and the facts read before stay.
        if not module.check_mode:
            write_stamp(params["stamp"], params["paths"], fingerprint)
        module.exit_json(changed=False, stamp=params["stamp"])
    kernel = os.uname().release
    flavour = kernel_flavour(kernel)
    names = list(params["packages"])
    if names and params["headers_package"]:
        names.append("linux-headers-%s" % kernel)
        # What the kernel policy installs and holds: the running image, and the flavour's
        # meta-packages that pull each new kernel and its headers.
        names.append("linux-image-%s" % kernel)
        if flavour:
            names += ["linux-image-%s" % flavour, "linux-headers-%s" % flavour]
    packages = dpkg_packages(module, names)
    facts = {
        "in_container": in_container(module),
        # Read here, not from gathered facts: those can predate a reboot into a new kernel.
        "kernel": kernel,
        "kernel_flavour": flavour,
        "kernel_headers": os.path.exists("/lib/modules/%s/build" % kernel),
        "secure_boot": secure_boot(module),
        "initramfs_tool": next((t for t in INITRAMFS_TOOLS if os.access(t, os.X_OK)), None),
        "persistenced_unit": os.path.exists(PERSISTENCED_UNIT),
        "device_node": os.path.exists("/dev/nvidiactl"),
        "packages": packages,
        "installed": installed_version(module, params["version_package"], packages),
        "services": unit_states(module, params["services"]),
        "components_elsewhere": components,
    }
    facts["files_drift"] = stamp_drift(params["stamp"], params["paths"], fingerprint)
    facts["files_converged"] = facts["files_drift"] == ""
    # The stamp is bookkeeping: writing it configures nothing, so it is not a change to the host.
    module.exit_json(changed=False, ansible_facts={"nvidia_driver_host": facts})


if __name__ == "__main__":
    main()

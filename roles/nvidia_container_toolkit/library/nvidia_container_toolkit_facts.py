#!/usr/bin/python
"""Ansible module: read what the nvidia_container_toolkit role decides from, as facts."""

from __future__ import annotations

DOCUMENTATION = r"""
module: nvidia_container_toolkit_facts
short_description: Read a host's container runtimes, toolkit packages and containerd setup
description:
  - Reads, without changing anything, what the nvidia_container_toolkit role decides from, and
    returns it as the fact C(nvidia_container_toolkit_host).
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
  containerd_config:
    description: containerd's main configuration file.
    type: path
    default: /etc/containerd/config.toml
  containerd_imports:
    description: The imports entry the role needs in the main configuration.
    type: str
    required: true
  keyring:
    description: Where the repository's signing key is kept.
    type: path
    required: true
  cdi_spec:
    description: Where the CDI specification is written.
    type: path
    required: true
  services:
    description: systemd units whose enabled and active states are read.
    type: list
    elements: str
    default: []
  paths:
    description: The paths the role writes (files or directories).
    type: list
    elements: path
    default: []
  fingerprint:
    description: A digest of every input the role's file tasks read.
    type: str
    default: ""
  stamp:
    description: Where the stamp is kept.
    type: path
    default: /var/lib/gpuinfra/nvidia_container_toolkit.json
  write_stamp:
    description:
      - Record the paths' states and the fingerprint in the stamp (not in check mode), and return
        no facts: those read before stay as they are.
    type: bool
    default: false
"""

RETURN = r"""
ansible_facts:
  description: >-
    nvidia_container_toolkit_host: dockerd, containerd (their binaries exist), device_node
    (/dev/nvidiactl), packages (name: version, status), containerd_config (absent; cri_disabled:
    it disables the CRI plugin, as Docker's containerd.io ships it; imports: it imports the role's
    drop-ins; other_imports: it has an imports list without them; no_imports),
    keyring (the key file exists), cdi_spec (the specification exists), services (unit: enabled,
    active), files_converged (the stamp matches the paths and the fingerprint), files_drift (why
    not, or '').
  returned: unless write_stamp
  type: dict
"""

import os
import re

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.gpuinfra_node_state import (
    dpkg_packages,
    stamp_drift,
    unit_states,
    write_stamp,
)


# The CRI plugin's names in disabled_plugins: its short name (a version 1 file, as the
# containerd.io package ships), its URI, and those of the plugins containerd 2 split it into.
CRI_PLUGINS = (
    "cri",
    "io.containerd.grpc.v1.cri",
    "io.containerd.cri.v1.runtime",
    "io.containerd.cri.v1.images",
)
_DISABLED = re.compile(r"^[ \t]*disabled_plugins[ \t]*=[ \t]*\[([^\]]*)\]", re.MULTILINE)
_QUOTED = re.compile(r"\"([^\"]*)\"|'([^']*)'")


def disabled_plugins(text):
    """The plugins a top-level disabled_plugins list names (before the first table)."""
    top = re.split(r"^[ \t]*\[", text, maxsplit=1, flags=re.MULTILINE)[0]
    found = _DISABLED.search(top)
    if not found:
        return []
    return [a or b for a, b in _QUOTED.findall(found.group(1))]


def containerd_config(module, path, imports):
    """How the main configuration stands with the role's drop-ins."""
    if not os.path.exists(path):
        return "absent"
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            text = handle.read()
    except OSError as err:
        module.fail_json(msg="cannot read %s: %s" % (path, err))
    # A drop-in cannot enable the plugin again: containerd appends the imported lists.
    if any(name in CRI_PLUGINS for name in disabled_plugins(text)):
        return "cri_disabled"
    if imports in text:
        return "imports"
    if re.search(r"^\s*imports\s*=", text, re.MULTILINE):
        return "other_imports"
    return "no_imports"


def main():
    module = AnsibleModule(
        argument_spec={
            "packages": {"type": "list", "elements": "str", "default": []},
            "containerd_config": {"type": "path", "default": "/etc/containerd/config.toml"},
            "containerd_imports": {"type": "str", "required": True},
            "keyring": {"type": "path", "required": True},
            "cdi_spec": {"type": "path", "required": True},
            "services": {"type": "list", "elements": "str", "default": []},
            "paths": {"type": "list", "elements": "path", "default": []},
            "fingerprint": {"type": "str", "default": ""},
            "stamp": {"type": "path", "default": "/var/lib/gpuinfra/nvidia_container_toolkit.json"},
            "write_stamp": {"type": "bool", "default": False},
        },
        supports_check_mode=True,
    )
    params = module.params
    if params["write_stamp"]:
        # Bookkeeping only: writing the stamp configures nothing, and the facts read before stay.
        if not module.check_mode:
            write_stamp(params["stamp"], params["paths"], params["fingerprint"])
        module.exit_json(changed=False, stamp=params["stamp"])
    facts = {
        "dockerd": os.path.exists("/usr/bin/dockerd"),
        "containerd": os.path.exists("/usr/bin/containerd"),
        "device_node": os.path.exists("/dev/nvidiactl"),
        "packages": dpkg_packages(module, params["packages"]),
        "containerd_config": containerd_config(
            module, params["containerd_config"], params["containerd_imports"]
        ),
        "keyring": os.path.isfile(params["keyring"]),
        "cdi_spec": os.path.exists(params["cdi_spec"]),
        "services": unit_states(module, params["services"]),
    }
    facts["files_drift"] = stamp_drift(params["stamp"], params["paths"], params["fingerprint"])
    facts["files_converged"] = facts["files_drift"] == ""
    # The stamp is bookkeeping: writing it configures nothing, so it is not a change to the host.
    module.exit_json(changed=False, ansible_facts={"nvidia_container_toolkit_host": facts})


if __name__ == "__main__":
    main()

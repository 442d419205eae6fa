#!/usr/bin/python
"""Ansible module: compare the node check reports of a group's hosts and name the outliers."""

from __future__ import annotations

DOCUMENTATION = r"""
module: gpu_node_check_fleet
short_description: Find hosts of a group whose driver, VBIOS, kernel or NICs differ
description:
  - Compares the C(inventory) part of the gpu_node_check reports across the hosts of each group:
    driver build, VBIOS versions, kernel, and each recorded NIC's driver and firmware.
  - The most common value is the group's; a host with another value is an outlier. Runs on the
    controller and changes nothing.
options:
  reports:
    description: The gpu_node_check report of each host, by inventory name.
    type: dict
    required: true
  groups:
    description: Groups to compare within, each a list of inventory names.
    type: dict
    required: true
  fail_on_drift:
    description: Fail when a group's hosts differ.
    type: bool
    default: true
"""

RETURN = r"""
findings:
  description: One per group and value that differ (group, attribute, majority, outliers, message).
  returned: always
  type: list
  elements: dict
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.nvidia_node_check import compare_fleet


def main():
    module = AnsibleModule(
        argument_spec={
            "reports": {"type": "dict", "required": True},
            "groups": {"type": "dict", "required": True},
            "fail_on_drift": {"type": "bool", "default": True},
        },
        supports_check_mode=True,
    )
    groups = {name: list(hosts or []) for name, hosts in module.params["groups"].items()}
    findings = compare_fleet(module.params["reports"], groups)
    compared = sorted(name for name, hosts in groups.items()
                      if len([h for h in hosts if h in module.params["reports"]]) > 1)
    result = {"changed": False, "findings": findings, "groups_compared": compared}
    if findings:
        msg = "%d difference(s) between hosts of one group: %s" % (
            len(findings), "; ".join(f["message"] for f in findings))
        if module.params["fail_on_drift"]:
            module.fail_json(msg=msg, **result)
        module.exit_json(msg=msg, **result)
    module.exit_json(msg="%d group(s) compared, no host differs: %s" % (
        len(compared), ", ".join(compared) or "none had two hosts"), **result)


if __name__ == "__main__":
    main()

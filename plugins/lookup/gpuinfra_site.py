"""Ansible lookup: check a site as a whole, as ``gpuinfra config check --site`` does.

The gpuinfra_addon lookup checks one add-on's settings at a time. What ``config check --site``
refuses across add-ons and hosts needs them all at once: a Kueue team in an enabled add-on's
namespace, and the integrity rules (a GPU pod no host can run, a Kueue flavor that selects no
host, a host's MIG label the GPU Operator has no layout for, ...). This lookup runs that same
check on the variables as Ansible resolved them: every add-on's ``<addon>_<field>`` of the
play, and each inventory host's ``hostvars``. A mistake fails the task with the one-line
problems the ``gpuinfra`` CLI prints; the integrity warnings are shown as Ansible warnings.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ansible.errors import AnsibleLookupError
from ansible.plugins.lookup import LookupBase
from ansible.utils.display import Display

DOCUMENTATION = r"""
name: gpuinfra_site
short_description: Check a site as a whole (every add-on's settings, the inventory's hosts)
description:
  - Builds every add-on's settings from the variables named C(<addon>_<field>) and checks them
    across add-ons, then runs the gpuinfra integrity check of those add-ons against the
    inventory's hosts and their variables, as C(gpuinfra config check --site) does.
  - First, each inventory source that is a gpuinfra site (a directory, or a hosts file's, holding
    hosts.yml) has its files checked as C(gpuinfra config check --site) checks them. A
    misspelt variable of a node role, or one set in two files of a group, is refused there,
    since the resolved variables cannot tell it from a user's own; so is an add-on setting
    outside group_vars/all, which this play, on the controller, would not see.
  - An inventory without hosts declares no nodes, so only the settings are checked.
  - Runs on the controller; the gpuinfra package must be importable by the Python running Ansible.
"""

EXAMPLES = r"""
- name: Check the site as a whole before changing the cluster
  ansible.builtin.assert:
    that: query('gpuinfra_site') | length == 1
    quiet: true
"""

RETURN = r"""
_raw:
  description:
    - One result with keys hosts (the inventory hosts checked as nodes) and warnings (the
      integrity warnings, one line each).
  type: list
  elements: dict
"""

display = Display()


class LookupModule(LookupBase):
    def run(
        self, terms: list[str], variables: dict[str, Any] | None = None, **kwargs: Any
    ) -> list[dict[str, Any]]:
        try:
            from gpuinfra import addons, integrity, site
            from gpuinfra.errors import GpuinfraError
            from gpuinfra.loading import display_path
        except ImportError as err:
            raise AnsibleLookupError(
                f"the gpuinfra package is not importable by this Ansible ({err}); run "
                "ansible-playbook from the project's virtual environment (.venv/bin/ansible-playbook)"
            ) from None
        if terms:
            raise AnsibleLookupError("gpuinfra_site takes no terms: it checks the whole site")

        variables = variables or {}
        prefixes = tuple(f"{addon}_" for addon in addons.ADDONS)
        addon_vars = {
            name: self._templar.template(value)
            for name, value in variables.items()
            if name.startswith(prefixes)
        }
        # The inventory's own hosts (not the implicit localhost the play runs on); hostvars
        # templates a value, under its host's variables, when it is read.
        names = list(variables.get("groups", {}).get("all", []))
        hostvars = variables.get("hostvars", {})
        sources = [str(s) for s in variables.get("ansible_inventory_sources") or []]
        shown = ", ".join(display_path(Path(s)) for s in sources) or "the inventory"
        try:
            if names:
                for directory in _site_dirs(sources, site.HOSTS_FILES):
                    # Also what this play would not see: an add-on setting outside group_vars/all.
                    addons.settings_from_site(site.load_site(directory))
            settings = addons.settings_from_play(
                addon_vars, file=lambda addon: f"variables of role {addon}"
            )
            # The add-ons' variables are the play's, checked above; the hosts' are the nodes'.
            checked = site.resolved_site(
                shown, {name: hostvars[name] for name in names}, skip=addons.ADDONS
            )
            warnings = integrity.check_play(settings, checked, shown)
        except GpuinfraError as err:
            raise AnsibleLookupError("\n".join(err.lines())) from None
        # As config check prints them, after "warning: ".
        lines = [f"{w.object} {w.path}: {w.message}" for w in warnings]
        for line in lines:
            display.warning(line)
        return [{"hosts": sorted(checked.hosts), "warnings": lines}]


def _site_dirs(sources: list[str], hosts_files: tuple[str, ...]) -> list[Path]:
    """The gpuinfra sites among the inventory's sources: a directory, or the directory of a
    hosts file, that holds one of ``hosts_files``."""
    found: list[Path] = []
    for source in sources:
        path = Path(source)
        if not path.exists():
            continue  # a host list (``-i host1,host2,``)
        directory = path if path.is_dir() else path.parent
        has_hosts = any((directory / name).is_file() for name in hosts_files)
        if has_hosts and directory not in found:
            found.append(directory)
    return found

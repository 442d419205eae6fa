"""Every input the node roles' file tasks read is in the fingerprint their stamp compares.

The facts module lets a converged host skip the file tasks while the fingerprint of
``_<role>_file_inputs`` and the written paths are as they were when the tasks last ran to the end.
A variable those tasks or their templates read but the fingerprint leaves out would change
nothing on the next converge: the stamp would still match. This test reads the task files and
templates with Jinja's own parser and follows role variables to what they are made of.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jinja2
import jinja2.meta
import pytest
import yaml

ROLES = Path(__file__).resolve().parents[3] / "roles"
FILE_TASKS = {
    "nvidia_driver": (
        ["files.yml", "repositories_distro.yml", "repositories_cuda_repo_apt.yml", "pin_apt.yml"],
        [
            "nvidia-driver.pref.j2",
            "unattended-upgrades-nvidia.conf.j2",
            "debian-nonfree.sources.j2",
        ],
    ),
    "nvidia_container_toolkit": (
        ["repository.yml", "finish_files.yml", "containerd.yml"],
        ["containerd-config.toml.j2", "containerd-nvidia.toml.j2"],
    ),
}
# Read on the host by the facts module, which adds it to the fingerprint itself.
HOST_SIDE = {"_nvidia_driver_missing_components"}
# Facts (the distribution, the OS family) reach the fingerprint through the inputs that use them;
# omit and item are Ansible's own; the host name only appears in failure messages; check mode
# writes nothing, so what it skips leaves the stamp as it was.
BUILTIN = {
    "ansible_facts",
    "omit",
    "item",
    "lookup",
    "ansible_managed",
    "inventory_hostname",
    "ansible_check_mode",
}


class AnyName(dict[str, Any]):
    """Every filter and test name exists: Ansible's own are not registered with plain Jinja."""

    def __contains__(self, key: object) -> bool:
        return True

    def get(self, key: str, default: Any = None) -> Any:
        return super().get(key, lambda *args, **kwargs: None)


ENV = jinja2.Environment()
ENV.filters = AnyName()
ENV.tests = AnyName()


def names(text: str) -> set[str]:
    return set(jinja2.meta.find_undeclared_variables(ENV.parse(text)))


def strings(node: Any) -> list[str]:
    if isinstance(node, str):
        return [node]
    if isinstance(node, dict):
        return [s for value in node.values() for s in strings(value)]
    if isinstance(node, list):
        return [s for value in node for s in strings(value)]
    return []


def read_by_file_tasks(role: str) -> set[str]:
    task_files, templates = FILE_TASKS[role]
    found: set[str] = set()
    # What a file task registers is its own result, read by the tasks after it: not an input.
    registered: set[str] = set()
    for name in task_files:
        for task in yaml.safe_load((ROLES / role / "tasks" / name).read_text()):
            if f"{role}_facts" in task:
                continue  # the stamp's own bookkeeping
            registered.add(task.pop("register", ""))
            when = task.pop("when", [])
            for condition in [when] if isinstance(when, str) else when:
                found |= names("{{ " + condition + " }}")
            for text in strings(task):
                found |= names(text)
    for name in templates:
        found |= names((ROLES / role / "templates" / name).read_text())
    return found - registered


def uncovered(role: str, role_vars: dict[str, Any]) -> list[str]:
    """What the file tasks read that the role's fingerprint does not cover."""
    fingerprinted = {
        name for text in strings(role_vars[f"_{role}_file_inputs"]) for name in names(text)
    }

    def covered(name: str, seen: frozenset[str] = frozenset()) -> bool:
        if name in fingerprinted or name in BUILTIN or name in HOST_SIDE:
            return True
        if name not in role_vars or name in seen:
            return False
        # A role variable is covered when everything it is made of is (a constant is).
        return all(
            covered(part, seen | {name})
            for text in strings(role_vars[name])
            for part in names(text)
        )

    return sorted(name for name in read_by_file_tasks(role) if not covered(name))


def role_vars(role: str) -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((ROLES / role / "vars" / "main.yml").read_text())
    return loaded


@pytest.mark.parametrize("role", sorted(FILE_TASKS))
def test_every_input_of_the_file_tasks_is_fingerprinted(role: str) -> None:
    missing = uncovered(role, role_vars(role))
    assert missing == [], f"add these to _{role}_file_inputs in roles/{role}/vars/main.yml"


def test_an_input_left_out_of_the_fingerprint_is_named() -> None:
    driver = role_vars("nvidia_driver")
    del driver["_nvidia_driver_file_inputs"]["pin_patterns"]
    del driver["_nvidia_driver_file_inputs"]["apt_version"]
    # apt_version is a role variable: what it is made of (the pin, the distribution) is named.
    assert uncovered("nvidia_driver", driver) == [
        "_nvidia_driver_apt_version",
        "nvidia_driver_pin_patterns",
    ]

"""Every step of the roles and playbooks that calls the Kubernetes API server has an end.

The kubernetes Python client behind kubernetes.core sets no timeout on its requests: a step
without Ansible's task ``timeout`` waits for good on an API server that accepts and never
answers (test_addons_playbook.py runs one). Helm's install is the one exception, on purpose:
Helm's client gives up on a silent connection by itself, and a helm killed mid-upgrade would
leave its release locked (docs/decisions/0090).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[3]
LEFT_TO_HELM = {("roles/addon_helm/tasks/install.yml", "kubernetes.core.helm")}
_NESTED = ("block", "rescue", "always", "tasks", "pre_tasks", "post_tasks", "handlers")


def _tasks(node: Any) -> Iterator[dict[str, Any]]:
    if isinstance(node, list):
        for item in node:
            yield from _tasks(item)
    elif isinstance(node, dict):
        yield node
        for key in _NESTED:
            yield from _tasks(node.get(key))


def _cluster_calls() -> Iterator[tuple[str, str, dict[str, Any]]]:
    files = sorted([*ROOT.glob("roles/*/tasks/*.yml"), *ROOT.glob("playbooks/*.yml")])
    for path in files:
        for task in _tasks(yaml.safe_load(path.read_text())):
            for key in task:
                if key.startswith("kubernetes.core."):
                    yield str(path.relative_to(ROOT)), key, task


def test_the_roles_call_the_cluster_from_many_places() -> None:
    # The walk finds what it checks: every add-on role, the registration role and the upgrade.
    files = {file for file, _, _ in _cluster_calls()}
    assert len(list(_cluster_calls())) >= 20
    assert {"roles/addon_helm/tasks/reach.yml", "playbooks/upgrade_driver.yml"} <= files
    assert "roles/gpu_node_registration/tasks/main.yml" in files


def test_every_call_to_the_cluster_has_a_task_timeout() -> None:
    unbounded = [
        f"{file}: {task.get('name')} ({module})"
        for file, module, task in _cluster_calls()
        if "timeout" not in task and (file, module) not in LEFT_TO_HELM
    ]
    assert unbounded == []


def test_a_wait_is_bounded_beyond_its_own_timeout() -> None:
    # A step that waits must not be cut short by its own bound: the wait, then the request bound.
    for file, module, task in _cluster_calls():
        wait = (task[module] or {}).get("wait_timeout") or (
            (task[module] or {}).get("delete_options") or {}
        ).get("wait_timeout")
        if wait is None:
            continue
        assert "+" in str(task["timeout"]), (file, task.get("name"), task["timeout"])
        assert str(wait).strip("{} ") in str(task["timeout"]), (file, task.get("name"))

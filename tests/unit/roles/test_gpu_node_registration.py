"""roles/gpu_node_registration: the label and taint it registers are the Python stack's, its
preflight refuses what a kubelet would not register, and it writes the kubelet's line once.

The plays run against this machine with the role alone and a defaults file under tmp_path.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuinfra.addons.base import GPU_TAINT, GPU_TYPE_LABEL

from .conftest import ROLES, run_playbook_here

ROLE = ROLES / "gpu_node_registration"
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="the role writes a root-owned file")


def test_label_key_and_taint_are_the_python_constants() -> None:
    role_vars = yaml.safe_load((ROLE / "vars" / "main.yml").read_text())
    assert role_vars["_gpu_node_registration_gpu_type_label"] == GPU_TYPE_LABEL
    assert role_vars["_gpu_node_registration_gpu_taint"] == GPU_TAINT


def test_nodes_playbook_registers_kubernetes_nodes_after_the_toolkit(repo_root: Path) -> None:
    tasks = yaml.safe_load((repo_root / "playbooks" / "nodes.yml").read_text())[0]["tasks"]
    roles = [
        t.get("ansible.builtin.import_role") or t.get("ansible.builtin.include_role") or {}
        for t in tasks
    ]
    names = [role.get("name") for role in roles]
    position = names.index("gpu_node_registration")
    task = tasks[position]
    assert task["when"] == "gpuinfra_k8s_node | default(false) | bool"
    # Included, so that a host that is no Kubernetes node skips the role in one task; its tasks
    # carry the registration tag as an import's would.
    assert "registration" in task["tags"]
    assert roles[position]["apply"]["tags"] == ["registration"]
    toolkit_finish = next(
        i
        for i, t in enumerate(tasks)
        if t.get("ansible.builtin.import_role", {}).get("tasks_from") == "finish"
        and t["ansible.builtin.import_role"]["name"] == "nvidia_container_toolkit"
    )
    assert toolkit_finish < position < names.index("gpu_node_check")


def converge(
    tmp_path: Path, variables: dict[str, Any], env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    inventory = tmp_path / "hosts.yml"
    inventory.write_text("all:\n  hosts:\n    localhost:\n      ansible_connection: local\n")
    playbook = tmp_path / "registration.yml"
    playbook.write_text(
        yaml.safe_dump(
            [{"hosts": "all", "gather_facts": False, "roles": ["gpu_node_registration"]}]
        )
    )
    extra = {"gpu_node_registration_defaults_file": str(tmp_path / "kubelet"), **variables}
    return run_playbook_here(
        tmp_path, "-i", str(inventory), "-e", json.dumps(extra), str(playbook), env=env
    )


def changed(result: subprocess.CompletedProcess[str]) -> int:
    found = re.search(r"^localhost\s+: ok=\d+\s+changed=(\d+)", result.stdout, re.M)
    assert found, result.stdout
    return int(found.group(1))


@as_root
def test_writes_the_line_once_and_keeps_the_rest_of_the_file(tmp_path: Path) -> None:
    defaults = tmp_path / "kubelet"
    defaults.write_text('HTTP_PROXY=http://proxy:3128\nKUBELET_EXTRA_ARGS="--old"\n')
    variables = {
        "gpu_node_registration_gpu_type": "h200",
        "gpu_node_registration_labels": {"zone": "b", "example.com/rack": "r7"},
        "gpu_node_registration_kubelet_extra_args": [
            "--max-pods=64",
            "--eviction-hard=memory.available<100Mi",
        ],
    }
    first = converge(tmp_path, variables)
    assert first.returncode == 0, first.stdout + first.stderr
    taint = f"{GPU_TAINT['key']}={GPU_TAINT['value']}:{GPU_TAINT['effect']}"
    line = (
        f'KUBELET_EXTRA_ARGS="--node-labels={GPU_TYPE_LABEL}=h200,example.com/rack=r7,zone=b'
        f' --register-with-taints={taint} --max-pods=64 --eviction-hard=memory.available<100Mi"'
    )
    lines = defaults.read_text().splitlines()
    assert lines[0] == "HTTP_PROXY=http://proxy:3128"
    assert lines[1].startswith("# KUBELET_EXTRA_ARGS is managed by gpuinfra")
    assert lines[2:] == [line]
    # No kubelet here: the handler says so instead of restarting one.
    assert "The kubelet is not installed on localhost" in " ".join(first.stdout.split())

    again = converge(tmp_path, variables)
    assert again.returncode == 0, again.stdout + again.stderr
    assert changed(again) == 0

    untainted = converge(tmp_path, {**variables, "gpu_node_registration_taint": False})
    assert untainted.returncode == 0, untainted.stdout + untainted.stderr
    assert "--register-with-taints" not in defaults.read_text()


@as_root
@pytest.mark.parametrize(
    ("variables", "message"),
    [
        (
            {"gpu_node_registration_gpu_type": ""},
            "gpu_node_registration_gpu_type is '' on localhost: set it for this host",
        ),
        (
            {"gpu_node_registration_gpu_type": "H100_80GB"},
            "gpu_node_registration_gpu_type is 'H100_80GB' on localhost",
        ),
        (
            {"gpu_node_registration_labels": {"node-role.kubernetes.io/gpu": ""}},
            "gpu_node_registration_labels sets node-role.kubernetes.io/gpu: a kubelet may not",
        ),
        (
            {"gpu_node_registration_labels": {"topology.k8s.io/zone": "b"}},
            "gpu_node_registration_labels sets topology.k8s.io/zone",
        ),
        (
            {"gpu_node_registration_labels": {GPU_TYPE_LABEL: "l4"}},
            f"gpu_node_registration_labels sets {GPU_TYPE_LABEL}: remove it",
        ),
        (
            {"gpu_node_registration_labels": {"bad key": "x"}},
            "gpu_node_registration_labels has keys that are not label keys: bad key.",
        ),
        (
            {"gpu_node_registration_labels": {"rack": "r 7", "slots": 8}},
            "gpu_node_registration_labels has values that are not label values, at slots, rack",
        ),
        (
            {"gpu_node_registration_kubelet_extra_args": ["--max-pods 64"]},
            'gpu_node_registration_kubelet_extra_args has ["--max-pods 64"]: write one flag',
        ),
        (
            {"gpu_node_registration_kubelet_extra_args": ["--node-labels=a=b"]},
            "gpu_node_registration_kubelet_extra_args has --node-labels=a=b: remove it",
        ),
    ],
    ids=[
        "empty-type",
        "type-not-dns-label",
        "kubernetes-io-key",
        "k8s-io-key",
        "gpu-type-key",
        "bad-key",
        "bad-values",
        "arg-with-space",
        "owned-arg",
    ],
)
def test_preflight_refuses_with_what_to_change(
    tmp_path: Path, variables: dict[str, Any], message: str
) -> None:
    result = converge(tmp_path, {"gpu_node_registration_gpu_type": "l4"} | variables)
    assert result.returncode != 0
    output = " ".join((result.stdout + result.stderr).split())
    assert message in output
    assert not (tmp_path / "kubelet").exists()


RECORDER = """#!/usr/bin/python
import json
import os

from ansible.module_utils.basic import AnsibleModule, _load_params


def main():
    args = {k: v for k, v in _load_params().items() if not k.startswith("_ansible")}
    module = AnsibleModule(argument_spec={k: {"type": "raw"} for k in args})
    with open(os.environ["STAND_IN_LOG"], "a") as log:
        log.write(json.dumps({"module": "%s", "args": args}) + "\\n")
    module.exit_json(changed=True)


main()
"""


@as_root
def test_an_already_registered_node_is_labelled_and_tainted_through_the_api(
    tmp_path: Path,
) -> None:
    """There is no API server here: stand-ins for the two kubernetes.core modules record the
    calls the role makes."""
    modules = tmp_path / "collections" / "ansible_collections" / "kubernetes" / "core"
    (modules / "plugins" / "modules").mkdir(parents=True)
    for name in ("k8s", "k8s_taint"):
        (modules / "plugins" / "modules" / f"{name}.py").write_text(RECORDER % name)
    log = tmp_path / "calls.jsonl"
    env = {"ANSIBLE_COLLECTIONS_PATH": str(tmp_path / "collections"), "STAND_IN_LOG": str(log)}
    variables = {
        "gpu_node_registration_gpu_type": "h100",
        "gpu_node_registration_labels": {"example.com/rack": "r7"},
        "gpu_node_registration_update_node": True,
        "gpu_node_registration_node_name": "gpu-node-01",
        "gpuinfra_kubeconfig": "/etc/gpuinfra/kubeconfig",
    }
    result = converge(tmp_path, variables, env)
    assert result.returncode == 0, result.stdout + result.stderr
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    assert [c["module"] for c in calls] == ["k8s", "k8s_taint"]
    label, taint = (c["args"] for c in calls)
    assert label["state"] == "patched" and label["kind"] == "Node"
    assert label["name"] == "gpu-node-01"
    assert label["definition"]["metadata"]["labels"] == {
        GPU_TYPE_LABEL: "h100",
        "example.com/rack": "r7",
    }
    assert taint["state"] == "present" and taint["name"] == "gpu-node-01"
    assert taint["taints"] == [GPU_TAINT]
    assert {c["args"]["kubeconfig"] for c in calls} == {"/etc/gpuinfra/kubeconfig"}
    # Off by default: a host that has not joined yet is left to its first registration.
    log.unlink()
    variables.pop("gpu_node_registration_update_node")
    result = converge(tmp_path, variables, env)
    assert result.returncode == 0 and not log.exists()

"""Opt-in: apply the add-ons to a real cluster with playbooks/addons.yml, twice.

Runs when KUBECONFIG names a kubeconfig whose API server answers, and Helm is on the PATH; it
is skipped otherwise, saying which is missing. It changes that cluster: it installs the
Prometheus stack, the GPU Operator, Volcano and Kueue (Triton needs a model repository and a
GPU node, so it stays off unless GPUINFRA_TEST_ADDONS_VARS names a vars file that enables it),
and creates the Grafana admin Secret the Prometheus stack reads if it is missing.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuinfra import addons

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
ANSIBLE_PLAYBOOK = Path(sys.executable).parent / "ansible-playbook"
SETTINGS: dict[str, Any] = {
    "volcano_enabled": True,
    "volcano_queues": [{"name": "gpuinfra-test", "weight": 1, "reclaimable": True}],
    "kueue_flavors": [{"gpu_type": "test", "gpus": 0, "cpu": "1", "memory": "1Gi"}],
    "kueue_teams": ["gpuinfra-test"],
    "triton_enabled": False,
}


def _cluster() -> Any:
    """A client for the KUBECONFIG cluster, or a skip saying why there is none."""
    path = os.environ.get("KUBECONFIG")
    if not path:
        pytest.skip("KUBECONFIG is not set: no cluster to apply the add-ons to")
    if shutil.which("helm") is None:
        pytest.skip("helm is not on the PATH: the add-on roles install charts with it")
    from kubernetes import client, config

    try:
        api = config.new_client_from_config(config_file=path.split(os.pathsep)[0])
        client.VersionApi(api).get_code()
    except Exception as err:  # any failure to reach the cluster means: nothing to test against
        pytest.skip(f"the cluster in KUBECONFIG={path} does not answer: {err}")
    return api


def _ensure_grafana_secret(api: Any, settings: dict[str, Any]) -> None:
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    stack = addons.settings_from_role_vars("prometheus_stack", settings)
    assert isinstance(stack, addons.PrometheusStackSettings)
    core = client.CoreV1Api(api)
    try:
        core.create_namespace({"metadata": {"name": stack.namespace}})
    except ApiException as err:
        if err.status != 409:
            raise
    body = {
        "metadata": {"name": stack.grafana_admin_secret},
        "stringData": {
            stack.grafana_admin_user_key: "admin",
            stack.grafana_admin_password_key: secrets.token_urlsafe(24),
        },
    }
    try:
        core.create_namespaced_secret(stack.namespace, body)
    except ApiException as err:
        if err.status != 409:
            raise


def _apply(vars_file: Path, inventory: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            str(ANSIBLE_PLAYBOOK),
            "-i",
            str(inventory),
            "-e",
            f"@{vars_file}",
            "playbooks/addons.yml",
        ],
        cwd=ROOT,
        env={**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1"},
        capture_output=True,
        text=True,
        timeout=3600,
        check=False,
    )


def _changed(output: str) -> int:
    match = re.search(r"localhost\s+: ok=\d+\s+changed=(\d+)", output)
    assert match, output
    return int(match.group(1))


def test_addons_apply_to_a_real_cluster_and_converge(tmp_path: Path) -> None:
    api = _cluster()
    settings = dict(SETTINGS)
    extra = os.environ.get("GPUINFRA_TEST_ADDONS_VARS")
    if extra:
        settings.update(yaml.safe_load(Path(extra).read_text()) or {})
    _ensure_grafana_secret(api, settings)
    vars_file = tmp_path / "addons.json"
    vars_file.write_text(json.dumps(settings))
    inventory = tmp_path / "inventory"
    inventory.mkdir()
    (inventory / "hosts.yml").write_text("all: {}\n")

    first = _apply(vars_file, inventory)
    assert first.returncode == 0, first.stdout[-6000:] + first.stderr
    second = _apply(vars_file, inventory)
    assert second.returncode == 0, second.stdout[-6000:] + second.stderr
    # Honest idempotency: a converged cluster reports nothing changed.
    assert _changed(second.stdout) == 0, second.stdout[-6000:]

    from kubernetes import client

    custom = client.CustomObjectsApi(api)
    kueue = addons.settings_from_role_vars("kueue", settings)
    assert isinstance(kueue, addons.KueueSettings)
    queue = custom.get_cluster_custom_object(
        "kueue.x-k8s.io", "v1beta2", "clusterqueues", kueue.cluster_queue
    )
    assert queue["spec"]["cohortName"] == kueue.cohort
    stack = addons.settings_from_role_vars("prometheus_stack", settings)
    rules = custom.list_namespaced_custom_object(
        "monitoring.coreos.com", "v1", stack.namespace, "prometheusrules"
    )
    assert any(r["metadata"]["name"] == "gpuinfra-gpu-alerts" for r in rules["items"])

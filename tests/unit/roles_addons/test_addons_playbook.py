"""playbooks/addons.yml run for real by ansible-playbook, up to the first call to a cluster.

There is no Kubernetes API server here: these runs prove that the roles receive exactly the
specs' renders and that a run without a reachable cluster, or with a bad setting, stops early
with a message that says what to do, and changes nothing.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from gpuinfra import addons
from tests.conftest import example_site_with_full_l4_quota

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE_VARS = ROOT / "inventory" / "example" / "group_vars" / "all"
ANSIBLE_PLAYBOOK = Path(sys.executable).parent / "ansible-playbook"


def _run(*args: str, kubeconfig: Path, inventory: Path) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"),
        "ANSIBLE_NOCOLOR": "1",
        "KUBECONFIG": str(kubeconfig),
    }
    return subprocess.run(
        [str(ANSIBLE_PLAYBOOK), "-i", str(inventory), *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


@pytest.fixture
def inventory(tmp_path: Path) -> Path:
    """A site with no hosts: the add-ons play runs on the implicit localhost."""
    folder = tmp_path / "inventory"
    folder.mkdir()
    (folder / "hosts.yml").write_text("all: {}\n")
    return folder


def _kubeconfig(path: Path, port: int) -> Path:
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "gone", "cluster": {"server": f"https://127.0.0.1:{port}"}}],
        "users": [{"name": "gone", "user": {"token": "unused"}}],
        "contexts": [{"name": "gone", "context": {"cluster": "gone", "user": "gone"}}],
        "current-context": "gone",
    }
    path.write_text(yaml.safe_dump(config))
    return path


@pytest.fixture
def kubeconfig(tmp_path: Path, closed_port: int) -> Path:
    """A kubeconfig for an API server that is not there."""
    return _kubeconfig(tmp_path / "kubeconfig", closed_port)


def test_roles_receive_exactly_the_specs_render(
    tmp_path: Path, kubeconfig: Path, inventory: Path
) -> None:
    """The lookup hands each role the core's render, untouched by Ansible's templating."""
    group_vars = inventory / "group_vars" / "all"
    group_vars.mkdir(parents=True)
    for addon in addons.ADDONS:
        (group_vars / f"{addon}.yml").write_text((EXAMPLE_VARS / f"{addon}.yml").read_text())
    out = tmp_path / "renders.json"
    playbook = tmp_path / "render.yml"
    playbook.write_text(
        yaml.safe_dump(
            [
                {
                    "name": "Render",
                    "hosts": "localhost",
                    "gather_facts": False,
                    "vars": {"ansible_python_interpreter": "{{ ansible_playbook_python }}"},
                    "tasks": [
                        {
                            "name": "Write the renders",
                            "ansible.builtin.copy": {
                                "content": "{{ query('gpuinfra_addon', *addons) | to_json }}",
                                "dest": str(out),
                                "mode": "0600",
                            },
                            "vars": {"addons": list(addons.ADDONS)},
                        }
                    ],
                }
            ]
        )
    )
    proc = _run(str(playbook), kubeconfig=kubeconfig, inventory=inventory)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    received = json.loads(out.read_text())
    assert [r["name"] for r in received] == list(addons.ADDONS)
    for got in received:
        addon = got["name"]
        variables = yaml.safe_load((EXAMPLE_VARS / f"{addon}.yml").read_text())
        settings = addons.settings_from_role_vars(addon, variables)
        assert got["enabled"] == settings.enabled
        if not settings.enabled:
            assert (got["chart"], got["values"], got["objects"]) == (None, {}, []), addon
            continue
        render = addons.render(addon, settings)
        # JSON round trip on both sides: the comparison is of data, not of Python types.
        expected = json.loads(json.dumps([render.values, render.objects, dict(render.files)]))
        assert [got["values"], got["objects"], got["files"]] == expected, addon
        assert (got["release"], got["namespace"]) == (render.release, render.namespace)
        if render.chart is None:
            assert got["chart"] is None
        else:
            chart = render.chart
            assert got["chart"]["version"] == chart.version
            # kubernetes.core.helm takes an OCI chart by its full address and no repository URL.
            if chart.repository.startswith("oci://"):
                expected_ref = (f"{chart.repository}/{chart.name}", None)
            else:
                expected_ref = (chart.name, chart.repository)
            assert (got["chart"]["ref"], got["chart"]["repo_url"]) == expected_ref


def test_unreachable_cluster_stops_in_preflight(
    kubeconfig: Path, inventory: Path, closed_port: int
) -> None:
    proc = _run("playbooks/addons.yml", kubeconfig=kubeconfig, inventory=inventory)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 2, output
    assert f"Cannot reach the Kubernetes API server with {kubeconfig}" in output
    assert f"port={closed_port}" in output
    assert "point gpuinfra_kubeconfig (or KUBECONFIG) at a reachable one" in output
    assert "Traceback" not in output
    assert "changed=0" in output
    assert "Install or upgrade" not in output


def test_an_api_server_that_never_answers_stops_the_run_at_its_bound(
    tmp_path: Path, inventory: Path, silent_port: int
) -> None:
    """The kubernetes client sets no timeout of its own: without the task's, this run would wait
    on the first request for good."""
    kubeconfig = _kubeconfig(tmp_path / "kubeconfig", silent_port)
    started = time.monotonic()
    proc = _run(
        "playbooks/addons.yml",
        "-e",
        "gpuinfra_kubernetes_timeout=3",
        kubeconfig=kubeconfig,
        inventory=inventory,
    )
    took = time.monotonic() - started
    output = " ".join((proc.stdout + proc.stderr).split())
    assert proc.returncode == 2, output
    assert (
        f"Cannot reach the Kubernetes API server with {kubeconfig}: it did not answer within 3 s "
        "(gpuinfra_kubernetes_timeout). Start the cluster"
    ) in output
    assert "changed=0" in output
    assert "Install or upgrade" not in output
    # Ansible's start and the failure's report on top of the 3 s.
    assert took < 60, took


def test_bad_setting_stops_before_any_add_on_runs(kubeconfig: Path, inventory: Path) -> None:
    """A mistake in the last add-on's settings stops the run before the first add-on applies."""
    bad = {
        "triton_enabled": True,
        "triton_model_repository": {"pvc": "models"},
        "triton_cpu": "4 cores",
    }
    proc = _run(
        "playbooks/addons.yml",
        "-e",
        json.dumps(bad),
        kubeconfig=kubeconfig,
        inventory=inventory,
    )
    output = proc.stdout + proc.stderr
    assert proc.returncode == 2, output
    assert "variables of role triton: triton_cpu:" in output
    assert "Traceback" not in output
    # Not even the first role's preflight reached the cluster.
    assert "Kubernetes API server" not in output
    assert "prometheus_stack :" not in output


def test_a_team_in_an_add_ons_namespace_stops_the_run_before_any_add_on_runs(
    kubeconfig: Path, inventory: Path
) -> None:
    """Each add-on's settings are valid alone; together the team would share the GPU
    Operator's namespace, which `config check --site` refuses. So does the play, with no host
    in the inventory to check the add-ons against."""
    flavor = {"gpu_type": "l4", "gpus": 1, "cpu": "1", "memory": "1Gi"}
    teams = {"kueue_flavors": [flavor], "kueue_teams": ["ml", "gpu-operator"]}
    proc = _run(
        "playbooks/addons.yml", "-e", json.dumps(teams), kubeconfig=kubeconfig, inventory=inventory
    )
    output = " ".join((proc.stdout + proc.stderr).split())
    assert proc.returncode == 2, output
    assert (
        "variables of role kueue: kueue_teams[1]: 'gpu-operator' is the namespace of the GPU "
        "Operator add-on; give the team a namespace of its own"
    ) in output
    assert "Traceback" not in output
    assert "Kubernetes API server" not in output
    assert "prometheus_stack :" not in output


def test_site_yml_refuses_a_team_in_an_add_ons_namespace_before_the_nodes_change(
    kubeconfig: Path,
) -> None:
    """site.yml converges the nodes before the add-ons: the site is checked before either."""
    teams = {"kueue_teams": ["research", "monitoring"]}
    proc = _run(
        "playbooks/site.yml",
        "-e",
        json.dumps(teams),
        kubeconfig=kubeconfig,
        inventory=ROOT / "inventory" / "example",
    )
    output = " ".join((proc.stdout + proc.stderr).split())
    assert proc.returncode == 2, output
    assert (
        "variables of role kueue: kueue_teams[1]: 'monitoring' is the namespace of the "
        "Prometheus stack add-on; give the team a namespace of its own"
    ) in output
    # The nodes' play never started: not even a fact was gathered from a host.
    assert "PLAY [GPU nodes]" not in output
    assert "gpu-node-01" not in output


@pytest.mark.parametrize(
    ("where", "setting", "message"),
    [
        (
            "host_vars/gpu-node-01.yml",
            'nvidia_driver_brnach: "550"\n',
            "host_vars/gpu-node-01.yml: nvidia_driver_brnach: unknown variable of role "
            "'nvidia_driver'; did you mean 'nvidia_driver_source'?",
        ),
        (
            "group_vars/gpu_nodes/kueue.yml",
            "kueue_enabled: false\n",
            "group_vars/gpu_nodes/kueue.yml: kueue_enabled: differs from ",
        ),
    ],
    ids=["misspelt-node-variable", "add-on-setting-outside-all"],
)
def test_site_yml_refuses_in_the_sites_files_what_config_check_refuses(
    tmp_path: Path, kubeconfig: Path, where: str, setting: str, message: str
) -> None:
    """The hosts' variables as Ansible resolved them cannot tell a misspelling from a user's own
    variable, and the controller's cannot show a setting made for the hosts only; the site's
    files can, and site.yml checks them before any host changes."""
    site = tmp_path / "mysite"
    shutil.copytree(ROOT / "inventory" / "example", site)
    (site / where).parent.mkdir(exist_ok=True)
    (site / where).write_text(setting)
    proc = _run("playbooks/site.yml", kubeconfig=kubeconfig, inventory=site)
    output = " ".join((proc.stdout + proc.stderr).split())
    assert proc.returncode == 2, output
    assert message in output
    assert "PLAY [GPU nodes]" not in output


def test_a_valid_site_passes_the_whole_site_check_with_config_checks_warnings(
    kubeconfig: Path, tmp_path: Path
) -> None:
    """The example site, whose GPU hosts the check reads from the inventory, passes on to the
    cluster; what `config check --site` warns of, the play warns of."""
    from gpuinfra import integrity

    site = example_site_with_full_l4_quota(tmp_path)
    checked = integrity.load_checked_site(site)
    assert checked.warnings
    proc = _run("playbooks/addons.yml", kubeconfig=kubeconfig, inventory=site)
    output = " ".join((proc.stdout + proc.stderr).split())
    assert proc.returncode == 2, output
    assert f"Cannot reach the Kubernetes API server with {kubeconfig}" in output
    for warning in checked.warnings:
        assert f"[WARNING]: {warning.object} {warning.path}: {warning.message}" in output


def test_missing_kubeconfig_stops_in_preflight(tmp_path: Path, inventory: Path) -> None:
    missing = tmp_path / "nowhere" / "kubeconfig"
    proc = _run("playbooks/addons.yml", kubeconfig=missing, inventory=inventory)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 2, output
    assert f"No kubeconfig at {missing} on localhost" in output
    assert "Traceback" not in output
    assert "changed=0" in output

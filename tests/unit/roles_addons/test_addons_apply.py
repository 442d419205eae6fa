"""playbooks/addons.yml run to the end, with stand-ins for the kubernetes.core modules.

There is no Kubernetes API server here. A collection named kubernetes.core, found before the real
one, records each module call with its arguments and answers as a healthy cluster would, so the
run covers every phase of every add-on role and of the shared addon_helm role: what reaches the
cluster, with which arguments, in which order.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuinfra import addons, integrity
from gpuinfra.addons import AddonRender
from gpuinfra.addons import triton as triton_spec
from gpuinfra.errors import ConfigError, Problem

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE_VARS = ROOT / "inventory" / "example" / "group_vars" / "all"
ANSIBLE_PLAYBOOK = Path(sys.executable).parent / "ansible-playbook"
# Volcano is off in the example site; on here so that every chart add-on runs.
EXTRA = {"volcano_enabled": True, "volcano_queues": [{"name": "train", "weight": 2}]}
MODULES = ("k8s", "k8s_info", "k8s_cluster_info", "k8s_exec", "helm", "helm_info", "helm_pull")

STAND_IN = """#!/usr/bin/python
import json
import os

from ansible.module_utils.basic import AnsibleModule, _load_params

MODULE = "{name}"


def main():
    args = {{k: v for k, v in _load_params().items() if not k.startswith("_ansible")}}
    module = AnsibleModule(argument_spec={{k: {{"type": "raw"}} for k in args}})
    with open(os.environ["STAND_IN_LOG"], "a") as log:
        log.write(json.dumps({{"module": MODULE, "args": args}}) + "\\n")
    result = {{"changed": MODULE in ("k8s", "helm", "helm_pull")}}
    if MODULE == "helm_info":
        charts = json.loads(os.environ["STAND_IN_CHARTS"])
        result["status"] = {{"status": "deployed", "chart": charts[args["release_name"]]}}
    if MODULE == "k8s_info":
        state = "Open" if args.get("kind") == "Queue" else "ready"
        keys = (
            "admin-user", "admin-password", "pagerduty-routing-key", "wecom-api-secret", "admin-key"
        )
        # A Secret's values, as the API server returns them (base64); a test may plant one.
        planted = os.environ.get("STAND_IN_SECRET_FILE")
        value = open(planted).read() if planted and args.get("kind") == "Secret" else ""
        status = {{"state": state, "succeeded": 1}} if args.get("kind") == "Job" else {{"state": state}}
        result["resources"] = [
            {{"metadata": {{"name": "pod-0"}}, "status": status, "data": dict.fromkeys(keys, value)}}
        ]
        if args.get("name") in os.environ.get("STAND_IN_MISSING", "").split(","):
            result["resources"] = []
        if "app.kubernetes.io/managed-by=gpuinfra" in (args.get("label_selectors") or []):
            # What a test planted as already in the cluster, by kind (names in the namespace).
            found = json.loads(os.environ.get("STAND_IN_FOUND") or "{{}}")
            result["resources"] = [
                {{"metadata": {{"name": n, "namespace": args["namespace"]}}}}
                for n in found.get(args["kind"], [])
            ]
    if MODULE == "k8s_exec":
        # Triton's /v2/repository/index as the example site's server lists it.
        index = [{{"name": "resnet50", "version": "1", "state": "READY"}}]
        result["stdout"] = os.environ.get("STAND_IN_INDEX") or json.dumps(index)
    if MODULE == "helm_pull":
        chart = os.path.join(args["destination"], args["chart_ref"])
        os.makedirs(os.path.join(chart, "charts", "crds", "crds"))
        open(os.path.join(chart, "Chart.yaml"), "w").close()
        open(os.path.join(chart, "charts", "crds", "crds", "crd-a.yaml"), "w").close()
    module.exit_json(**result)


main()
"""


def _renders() -> list[AddonRender]:
    renders = []
    for addon in addons.ADDONS:
        variables = yaml.safe_load((EXAMPLE_VARS / f"{addon}.yml").read_text())
        settings = addons.settings_from_role_vars(
            addon, {**variables, **{k: v for k, v in EXTRA.items() if k.startswith(addon)}}
        )
        if settings.enabled:
            renders.append(addons.render(addon, settings))
    return renders


@pytest.fixture(scope="module")
def calls(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    """Every kubernetes.core call of one run of playbooks/addons.yml, in order."""
    proc, log = _play(tmp_path_factory.mktemp("apply"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return _calls(log)


def _calls(log: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in log.read_text().splitlines()]


def _play(
    tmp: Path,
    missing: str = "",
    index: str = "",
    tags: str = "",
    found: dict[str, list[str]] | None = None,
    inventory: Path = ROOT / "inventory" / "example",
) -> tuple[subprocess.CompletedProcess[str], Path]:
    """Run playbooks/addons.yml against the stand-ins; ``missing`` names objects k8s_info does
    not find, ``index`` is what Triton's repository index answers, ``tags`` limits the run,
    ``found`` is what a search by gpuinfra's labels finds (kind: names), ``inventory`` is the
    site (the example's by default)."""
    modules = tmp / "collections" / "ansible_collections" / "kubernetes" / "core" / "plugins"
    (modules / "modules").mkdir(parents=True)
    for name in MODULES:
        (modules / "modules" / f"{name}.py").write_text(STAND_IN.format(name=name))
    bin_dir = tmp / "bin"
    bin_dir.mkdir()
    (bin_dir / "helm").write_text("#!/bin/sh\necho v3.19.0\n")
    (bin_dir / "helm").chmod(0o755)
    kubeconfig = tmp / "kubeconfig"
    kubeconfig.write_text("apiVersion: v1\nkind: Config\n")
    log = tmp / "calls.jsonl"
    charts = {r.release: f"{r.chart.name}-{r.chart.version}" for r in _renders() if r.chart}
    env = {
        **os.environ,
        "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"),
        "ANSIBLE_COLLECTIONS_PATH": str(tmp / "collections"),
        "ANSIBLE_LOCAL_TEMP": str(tmp / "ansible"),
        "ANSIBLE_NOCOLOR": "1",
        "KUBECONFIG": str(kubeconfig),
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "STAND_IN_CHARTS": json.dumps(charts),
        "STAND_IN_LOG": str(log),
        "STAND_IN_MISSING": missing,
        "STAND_IN_INDEX": index,
        "STAND_IN_FOUND": json.dumps(found or {}),
    }
    extra = {**EXTRA, "gpuinfra_chart_cache_dir": str(tmp / "charts")}
    proc = subprocess.run(
        [
            str(ANSIBLE_PLAYBOOK),
            "-i",
            str(inventory),
            "playbooks/addons.yml",
            "-e",
            json.dumps(extra),
            *(["--tags", tags] if tags else []),
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    log.touch()
    return proc, log


def _index(calls: list[dict[str, Any]], module: str, **args: Any) -> int:
    for i, call in enumerate(calls):
        if call["module"] == module and all(call["args"].get(k) == v for k, v in args.items()):
            return i
    raise AssertionError(f"no {module} call with {args}")


def _namespace(calls: list[dict[str, Any]], name: str) -> int:
    for i, call in enumerate(calls):
        definition = call["args"].get("definition") or {}
        if (
            call["module"] == "k8s"
            and definition.get("kind") == "Namespace"
            and definition["metadata"]["name"] == name
        ):
            return i
    raise AssertionError(f"no Namespace {name} applied")


def _applied(calls: list[dict[str, Any]], obj: dict[str, Any]) -> int:
    return _index(calls, "k8s", definition=json.loads(json.dumps(obj)))


def test_each_chart_is_installed_pinned_with_the_renders_values_and_waits(
    calls: list[dict[str, Any]],
) -> None:
    helm = [c["args"] for c in calls if c["module"] == "helm"]
    renders = [r for r in _renders() if r.chart is not None]
    assert [h["release_name"] for h in helm] == [r.release for r in renders]
    for args, render in zip(helm, renders, strict=True):
        assert render.chart is not None
        assert args["release_namespace"] == render.namespace
        assert args["chart_version"] == render.chart.version
        assert args["release_values"] == json.loads(json.dumps(render.values)), render.name
        assert (args["wait"], args["timeout"]) == (True, "15m")
        assert args["skip_crds"] is (render.name == "prometheus_stack")


def test_namespaces_and_core_objects_before_the_chart_extra_objects_after(
    calls: list[dict[str, Any]],
) -> None:
    for render in _renders():
        namespace = _namespace(calls, render.namespace)
        # Applied with the render's Pod Security labels, under gpuinfra's field manager.
        args = calls[namespace]["args"]
        assert args["definition"]["metadata"]["labels"] == dict(
            render.namespace_labels[render.namespace]
        )
        assert args["server_side_apply"] == {"field_manager": "gpuinfra"}
        core = [o for o in render.objects if o["apiVersion"] == "v1"]
        extra = [o for o in render.objects if o["apiVersion"] != "v1"]
        if render.chart:
            install = _index(calls, "helm", release_name=render.release)
        else:
            install = min(_applied(calls, o) for o in extra)
        assert all(namespace < _applied(calls, o) <= install for o in core), render.name
        for obj in extra:
            index = _applied(calls, obj)
            assert index >= install, f"{render.name}: {obj['kind']} before its chart"
            args = calls[index]["args"]
            assert args["apply"] is True
            assert args["server_side_apply"] == {"field_manager": "gpuinfra"}


def test_the_prometheus_stacks_crds_are_applied_before_its_chart(
    calls: list[dict[str, Any]],
) -> None:
    crds = next(i for i, c in enumerate(calls) if c["module"] == "k8s" and "src" in c["args"])
    assert calls[crds]["args"]["src"].endswith("/charts/crds/crds/crd-a.yaml")
    assert calls[crds]["args"]["server_side_apply"]["force_conflicts"] is True
    assert crds < _index(calls, "helm", release_name="kube-prometheus-stack")


def test_each_release_is_checked_on_the_one_kubeconfig(calls: list[dict[str, Any]]) -> None:
    """Triton has no chart: no release to check, and no Helm call."""
    checked = [c["args"]["release_name"] for c in calls if c["module"] == "helm_info"]
    assert checked == [r.release for r in _renders() if r.chart is not None]
    kubeconfigs = {c["args"]["kubeconfig"] for c in calls if "kubeconfig" in c["args"]}
    assert len(kubeconfigs) == 1 and next(iter(kubeconfigs)).endswith("/kubeconfig")


def test_every_add_ons_prerequisites_are_checked_before_the_first_change(
    calls: list[dict[str, Any]],
) -> None:
    first_change = next(i for i, c in enumerate(calls) if c["module"] in ("k8s", "helm"))
    read = {
        (c["args"]["kind"], c["args"]["name"])
        for c in calls[:first_change]
        if c["module"] == "k8s_info"
    }
    assert {
        ("Secret", "grafana-admin"),
        ("Secret", "alerting"),
        ("PersistentVolumeClaim", "triton-models"),
        ("Secret", "triton-admin"),
    } <= read


def test_a_missing_prerequisite_stops_the_play_with_the_cores_message_and_changes_nothing(
    tmp_path: Path,
) -> None:
    proc, log = _play(tmp_path, missing="triton-models")
    output = proc.stdout + proc.stderr
    assert proc.returncode == 2, output
    (triton,) = [r for r in _renders() if r.name == "triton"]
    (claim,) = [p for p in triton.site_prerequisites() if p.name == "triton-models"]
    assert claim.message in " ".join(output.split())
    assert not [c for c in _calls(log) if c["module"] in ("k8s", "helm", "helm_pull")]


# What `config check --site` refuses across add-ons and hosts, written into a copy of the example
# site: (file of the site, text it holds, text that replaces it, what the play's message names
# where config check names the file that set the variable; None: the same). The play checks the
# site's files first, as config check does, so a mistake in a file is named by its file.
WHOLE_SITE_MISTAKES = {
    # The team's namespace would take Kueue's queue label and Pod Security level over the
    # Prometheus stack's own.
    "team in an add-on's namespace": (
        "group_vars/all/kueue.yml",
        "  - inference\n",
        "  - inference\n  - monitoring\n",
        None,
    ),
    # No host offers the L4s that Triton selects and Kueue's l4 flavor gives out (integrity).
    "GPU type no host offers": (
        "hosts.yml",
        "gpu_node_registration_gpu_type: l4",
        "gpu_node_registration_gpu_type: a10g",
        None,
    ),
}


@pytest.mark.parametrize("mistake", WHOLE_SITE_MISTAKES)
def test_what_config_check_refuses_across_the_site_stops_the_play_before_any_call(
    tmp_path: Path, mistake: str
) -> None:
    site = tmp_path / "site"
    shutil.copytree(ROOT / "inventory" / "example", site)
    file, old, new, shown = WHOLE_SITE_MISTAKES[mistake]
    text = (site / file).read_text()
    assert old in text
    (site / file).write_text(text.replace(old, new))
    with pytest.raises(ConfigError) as refused:
        integrity.load_checked_site(site)

    proc, log = _play(tmp_path, inventory=site)
    output = " ".join((proc.stdout + proc.stderr).split())
    assert proc.returncode == 2, output
    # Each of config check's one-line problems.
    for problem in refused.value.problems:
        line = str(Problem(shown or problem.file, problem.path, problem.message))
        assert " ".join(line.split()) in output, line
    assert "Traceback" not in output
    # Nothing reached the cluster, not even a read, and no role ran.
    assert _calls(log) == []
    assert "prometheus_stack :" not in output
    assert "changed=0" in output


def test_the_gpu_operator_install_waits_for_its_smoke_test(calls: list[dict[str, Any]]) -> None:
    (operator,) = [r for r in _renders() if r.name == "gpu_operator"]
    (job,) = [o for o in operator.objects if o["kind"] == "Job"]
    applied = _applied(calls, job)
    waited = _index(calls, "k8s_info", kind="Job", name=job["metadata"]["name"])
    assert _index(calls, "helm", release_name=operator.release) < applied < waited


def test_each_tritons_repository_index_is_read_in_its_pod(calls: list[dict[str, Any]]) -> None:
    (wait,) = [
        c
        for c in calls
        if c["module"] == "k8s_info"
        and c["args"].get("kind") == "Deployment"
        and c["args"].get("wait")
    ]
    (exec_call,) = [c for c in calls if c["module"] == "k8s_exec"]
    assert exec_call["args"]["pod"] == "pod-0"
    assert exec_call["args"]["container"] == "triton"
    assert exec_call["args"]["namespace"] == wait["args"]["namespace"] == "triton"
    assert "/v2/repository/index" in exec_call["args"]["command"]
    # The index is an admin API: the header, its value from the container's own variable.
    header = f"'{triton_spec.ADMIN_HEADER}': os.environ['{triton_spec.ADMIN_ENV}']"
    assert header in exec_call["args"]["command"]
    pods = [c for c in calls if c["module"] == "k8s_info" and c["args"].get("kind") == "Pod"]
    assert pods[0]["args"]["label_selectors"] == ["app.kubernetes.io/name=triton"]


def test_a_version_the_server_does_not_serve_stops_the_play(tmp_path: Path) -> None:
    index = json.dumps([{"name": "resnet50", "version": "2", "state": "UNAVAILABLE"}])
    proc, _ = _play(tmp_path, index=index, tags="verify")
    assert proc.returncode == 2, proc.stdout
    assert (
        "triton: model 'resnet50' (version_policy latest 1): READY versions [], "
        "declared the newest 1"
    ) in proc.stdout


def _removed(calls: list[dict[str, Any]]) -> list[tuple[str, str, str]]:
    return [
        (c["args"]["kind"], c["args"]["namespace"], c["args"]["name"])
        for c in calls
        if c["module"] == "k8s" and c["args"].get("state") == "absent"
    ]


def test_nothing_is_removed_when_the_cluster_holds_only_what_is_rendered(
    calls: list[dict[str, Any]],
) -> None:
    assert _removed(calls) == []


def test_tritons_objects_the_settings_no_longer_render_are_removed_after_the_apply(
    tmp_path: Path,
) -> None:
    # A site that had serving groups (triton-text and its canary) and now serves from the one
    # Deployment `triton`, which the render has and which must stay.
    found = {
        "Deployment": ["triton", "triton-text", "triton-text-canary"],
        "Service": ["triton", "triton-text"],
        "HTTPRoute": ["triton-text"],
    }
    proc, log = _play(tmp_path, found=found)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    calls = _calls(log)
    assert sorted(_removed(calls)) == [
        ("Deployment", "triton", "triton-text"),
        ("Deployment", "triton", "triton-text-canary"),
        ("HTTPRoute", "triton", "triton-text"),
        ("Service", "triton", "triton-text"),
    ]
    (deployment,) = [
        o for r in _renders() if r.name == "triton" for o in r.objects if o["kind"] == "Deployment"
    ]
    first_removal = next(
        i
        for i, c in enumerate(calls)
        if c["module"] == "k8s" and c["args"].get("state") == "absent"
    )
    assert _applied(calls, deployment) < first_removal


def test_the_prune_searches_every_kind_triton_labels() -> None:
    """Every kind Triton renders with its name label, in every scenario, is one the prune reads."""
    from tests.unit.addons.conftest import SCENARIOS, scenario_renders

    tasks = yaml.safe_load((ROOT / "roles" / "triton" / "tasks" / "prune.yml").read_text())
    searched = {(k["api_version"], k["kind"]) for k in tasks[0]["vars"]["_triton_prunable_kinds"]}
    labelled = {
        (o["apiVersion"], o["kind"])
        for scenario in SCENARIOS
        for r in scenario_renders(scenario)
        if r.name == "triton"
        for o in r.objects
        if o["metadata"].get("labels", {}).get("app.kubernetes.io/name") == "triton"
    }
    assert {"Deployment", "Service", "HTTPRoute", "ServiceMonitor"} <= {k for _, k in labelled}
    assert labelled <= searched, labelled - searched

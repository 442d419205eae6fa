"""Logs: the Loki and Alloy add-ons, their chart data and the check on Alloy's push address."""

from __future__ import annotations

import copy
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuinfra import addons, chartdata, schemas
from gpuinfra.addons.base import GPU_TAINT, GPU_TYPE_LABEL
from gpuinfra.addons.isolation import PSA
from gpuinfra.addons.logs import loki_push_address
from gpuinfra.errors import ConfigError
from gpuinfra.versions import pinned
from tests.conftest import ROOT, run_cli
from tests.unit.test_integrity import findings, only, site_copy, site_findings, stack

ON: dict[str, Any] = {"enabled": True}


def loki_chart() -> tuple[dict[str, Any], dict[str, Any]]:
    pins = pinned()
    values = chartdata.load_values("loki", pins.loki.version)
    schema = chartdata.load_values_schema("loki", pins.loki.version)
    assert schema is not None, "the Loki chart ships a values.schema.json; its copy is missing"
    return values, schema


def config_text(settings: dict[str, Any] | None = None) -> str:
    render = addons.render("alloy", {**ON, **(settings or {})})
    content: str = render.values["alloy"]["configMap"]["content"]
    return content


# --- Loki ---------------------------------------------------------------------------------------


def test_loki_is_one_process_on_a_volume_and_its_values_pass_the_charts_schema() -> None:
    render = addons.render("loki", {**ON, "retentionDays": 7, "storageSize": "20Gi"})
    values = render.values
    assert values["deploymentMode"] == "SingleBinary"
    assert values["singleBinary"]["replicas"] == 1
    assert values["singleBinary"]["persistence"] == {"enabled": True, "size": "20Gi"}
    assert (values["read"], values["write"], values["backend"]) == ({"replicas": 0},) * 3
    assert values["loki"]["storage"] == {"type": "filesystem"}
    assert values["loki"]["limits_config"]["retention_period"] == "168h"
    assert values["loki"]["compactor"]["retention_enabled"] is True
    chart_values, schema = loki_chart()
    assert schemas.values_problems(values, chart_values, schemas.FREE_MAPS["loki"]) == []
    assert schemas.values_schema_problems(values, chart_values, schema) == []


def test_values_the_loki_charts_schema_refuses_are_caught() -> None:
    chart_values, schema = loki_chart()
    values = copy.deepcopy(addons.render("loki", ON).values)
    values["loki"]["rulerConfig"] = {"storage": "s3"}
    (problem,) = schemas.values_schema_problems(values, chart_values, schema)
    assert problem.startswith("loki.rulerConfig.storage: 's3' is not of type")


def test_the_loki_namespace_is_restricted_and_admits_pushes_on_its_http_port() -> None:
    render = addons.render("loki", ON)
    assert render.namespace_labels["loki"][f"{PSA}/enforce"] == "restricted"
    # The restricted level wants a seccomp profile; the chart sets the other fields.
    assert render.values["loki"]["podSecurityContext"] == {
        "seccompProfile": {"type": "RuntimeDefault"}
    }
    ports = [
        port["port"]
        for o in render.objects
        if o["kind"] == "NetworkPolicy"
        for rule in o["spec"].get("ingress", [])
        for port in rule.get("ports", [])
    ]
    assert 3100 in ports


@pytest.mark.parametrize(
    ("settings", "expected"),
    [
        ({"retentionDays": 0}, "loki.retentionDays"),
        ({"storageSize": "lots"}, "not a Kubernetes quantity"),
        ({"retentionDay": 7}, "retentionDay"),
    ],
)
def test_a_bad_loki_setting_is_refused_in_one_line(settings: dict[str, Any], expected: str) -> None:
    with pytest.raises(ConfigError) as caught:
        addons.render("loki", {**ON, **settings}, file="stacks/Pulumi.dev.yaml")
    (line,) = caught.value.lines()
    assert line.startswith("stacks/Pulumi.dev.yaml") and expected.split(".")[-1] in line


# --- Alloy --------------------------------------------------------------------------------------


def test_alloy_runs_on_the_gpu_nodes_only() -> None:
    controller = addons.render("alloy", ON).values["controller"]
    assert controller["type"] == "daemonset"
    terms = controller["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]["nodeSelectorTerms"]
    assert terms == [{"matchExpressions": [{"key": GPU_TYPE_LABEL, "operator": "Exists"}]}]
    (toleration,) = controller["tolerations"]
    assert (toleration["key"], toleration["effect"]) == (GPU_TAINT["key"], GPU_TAINT["effect"])


def test_alloy_reads_pod_logs_and_the_drivers_kernel_lines_and_pushes_to_loki() -> None:
    text = config_text()
    # This node's pods, their files under /var/log/pods, in the CRI format.
    assert 'field = "spec.nodeName=" + coalesce(sys.env("HOSTNAME"), constants.hostname)' in text
    assert 'replacement   = "/var/log/pods/*$1/*.log"' in text
    assert "stage.cri {}" in text
    # Triton's pods are labelled as such.
    assert 'regex         = "triton"' in text
    # The journal's kernel lines, all but the NVIDIA driver's dropped.
    assert 'matches       = "_TRANSPORT=kernel"' in text
    assert 'selector = "{job=\\"node-journal\\"} !~ \\"(?i)(NVRM|nvidia|Xid)\\""' in text
    (url,) = re.findall(r'url = "([^"]+)"', text)
    assert url == loki_push_address("loki") == "http://loki.loki.svc:3100/loki/api/v1/push"
    # Every block the configuration opens it closes.
    assert text.count("{") == text.count("}")


def test_without_the_journal_alloy_mounts_only_var_log() -> None:
    render = addons.render("alloy", {**ON, "kernelJournal": False})
    assert "loki.source.journal" not in render.values["alloy"]["configMap"]["content"]
    assert render.values["alloy"]["mounts"] == {
        "varlog": True,
        "dockercontainers": False,
        "extra": [],
    }
    assert render.values["controller"]["volumes"] == {"extra": []}


def test_alloys_namespace_is_privileged_for_its_host_paths_and_its_container_is_not() -> None:
    render = addons.render("alloy", ON)
    assert render.namespace_labels["alloy"][f"{PSA}/enforce"] == "privileged"
    # Baseline still warns and audits, so another privileged pod there shows up.
    assert render.namespace_labels["alloy"][f"{PSA}/warn"] == "baseline"
    security = render.values["alloy"]["securityContext"]
    assert security["privileged"] is False and security["allowPrivilegeEscalation"] is False
    assert security["capabilities"] == {"drop": ["ALL"]}
    # The free-form parts of its values are valid Kubernetes: put them in a Pod and check it.
    values = render.values
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "alloy"},
        "spec": {
            "affinity": values["controller"]["affinity"],
            "tolerations": values["controller"]["tolerations"],
            "volumes": values["controller"]["volumes"]["extra"],
            "containers": [
                {
                    "name": "alloy",
                    "image": "grafana/alloy",
                    "securityContext": security,
                    "volumeMounts": values["alloy"]["mounts"]["extra"],
                }
            ],
        },
    }
    assert schemas.core_problems(pod, pinned().kubernetes.version) == []


def test_a_bad_push_address_is_refused_in_one_line() -> None:
    with pytest.raises(ConfigError) as caught:
        addons.render("alloy", {**ON, "lokiPushAddress": "loki:3100"}, file="x.yaml")
    (line,) = caught.value.lines()
    assert "lokiPushAddress" in line


# --- the address check ----------------------------------------------------------------------------


def test_alloy_pushing_elsewhere_than_the_loki_add_on_is_an_error() -> None:
    assert only(findings(stack("dev", loki=ON, alloy=ON)), "logs") == []
    moved = stack("dev", loki={**ON, "namespace": "logging"}, alloy=ON)
    (error,) = only(findings(moved), "logs")
    assert error.severity == "error"
    assert loki_push_address("logging") in error.message
    fixed = stack(
        "dev",
        loki={**ON, "namespace": "logging"},
        alloy={**ON, "lokiPushAddress": loki_push_address("logging")},
    )
    assert only(findings(fixed), "logs") == []


def test_alloy_without_loki_is_an_error() -> None:
    (error,) = only(findings(stack("dev", alloy=ON)), "logs")
    assert "the Loki add-on is not enabled" in error.message


def test_a_site_pointing_alloy_elsewhere_fails_config_check(tmp_path: Path) -> None:
    site = site_copy(tmp_path, {})
    (site / "group_vars" / "all" / "loki.yml").write_text("loki_enabled: true\n")
    logs = site / "group_vars" / "all" / "alloy.yml"
    logs.write_text(
        "alloy_enabled: true\n"
        "alloy_loki_push_address: http://loki.logging.svc:3100/loki/api/v1/push\n"
    )
    (error,) = only(site_findings(site), "logs")
    assert error.severity == "error"
    result = run_cli("config", "check", "--site", str(site))
    assert result.code == 2
    assert "http://loki.loki.svc:3100/loki/api/v1/push" in result.stderr
    logs.write_text("alloy_enabled: true\n")
    assert only(site_findings(site), "logs") == []


def test_a_bad_setting_in_a_stack_file_fails_config_check_in_one_line(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    shutil.copytree(
        ROOT, root, ignore=shutil.ignore_patterns(".venv", ".git", ".lab", ".tools", "__pycache__")
    )
    path = root / "stacks" / "Pulumi.dev.yaml"
    document = yaml.safe_load(path.read_text())
    document["config"]["gpuinfra:addons"]["loki"] = {"enabled": True, "retentionDays": 0}
    path.write_text(yaml.safe_dump(document))
    result = run_cli("config", "check", "--stack", "dev", root=root, cwd=root)
    assert result.code == 2, result.stderr
    lines = [x for x in result.stderr.splitlines() if x.strip()]
    assert len(lines) == 1, lines
    assert lines[0].startswith("error: stacks/Pulumi.dev.yaml") and "retentionDays" in lines[0]


# --- Grafana ------------------------------------------------------------------------------------


def test_grafana_shows_the_loki_add_on_and_may_reach_it() -> None:
    from gpuinfra.addons.logs import loki_query_address

    url = loki_query_address("loki")
    render = addons.render("prometheus_stack", {"lokiDatasourceUrl": url})
    (source,) = render.values["grafana"]["additionalDataSources"]
    assert (source["type"], source["url"]) == ("loki", "http://loki.loki.svc:3100")
    (policy,) = [o for o in render.objects if o["metadata"]["name"] == "allow-grafana-to-loki"]
    assert policy["spec"]["egress"] == [{"ports": [{"protocol": "TCP", "port": 3100}]}]
    assert schemas.core_problems(policy, pinned().kubernetes.version) == []
    # Unset: no data source and no opening.
    plain = addons.render("prometheus_stack")
    assert "additionalDataSources" not in plain.values["grafana"]
    assert not [o for o in plain.objects if o["metadata"]["name"] == "allow-grafana-to-loki"]


def test_a_grafana_data_source_that_is_not_the_loki_add_on_is_an_error() -> None:
    from gpuinfra.addons.logs import loki_query_address

    ok = stack("dev", loki=ON, prometheusStack={"lokiDatasourceUrl": loki_query_address("loki")})
    assert only(findings(ok), "logs") == []
    wrong = stack(
        "dev",
        loki={**ON, "namespace": "logging"},
        alloy={**ON, "lokiPushAddress": loki_push_address("logging")},
        prometheusStack={"lokiDatasourceUrl": loki_query_address("loki")},
    )
    (error,) = only(findings(wrong), "logs")
    assert error.path == "grafana.additionalDataSources[0].url"
    assert loki_query_address("logging") in error.message


def test_a_site_renders_both_log_add_ons_for_its_roles(tmp_path: Path) -> None:
    site = site_copy(tmp_path, {})
    (site / "group_vars" / "all" / "loki.yml").write_text(
        "loki_enabled: true\nloki_retention_days: 7\n"
    )
    (site / "group_vars" / "all" / "alloy.yml").write_text("alloy_enabled: true\n")
    out = tmp_path / "out"
    result = run_cli("addons", "render", "--site", str(site), "--out", str(out))
    assert result.code == 0, result.stderr
    names = sorted(p.name for p in out.iterdir())
    assert "loki" in names and "alloy" in names
    (site / "group_vars" / "all" / "loki.yml").write_text("loki_retention_days: zero\n")
    bad = run_cli("addons", "render", "--site", str(site))
    assert bad.code == 2
    (line,) = [x for x in bad.stderr.splitlines() if x.strip()]
    assert "loki_retention_days" in line and "loki.yml" in line

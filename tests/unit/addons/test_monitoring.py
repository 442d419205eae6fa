"""GPU metrics reach Prometheus and the alerts read metrics that really exist."""

from __future__ import annotations

import re
from typing import Any

import pytest

from gpuinfra import chartdata
from gpuinfra.addons import AddonRender, gpu_operator, prometheus_stack
from gpuinfra.addons.prometheus_stack import PrometheusStackSettings
from gpuinfra.versions import pinned

from .conftest import SCENARIOS, scenario_renders

MONITOR_KINDS = {"ServiceMonitor": "serviceMonitorSelector", "PodMonitor": "podMonitorSelector"}


def selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    assert set(selector) == {"matchLabels"}, "only matchLabels selectors are modelled here"
    return all(labels.get(k) == v for k, v in selector["matchLabels"].items())


def _prometheus_spec(renders: list[AddonRender]) -> dict[str, Any]:
    (stack,) = [r for r in renders if r.name == "prometheus_stack"]
    spec: dict[str, Any] = stack.values["prometheus"]["prometheusSpec"]
    return spec


def unselected(renders: list[AddonRender]) -> list[str]:
    """Monitors and rules in ``renders`` that the rendered Prometheus would not pick up."""
    spec = _prometheus_spec(renders)
    missed = []
    for render in renders:
        for obj in render.objects:
            kind = obj["kind"]
            key = MONITOR_KINDS.get(kind) or ("ruleSelector" if kind == "PrometheusRule" else "")
            if key and not selects(spec[key], obj["metadata"].get("labels", {})):
                missed.append(f"{render.name}: {kind}/{obj['metadata']['name']}")
        if render.name == "gpu_operator":
            monitor = render.values["dcgmExporter"]["serviceMonitor"]
            if not monitor["enabled"] or not selects(
                spec["serviceMonitorSelector"], monitor["additionalLabels"]
            ):
                missed.append("gpu_operator: DCGM exporter ServiceMonitor")
    return missed


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_prometheus_selects_every_monitor_and_rule(scenario: str) -> None:
    renders = scenario_renders(scenario)
    assert unselected(renders) == []


def test_a_label_mismatch_is_detected() -> None:
    renders = scenario_renders("defaults")
    spec = _prometheus_spec(renders)
    spec["serviceMonitorSelector"] = {"matchLabels": {"release": "prometheus"}}
    assert "gpu_operator: DCGM exporter ServiceMonitor" in unselected(renders)


def test_selectors_do_not_fall_back_to_the_chart_default(
    chart_values: dict[str, dict[str, Any]],
) -> None:
    spec = _prometheus_spec(scenario_renders("defaults"))
    chart = chart_values["kube-prometheus-stack"]["prometheus"]["prometheusSpec"]
    for key in ("serviceMonitor", "podMonitor", "rule"):
        assert spec[f"{key}SelectorNilUsesHelmValues"] is False
        assert spec[f"{key}Selector"]["matchLabels"]
        # Monitors live in the add-ons' own namespaces: Prometheus must look in all of them.
        assert spec.get(f"{key}NamespaceSelector", chart[f"{key}NamespaceSelector"]) == {}


def _exported_metrics() -> set[str]:
    """The metrics the pinned DCGM exporter's counter lists export."""
    lists = chartdata.load_counters(pinned().dcgm_exporter.version)
    return {name for metrics in lists.values() for name in metrics}


def test_alerts_read_metrics_the_exporters_expose() -> None:
    dcgm = _exported_metrics()
    # Triton's metric families (server docs, "Metrics"), and Prometheus' own target health.
    other = {
        "nv_inference_request_summary_us",
        "nv_inference_request_success",
        "nv_inference_request_failure",
        "up",
    }
    used: set[str] = set()
    for group in prometheus_stack.alert_rules()["groups"]:
        for rule in group["rules"]:
            used |= set(re.findall(r"\b(DCGM_FI_[A-Z_]+|nv_[a-z_]+|up)\b", rule["expr"]))
    assert used - dcgm - other == set()
    assert used & dcgm


def test_the_exporter_down_alert_watches_the_operators_job() -> None:
    rules = [r for g in prometheus_stack.alert_rules()["groups"] for r in g["rules"]]
    (down,) = [r for r in rules if r["alert"] == "DcgmExporterDown"]
    assert f'job="{gpu_operator.DCGM_EXPORTER_JOB}"' in down["expr"]


def test_triton_exposes_the_latency_quantiles_the_alert_reads() -> None:
    (triton,) = [r for r in scenario_renders("everything") if r.name == "triton"]
    args = triton.objects[0]["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--metrics-config=summary_latencies=true" in args


def test_grafana_admin_password_comes_from_a_secret_only() -> None:
    settings = PrometheusStackSettings(grafana_admin_secret="ops-grafana")
    (stack,) = [r for r in scenario_renders("defaults") if r.name == "prometheus_stack"]
    values = prometheus_stack.values(settings, pinned())
    assert values["grafana"]["admin"]["existingSecret"] == "ops-grafana"
    for text in (repr(values), repr(stack.values)):
        assert "adminPassword" not in text


def test_the_dcgm_dashboard_is_provisioned_for_the_sidecar() -> None:
    (stack,) = [r for r in scenario_renders("defaults") if r.name == "prometheus_stack"]
    sidecar = stack.values["grafana"]["sidecar"]["dashboards"]
    (dashboard,) = [o for o in stack.objects if o["kind"] == "ConfigMap"]
    assert dashboard["metadata"]["labels"][sidecar["label"]] == sidecar["labelValue"]
    assert "DCGM_FI_DEV_GPU_UTIL" in dashboard["data"]["dcgm-exporter.json"]

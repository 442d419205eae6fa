"""kube-prometheus-stack: Prometheus, Alertmanager and Grafana, with GPU dashboards and alerts.

Prometheus selects ServiceMonitors, PodMonitors and PrometheusRules by ``MONITOR_LABELS``; the
other specs put that same label on what they create, so GPU metrics reach Grafana.
"""

from __future__ import annotations

import json
import re
from importlib import resources
from typing import Any

import yaml
from pydantic import Field, ValidationInfo, field_validator

from gpuinfra.addons import accounting, alerting
from gpuinfra.addons.alerting import AlertingSettings
from gpuinfra.addons.base import (
    MONITOR_LABELS,
    PROMETHEUS_RELEASE,
    AddonRender,
    AddonSettings,
    Chart,
    GeneratedSecret,
    Name,
    Quantity,
    ServiceUrl,
    enabled_field,
    metadata,
    quantity_amount,
    secret_config_key,
    url_port,
)
from gpuinfra.versions import Versions

# Grafana's dashboard sidecar loads ConfigMaps carrying this label from every namespace.
DASHBOARD_LABEL = "grafana_dashboard"
DASHBOARD_LABEL_VALUE = "1"
# Grafana's admin user on the Pulumi path, and the length of its generated password.
GRAFANA_ADMIN_USER = "admin"
GRAFANA_PASSWORD_LENGTH = 32


class PrometheusStackSettings(AddonSettings):
    enabled: bool = enabled_field("Install the Prometheus stack", default=True)
    namespace: Name = Field(default="monitoring", description="Namespace of the release.")
    retention: str = Field(
        default="15d",
        # At least 1 of the unit: Prometheus reads 0 as its own default, not as "keep nothing".
        pattern=r"^0*[1-9][0-9]*(ms|s|m|h|d|w|y)$",
        description="How long Prometheus keeps samples (e.g. 15d).",
    )
    retention_size: str = Field(
        default="",
        pattern=r"^([0-9]+(B|KB|MB|GB|TB|PB|EB))?$",
        description="Drop the oldest data once the volume holds this much (e.g. 45GB); empty "
        "for no size limit.",
    )
    storage_size: Quantity = Field(
        default="50Gi", description="Size of Prometheus's volume (a Kubernetes quantity)."
    )
    storage_class: Name | None = Field(
        default=None,
        description="StorageClass of Prometheus's volume; unset for the cluster default.",
    )
    grafana_admin_secret: Name = Field(
        default="grafana-admin",
        description="Secret in the namespace holding Grafana's admin user and password (never a "
        "plaintext value): a stack generates it; a site creates it before the first run.",
    )
    grafana_admin_user_key: str = Field(
        default="admin-user", description="Key of the admin user in that Secret."
    )
    grafana_admin_password_key: str = Field(
        default="admin-password", description="Key of the admin password in that Secret."
    )
    loki_datasource_url: ServiceUrl | None = Field(
        default=None,
        pattern=r"^https?://[^\s/]+(:\d+)?(/\S*)?$",
        description="URL of a Loki Grafana shows as a data source (the Loki add-on's: "
        "http://loki.<its namespace>.svc:3100); Grafana may then reach that port.",
    )
    require_cost_labels: bool = Field(
        default=True,
        description="Refuse pods that request GPUs without the team and project labels (a "
        "ValidatingAdmissionPolicy); the GPU-hours report counts unlabelled pods as '-'.",
    )
    cost_labels_exempt_namespaces: list[Name] = Field(
        default_factory=lambda: ["kube-system", "gpu-operator"],
        description="Namespaces whose GPU pods need no team or project label; the GPU "
        "Operator's must be among them while it is enabled (its validators run there).",
    )
    alerting: AlertingSettings = Field(
        default_factory=AlertingSettings,
        description="Who hears of alerts: receivers (wecom, pagerduty, opsgenie, slack, email, "
        "webhook), the receivers per severity (routes.critical pages, routes.warning goes to the "
        "team's chat; info is only recorded) and the Secret holding their credentials.",
    )

    @field_validator("storage_size")
    @classmethod
    def _volume_holds_the_retention(cls, value: str, info: ValidationInfo) -> str:
        # Prometheus's size units are powers of two (1KB is 1024 bytes). A volume smaller than
        # the size it may keep fills before the oldest blocks are dropped, and scrapes stop.
        kept = info.data.get("retention_size")
        found = re.fullmatch(r"([0-9]+)([A-Z]+)", kept or "")
        volume = quantity_amount(value)
        if found is None or volume is None:
            return value
        number, unit = found.groups()
        size = int(number) * 1024 ** ("B", "KB", "MB", "GB", "TB", "PB", "EB").index(unit)
        if size > volume:
            raise ValueError(
                f"{value} is less than the retention size {kept}: the disk fills before "
                "Prometheus drops old data (allowed: a volume larger than the retention size, "
                "with room for the WAL)"
            )
        return value


def values(settings: PrometheusStackSettings, versions: Versions) -> dict[str, Any]:
    del versions
    selector = {"matchLabels": dict(MONITOR_LABELS)}
    storage: dict[str, Any] = {
        "accessModes": ["ReadWriteOnce"],
        "resources": {"requests": {"storage": settings.storage_size}},
    }
    if settings.storage_class:
        storage["storageClassName"] = settings.storage_class
    prometheus_spec: dict[str, Any] = {
        "retention": settings.retention,
        "storageSpec": {"volumeClaimTemplate": {"spec": storage}},
        "serviceMonitorSelectorNilUsesHelmValues": False,
        "serviceMonitorSelector": selector,
        "podMonitorSelectorNilUsesHelmValues": False,
        "podMonitorSelector": selector,
        "ruleSelectorNilUsesHelmValues": False,
        "ruleSelector": selector,
    }
    if settings.retention_size:
        prometheus_spec["retentionSize"] = settings.retention_size
    alertmanager: dict[str, Any] = {"config": alerting.config(settings.alerting)}
    if settings.alerting.secret:
        alertmanager["alertmanagerSpec"] = {"secrets": [settings.alerting.secret]}
    return {
        "prometheus": {"prometheusSpec": prometheus_spec},
        "alertmanager": alertmanager,
        "kube-state-metrics": accounting.kube_state_metrics_values(),
        "grafana": {
            "admin": {
                "existingSecret": settings.grafana_admin_secret,
                "userKey": settings.grafana_admin_user_key,
                "passwordKey": settings.grafana_admin_password_key,
            },
            "sidecar": {
                "dashboards": {
                    "enabled": True,
                    "label": DASHBOARD_LABEL,
                    "labelValue": DASHBOARD_LABEL_VALUE,
                    "searchNamespace": "ALL",
                }
            },
            **(
                {"additionalDataSources": loki_datasources(settings)}
                if settings.loki_datasource_url
                else {}
            ),
        },
    }


def loki_datasources(settings: PrometheusStackSettings) -> list[dict[str, Any]]:
    """Grafana's Loki data source, when one is set."""
    if not settings.loki_datasource_url:
        return []
    return [
        {
            "name": "Loki",
            "type": "loki",
            "uid": "loki",
            "access": "proxy",
            "url": settings.loki_datasource_url,
        }
    ]


def grafana_to_loki(settings: PrometheusStackSettings) -> list[dict[str, Any]]:
    """Grafana's egress to Loki's HTTP port (the namespace denies egress by default)."""
    if not settings.loki_datasource_url:
        return []
    url = settings.loki_datasource_url
    port = url_port(url) or (443 if url.startswith("https://") else 80)
    return [
        {
            "apiVersion": "networking.k8s.io/v1",
            "kind": "NetworkPolicy",
            "metadata": metadata("allow-grafana-to-loki", settings.namespace),
            "spec": {
                "podSelector": {"matchLabels": {"app.kubernetes.io/name": "grafana"}},
                "policyTypes": ["Egress"],
                "egress": [{"ports": [{"protocol": "TCP", "port": port}]}],
            },
        }
    ]


def alert_rules() -> dict[str, Any]:
    """The GPU alert rule groups, as a Prometheus rule file."""
    text = resources.files("gpuinfra.addons").joinpath("data/gpu-alerts.yaml").read_text("utf-8")
    rules: dict[str, Any] = yaml.safe_load(text)
    return rules


def dashboard() -> str:
    """The DCGM exporter's Grafana dashboard, as upstream ships it."""
    text = (
        resources.files("gpuinfra.addons")
        .joinpath("data/dcgm-exporter-dashboard.json")
        .read_text("utf-8")
    )
    # Re-serialised so the ConfigMap is compact and stable.
    return json.dumps(json.loads(text), sort_keys=True, separators=(",", ":"))


def objects(settings: PrometheusStackSettings) -> list[dict[str, Any]]:
    admission = (
        accounting.admission_objects(settings.cost_labels_exempt_namespaces)
        if settings.require_cost_labels
        else []
    )
    return [
        *admission,
        {
            "apiVersion": "monitoring.coreos.com/v1",
            "kind": "PrometheusRule",
            "metadata": metadata("gpuinfra-gpu-alerts", settings.namespace, dict(MONITOR_LABELS)),
            "spec": alert_rules(),
        },
        {
            "apiVersion": "monitoring.coreos.com/v1",
            "kind": "PrometheusRule",
            "metadata": metadata(
                "gpuinfra-gpu-accounting", settings.namespace, dict(MONITOR_LABELS)
            ),
            "spec": accounting.recording_rules(),
        },
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": metadata(
                "gpuinfra-dcgm-dashboard",
                settings.namespace,
                {DASHBOARD_LABEL: DASHBOARD_LABEL_VALUE},
            ),
            "data": {"dcgm-exporter.json": dashboard()},
        },
    ]


def render(settings: PrometheusStackSettings, versions: Versions) -> AddonRender:
    return AddonRender(
        name="prometheus_stack",
        release=PROMETHEUS_RELEASE,
        namespace=settings.namespace,
        chart=Chart.of(versions.kube_prometheus_stack),
        values=values(settings, versions),
        objects=[*objects(settings), *grafana_to_loki(settings)],
        secrets=[grafana_admin_secret(settings), *alerting_secret(settings)],
    )


def alerting_secret(settings: PrometheusStackSettings) -> list[GeneratedSecret]:
    """The Secret the receivers' credentials come from, as the Pulumi path creates it: each key
    from the stack's secret config; on the Ansible path it is the site's to create."""
    name = settings.alerting.secret
    if not name:
        return []
    keys = settings.alerting.secret_keys()
    return [
        GeneratedSecret(
            name=name,
            namespace=settings.namespace,
            from_config={key: secret_config_key(name, key) for key in keys},
        )
    ]


def grafana_admin_secret(settings: PrometheusStackSettings) -> GeneratedSecret:
    """The Secret ``grafana.admin.existingSecret`` names, as the Pulumi path creates it."""
    return GeneratedSecret(
        name=settings.grafana_admin_secret,
        namespace=settings.namespace,
        fixed={settings.grafana_admin_user_key: GRAFANA_ADMIN_USER},
        generated={settings.grafana_admin_password_key: GRAFANA_PASSWORD_LENGTH},
    )


def alerting_secret_config_keys(settings: PrometheusStackSettings) -> list[str]:
    """The stack's secret config keys (``gpuinfra:<key>``) the alerting Secret reads."""
    return [k for s in alerting_secret(settings) for k in s.from_config.values()]

"""Alertmanager's routing: typed receivers, routes by severity, inhibition for GPU alerts.

Receivers render to Alertmanager's own integrations (``wechat_configs`` for WeCom,
``pagerduty_configs``, ``opsgenie_configs``, ``slack_configs``, ``email_configs``,
``webhook_configs``), each speaking its service's API. Every credential is a key of one existing
Secret that the Alertmanager pod mounts under ``/etc/alertmanager/secrets/<secret>/``; the
configuration only names files there (``*_file`` fields), so no token is ever a Helm value,
part of Pulumi state or of a rendered file.

Severity decides who hears of an alert: ``critical`` goes to the receivers that page,
``warning`` to the team's chat, ``info`` to the explicit ``null`` receiver (recorded in
Alertmanager and Grafana, never sent).
"""

from __future__ import annotations

import urllib.parse
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field, model_validator

from gpuinfra.addons.base import Name, Settings
from gpuinfra.loading import cross_field_error
from gpuinfra.suggest import did_you_mean

# Where the Alertmanager CR mounts each Secret listed in alertmanagerSpec.secrets.
SECRETS_DIR = "/etc/alertmanager/secrets"
NULL_RECEIVER = "null"
# Severities that notify someone; info (and anything else) is only recorded.
NOTIFYING = ("critical", "warning")
# DCGM exporter puts the GPU's UUID on every series it exports; the GPU alerts keep it.
GPU_LABEL = "UUID"

_SecretKey = Annotated[
    str,
    Field(
        pattern=r"^[-._a-zA-Z0-9]+$",
        description="Key in the alerting Secret that holds this credential.",
    ),
]


def _http_url(value: str) -> str:
    """An http(s) URL Alertmanager loads: it refuses its whole configuration for a host it
    cannot parse ('http://[::1') or a control character."""
    try:
        parts = urllib.parse.urlsplit(value)
        usable = value.isascii() and value.isprintable() and bool(parts.hostname)
        usable = usable and parts.port != 0  # reading the port checks it is 1-65535
    except ValueError:
        usable = False
    if not usable:
        raise ValueError(
            f"{value!r} is not an http(s) URL with a host (allowed: e.g. "
            "https://alerts.example.com/v2; ASCII, a port 1-65535)"
        )
    return value


_Url = Annotated[str, Field(pattern=r"^https?://[^\s]+$"), AfterValidator(_http_url)]


def _smarthost(value: str) -> str:
    port = int(value.rpartition(":")[2])
    if not 1 <= port <= 65535:
        raise ValueError(
            f"{value!r}: port {port} is out of range (allowed: host:port with a port 1-65535, "
            "e.g. smtp.example.com:587)"
        )
    return value


_TITLE = (
    '[{{ .Status | toUpper }}{{ if eq .Status "firing" }}:{{ .Alerts.Firing | len }}{{ end }}] '
    "{{ .CommonLabels.alertname }}"
)
_TEXT = "{{ range .Alerts }}{{ .Annotations.summary }}\n{{ .Annotations.description }}\n{{ end }}"


class _Receiver(Settings):
    name: Name = Field(description="Name routes refer to.")
    send_resolved: bool = Field(default=True, description="Also notify when the alert resolves.")

    def secret_keys(self) -> list[str]:
        return [
            value
            for field, value in self
            if field.endswith("_key") and isinstance(value, str) and value
        ]

    def integration(self, secret_dir: str) -> tuple[str, dict[str, Any]]:
        raise NotImplementedError


class WeComReceiver(_Receiver):
    """WeCom (WeChat Work) application messages to a party, users or a tag."""

    type: Literal["wecom"]
    corp_id: str = Field(min_length=1, description="The WeCom corporation ID (ww...).")
    agent_id: str = Field(pattern=r"^[0-9]+$", description="The WeCom application's AgentId.")
    api_secret_key: _SecretKey = "wecom-api-secret"
    to_party: str = Field(default="", description="Department IDs, separated by '|'.")
    to_user: str = Field(default="", description="User IDs, separated by '|'.")
    to_tag: str = Field(default="", description="Tag IDs, separated by '|'.")
    api_url: _Url | None = Field(
        default=None, description="WeCom API base URL; unset for qyapi.weixin.qq.com."
    )

    @model_validator(mode="after")
    def _someone(self) -> WeComReceiver:
        if not (self.to_party or self.to_user or self.to_tag):
            raise ValueError("a wecom receiver needs toParty, toUser or toTag")
        return self

    def integration(self, secret_dir: str) -> tuple[str, dict[str, Any]]:
        config: dict[str, Any] = {
            "send_resolved": self.send_resolved,
            "corp_id": self.corp_id,
            "agent_id": self.agent_id,
            "api_secret_file": f"{secret_dir}/{self.api_secret_key}",
            "message_type": "markdown",
            "message": f"**{_TITLE}**\n{_TEXT}",
        }
        for field in ("to_party", "to_user", "to_tag"):
            if getattr(self, field):
                config[field] = getattr(self, field)
        if self.api_url:
            config["api_url"] = self.api_url
        return "wechat_configs", config


class PagerDutyReceiver(_Receiver):
    """PagerDuty Events API v2: an incident per alert group."""

    type: Literal["pagerduty"]
    routing_key_key: _SecretKey = "pagerduty-routing-key"
    url: _Url | None = Field(
        default=None, description="Events API URL; unset for events.pagerduty.com."
    )

    def integration(self, secret_dir: str) -> tuple[str, dict[str, Any]]:
        config: dict[str, Any] = {
            "send_resolved": self.send_resolved,
            "routing_key_file": f"{secret_dir}/{self.routing_key_key}",
            "severity": "{{ .CommonLabels.severity }}",
            "description": _TITLE,
        }
        if self.url:
            config["url"] = self.url
        return "pagerduty_configs", config


class OpsgenieReceiver(_Receiver):
    """Opsgenie alerts: P1 for critical, P3 otherwise."""

    type: Literal["opsgenie"]
    api_key_key: _SecretKey = "opsgenie-api-key"
    api_url: _Url | None = Field(
        default=None, description="Opsgenie API URL; unset for api.opsgenie.com (EU: api.eu...)."
    )

    def integration(self, secret_dir: str) -> tuple[str, dict[str, Any]]:
        config: dict[str, Any] = {
            "send_resolved": self.send_resolved,
            "api_key_file": f"{secret_dir}/{self.api_key_key}",
            "message": _TITLE,
            "description": _TEXT,
            "priority": '{{ if eq .CommonLabels.severity "critical" }}P1{{ else }}P3{{ end }}',
        }
        if self.api_url:
            config["api_url"] = self.api_url
        return "opsgenie_configs", config


class SlackReceiver(_Receiver):
    """A Slack incoming webhook; its URL (which carries the token) lives in the Secret."""

    type: Literal["slack"]
    api_url_key: _SecretKey = "slack-webhook-url"
    channel: str = Field(default="", description="Channel to post in; unset for the webhook's.")

    def integration(self, secret_dir: str) -> tuple[str, dict[str, Any]]:
        config: dict[str, Any] = {
            "send_resolved": self.send_resolved,
            "api_url_file": f"{secret_dir}/{self.api_url_key}",
            "title": _TITLE,
            "text": _TEXT,
        }
        if self.channel:
            config["channel"] = self.channel
        return "slack_configs", config


class EmailReceiver(_Receiver):
    """Mail through an SMTP relay."""

    type: Literal["email"]
    to: str = Field(pattern=r"^[^@\s]+@[^@\s]+$", description="Recipient address.")
    sender: str = Field(pattern=r"^[^@\s]+@[^@\s]+$", description="Sender (From) address.")
    smarthost: Annotated[str, AfterValidator(_smarthost)] = Field(
        pattern=r"^[^:\s]+:[0-9]{1,5}$", description="SMTP relay as host:port."
    )
    auth_username: str = Field(default="", description="SMTP user; unset for no login.")
    auth_password_key: _SecretKey | None = None
    require_tls: bool = Field(default=True, description="Refuse to send without STARTTLS.")

    @model_validator(mode="after")
    def _login(self) -> EmailReceiver:
        if bool(self.auth_username) != bool(self.auth_password_key):
            raise cross_field_error(
                "authUsername and authPasswordKey go together",
                "auth_password_key" if self.auth_username else "auth_username",
                allowed="both or neither",
            )
        return self

    def integration(self, secret_dir: str) -> tuple[str, dict[str, Any]]:
        config: dict[str, Any] = {
            "send_resolved": self.send_resolved,
            "to": self.to,
            "from": self.sender,
            "smarthost": self.smarthost,
            "require_tls": self.require_tls,
        }
        if self.auth_username:
            config["auth_username"] = self.auth_username
            config["auth_password_file"] = f"{secret_dir}/{self.auth_password_key}"
        return "email_configs", config


class WebhookReceiver(_Receiver):
    """Alertmanager's own webhook JSON, for a bridge or an in-house service."""

    type: Literal["webhook"]
    url_key: _SecretKey = "webhook-url"

    def integration(self, secret_dir: str) -> tuple[str, dict[str, Any]]:
        return "webhook_configs", {
            "send_resolved": self.send_resolved,
            "url_file": f"{secret_dir}/{self.url_key}",
        }


Receiver = Annotated[
    WeComReceiver
    | PagerDutyReceiver
    | OpsgenieReceiver
    | SlackReceiver
    | EmailReceiver
    | WebhookReceiver,
    Field(discriminator="type"),
]


class SeverityRoutes(Settings):
    critical: list[str] = Field(
        default_factory=list, description="Receivers that page for critical alerts."
    )
    warning: list[str] = Field(
        default_factory=list, description="Receivers (the team's chat) for warnings."
    )


class AlertingSettings(Settings):
    secret: Name | None = Field(
        default=None,
        description="Secret in the namespace holding every receiver credential: a stack creates "
        "it from its secret config (gpuinfra:<secret>-<key>); a site creates it before the run.",
    )
    receivers: list[Receiver] = Field(default_factory=list)
    routes: SeverityRoutes = Field(default_factory=SeverityRoutes)

    @model_validator(mode="after")
    def _consistent(self) -> AlertingSettings:
        names = [r.name for r in self.receivers]
        for i, name in enumerate(names):
            if name == NULL_RECEIVER:
                raise cross_field_error(
                    f"receiver name '{NULL_RECEIVER}' is reserved",
                    "receivers",
                    i,
                    "name",
                    allowed=f"any name but '{NULL_RECEIVER}'",
                )
            if names.count(name) > 1:
                again = names.index(name, i + 1)
                raise cross_field_error(
                    f"receiver '{name}' is declared twice",
                    "receivers",
                    again,
                    "name",
                    allowed="each receiver name once",
                )
        for severity in NOTIFYING:
            chosen = getattr(self.routes, severity)
            for j, name in enumerate(chosen):
                # Each listing is a route of its own: the receiver would hear of every alert
                # once per listing.
                if chosen.count(name) > 1:
                    raise cross_field_error(
                        f"routes.{severity}: receiver '{name}' is listed twice",
                        "routes",
                        severity,
                        chosen.index(name, j + 1),
                        allowed="each receiver once per severity",
                    )
                if name not in names:
                    known = ", ".join(names) or "none declared"
                    raise cross_field_error(
                        f"routes.{severity}: unknown receiver '{name}'"
                        f"{did_you_mean(name, names)} (receivers: {known})",
                        "routes",
                        severity,
                        j,
                    )
        if self.secret is None and any(r.secret_keys() for r in self.receivers):
            raise cross_field_error(
                "receivers read credentials: set secret to the Secret holding them", "secret"
            )
        return self

    def secret_keys(self) -> list[str]:
        """Every key the Secret must hold, in order, once each."""
        keys = [k for r in self.receivers for k in r.secret_keys()]
        return list(dict.fromkeys(keys))


def config(settings: AlertingSettings) -> dict[str, Any]:
    """The Alertmanager configuration (``alertmanager.config`` of kube-prometheus-stack)."""
    secret_dir = f"{SECRETS_DIR}/{settings.secret}"
    receivers: list[dict[str, Any]] = [{"name": NULL_RECEIVER}]
    for receiver in settings.receivers:
        kind, integration = receiver.integration(secret_dir)
        receivers.append({"name": receiver.name, kind: [integration]})
    routes: list[dict[str, Any]] = [
        {"receiver": NULL_RECEIVER, "matchers": ['alertname = "Watchdog"']},
        {"receiver": NULL_RECEIVER, "matchers": ['alertname = "InfoInhibitor"']},
    ]
    for severity in NOTIFYING:
        chosen = getattr(settings.routes, severity) or [NULL_RECEIVER]
        for position, name in enumerate(chosen):
            route: dict[str, Any] = {"receiver": name, "matchers": [f'severity = "{severity}"']}
            # Every receiver of a severity hears of the alert, not only the first.
            if position < len(chosen) - 1:
                route["continue"] = True
            routes.append(route)
    routes.append({"receiver": NULL_RECEIVER, "matchers": ['severity = "info"']})
    return {
        "route": {
            "group_by": ["alertname", "namespace", "Hostname"],
            "group_wait": "30s",
            "group_interval": "5m",
            "repeat_interval": "12h",
            "receiver": NULL_RECEIVER,
            "routes": routes,
        },
        "inhibit_rules": inhibit_rules(),
        "receivers": receivers,
    }


def inhibit_rules() -> list[dict[str, Any]]:
    """A louder alert silences quieter ones about the same thing.

    GPU alerts come from DCGM exporter series, whose ``namespace`` is the exporter's: every GPU
    in the cluster shares it, so the chart's rules keyed on ``namespace`` would let one GPU's
    alert silence another's. GPU alerts are matched on the GPU's UUID instead, and the
    namespace rules apply only to alerts that carry no UUID.
    """
    gpu = f'{GPU_LABEL} =~ ".+"'
    not_gpu = f'{GPU_LABEL} = ""'
    return [
        {
            "source_matchers": ['severity = "critical"', gpu],
            "target_matchers": ['severity =~ "warning|info"', gpu],
            "equal": [GPU_LABEL],
        },
        {
            "source_matchers": ['severity = "warning"', gpu],
            "target_matchers": ['severity = "info"', gpu],
            "equal": [GPU_LABEL, "alertname"],
        },
        {
            "source_matchers": ['severity = "critical"', not_gpu],
            "target_matchers": ['severity =~ "warning|info"', not_gpu],
            "equal": ["namespace", "alertname"],
        },
        {
            "source_matchers": ['severity = "warning"', not_gpu],
            "target_matchers": ['severity = "info"', not_gpu],
            "equal": ["namespace", "alertname"],
        },
    ]

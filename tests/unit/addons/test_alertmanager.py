"""The rendered Alertmanager configuration, checked and run by the real Alertmanager.

amtool checks it and tests its routes; then a real Alertmanager on loopback, with every
receiver's API pointed at a local sink, gets alerts from ``amtool alert add`` and must deliver
critical and warning ones in each service's own format, never an info one, and must hold back
a warning about a GPU that already has a critical alert, but not about another GPU.
"""

from __future__ import annotations

import json
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuinfra.addons import alerting, prometheus_stack, render_all
from gpuinfra.addons.alerting import AlertingSettings
from gpuinfra.addons.prometheus_stack import PrometheusStackSettings
from gpuinfra.config import load_stack
from gpuinfra.errors import ConfigError
from gpuinfra.loading import validate
from gpuinfra.versions import pinned
from tests import servers

from .conftest import SCENARIOS, scenario_renders

SECRETS = {
    "pagerduty-routing-key": "R0UTINGKEY0123456789abcdef012345",
    "wecom-api-secret": "wecom-secret-value",
    "smtp-password": "smtp-secret",
    "slack-webhook-url": "https://hooks.slack.invalid/services/T0/B0/x",
}


def _for_this_alertmanager(config: dict[str, Any], secrets: Path) -> dict[str, Any]:
    """The config as the test's Alertmanager 0.28 reads it, with its Secret mounted at ``secrets``.

    The chart's Alertmanager (0.34) reads WeCom's secret from ``api_secret_file`` (added in
    0.31); Debian 13's 0.28 only knows ``api_secret``, so here the file's content is put
    inline. Nothing else is changed but the mount path.
    """
    text = yaml.safe_dump(config).replace(alerting.SECRETS_DIR + "/alerting", str(secrets))
    adapted: dict[str, Any] = yaml.safe_load(text)
    for receiver in adapted["receivers"]:
        for wechat in receiver.get("wechat_configs", []):
            wechat["api_secret"] = Path(wechat.pop("api_secret_file")).read_text("utf-8")
    return adapted


def _write_secrets(directory: Path, extra: dict[str, str] | None = None) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    for key, value in {**SECRETS, **(extra or {})}.items():
        (directory / key).write_text(value, "utf-8")
    return directory


def _amtool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [servers.tool(servers.AMTOOL), *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def _rendered(scenario: str) -> dict[str, Any]:
    (stack,) = [r for r in scenario_renders(scenario) if r.name == "prometheus_stack"]
    config: dict[str, Any] = stack.values["alertmanager"]["config"]
    return config


@pytest.fixture
def prod_config(tmp_path: Path) -> Path:
    secrets = _write_secrets(tmp_path / "secrets")
    path = tmp_path / "alertmanager.yml"
    path.write_text(yaml.safe_dump(_for_this_alertmanager(_rendered("everything"), secrets)))
    return path


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_amtool_accepts_the_rendered_config(scenario: str, tmp_path: Path) -> None:
    secrets = _write_secrets(tmp_path / "secrets")
    path = tmp_path / "alertmanager.yml"
    path.write_text(yaml.safe_dump(_for_this_alertmanager(_rendered(scenario), secrets)))
    result = _amtool("check-config", str(path))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


@pytest.mark.parametrize(
    ("labels", "receivers"),
    [
        (["severity=critical", "alertname=GpuUncorrectableMemoryErrors"], "oncall,team-chat"),
        (["severity=warning", "alertname=GpuTemperatureHigh"], "team-chat"),
        (["severity=info", "alertname=GpuIdle"], "null"),
        (["severity=none", "alertname=InfoInhibitor"], "null"),
        (["severity=warning", "alertname=Watchdog"], "null"),
    ],
)
def test_routes_by_severity(prod_config: Path, labels: list[str], receivers: str) -> None:
    result = _amtool(
        "config", "routes", "test", f"--config.file={prod_config}",
        f"--verify.receivers={receivers}", *labels,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr


def test_routes_test_catches_a_wrong_receiver(prod_config: Path) -> None:
    result = _amtool(
        "config", "routes", "test", f"--config.file={prod_config}",
        "--verify.receivers=team-chat", "severity=info",
    )  # fmt: skip
    assert result.returncode != 0


@pytest.fixture(scope="module")
def shipped_prod(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The Alertmanager configuration the shipped prod stack renders, its Secret mounted."""
    cfg = load_stack("prod")
    (stack,) = [
        r for r in render_all(cfg.addons, versions=pinned()) if r.name == "prometheus_stack"
    ]
    tmp = tmp_path_factory.mktemp("prod-alerting")
    path = tmp / "alertmanager.yml"
    config = stack.values["alertmanager"]["config"]
    path.write_text(yaml.safe_dump(_for_this_alertmanager(config, _write_secrets(tmp / "s"))))
    return path


def test_amtool_accepts_the_prod_stacks_config(shipped_prod: Path) -> None:
    result = _amtool("check-config", str(shipped_prod))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout
    assert "pagerduty_configs" in shipped_prod.read_text() and "slack_configs" in (
        shipped_prod.read_text()
    )


@pytest.mark.parametrize(
    ("labels", "receivers"),
    [
        (["severity=critical", "alertname=GpuXidFatal"], "oncall"),
        (["severity=warning", "alertname=GpuTemperatureHigh"], "team-chat"),
        (["severity=info", "alertname=GpuIdle"], "null"),
    ],
)
def test_the_prod_stack_pages_on_critical_and_chats_on_warning(
    shipped_prod: Path, labels: list[str], receivers: str
) -> None:
    result = _amtool(
        "config", "routes", "test", f"--config.file={shipped_prod}",
        f"--verify.receivers={receivers}", *labels,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr


def _live_settings(sink_url: str) -> PrometheusStackSettings:
    return PrometheusStackSettings.model_validate(
        {
            "alerting": {
                "secret": "alerting",
                "receivers": [
                    {"name": "oncall", "type": "pagerduty", "url": f"{sink_url}/pagerduty"},
                    {
                        "name": "team-chat",
                        "type": "wecom",
                        "corpId": "ww0123456789abcdef",
                        "agentId": "1000002",
                        "toParty": "2",
                        "apiUrl": f"{sink_url}/wecom/",
                    },
                    {"name": "slack", "type": "slack", "channel": "#gpu"},
                ],
                "routes": {"critical": ["oncall"], "warning": ["team-chat", "slack"]},
            }
        }
    )


def _add(url: str, *labels: str, summary: str) -> None:
    result = _amtool(
        "alert", "add", f"--alertmanager.url={url}", *labels, f"--annotation=summary={summary}"
    )
    assert result.returncode == 0, result.stdout + result.stderr


def _alerts(url: str) -> list[dict[str, Any]]:
    with urllib.request.urlopen(f"{url}/api/v2/alerts", timeout=5) as response:
        alerts: list[dict[str, Any]] = json.load(response)
    return alerts


def test_alerts_reach_each_receiver_in_its_own_format(tmp_path: Path) -> None:
    with servers.sink() as sink:
        settings = _live_settings(sink.url)
        secrets = _write_secrets(tmp_path / "secrets", {"slack-webhook-url": f"{sink.url}/slack"})
        # The Alertmanager section exactly as the chart gets it.
        rendered = prometheus_stack.values(settings, pinned())["alertmanager"]["config"]
        config = _for_this_alertmanager(rendered, secrets)
        # Notification timing is not under test; the test should not wait 30 s for a group.
        config["route"] |= {"group_wait": "1s", "group_interval": "1s"}
        path = tmp_path / "alertmanager.yml"
        path.write_text(yaml.safe_dump(config), "utf-8")
        with servers.alertmanager(path, tmp_path) as url:
            gpu_a = ["UUID=GPU-aaaa", "gpu=0", "Hostname=node-1", "namespace=gpu-operator"]
            gpu_b = ["UUID=GPU-bbbb", "gpu=1", "Hostname=node-1", "namespace=gpu-operator"]
            gpu_c = ["UUID=GPU-cccc", "gpu=2", "Hostname=node-2", "namespace=gpu-operator"]
            _add(url, "alertname=GpuUncorrectableMemoryErrors", "severity=critical", *gpu_a,
                 summary="GPU 0 on node-1 has uncorrectable memory errors")  # fmt: skip
            time.sleep(1)
            _add(url, "alertname=GpuTemperatureHigh", "severity=warning", *gpu_a,
                 summary="GPU 0 on node-1 runs above 85")  # fmt: skip
            _add(url, "alertname=GpuTemperatureHigh", "severity=warning", *gpu_b,
                 summary="GPU 1 on node-1 runs above 85")  # fmt: skip
            _add(url, "alertname=GpuIdle", "severity=info", *gpu_c,
                 summary="GPU 2 on node-2 idle for 2 hours")  # fmt: skip

            (page,) = sink.wait_for("/pagerduty")
            sink.wait_for("/wecom/message/send")
            sink.wait_for("/slack")
            # Long enough for a wrongly routed info alert's group to be flushed as well.
            time.sleep(4)
            alerts = {(a["labels"]["alertname"], a["labels"]["UUID"]): a for a in _alerts(url)}

    # PagerDuty Events API v2, with the routing key read from the mounted Secret.
    assert page.body["routing_key"] == SECRETS["pagerduty-routing-key"]
    assert page.body["event_action"] == "trigger"
    assert page.body["payload"]["severity"] == "critical"
    assert "GpuUncorrectableMemoryErrors" in page.body["payload"]["summary"]

    # WeCom: a token fetched with the corp's secret, then a markdown message to the party.
    (token,) = sink.to("/wecom/gettoken")[:1]
    assert token.query["corpid"] == ["ww0123456789abcdef"]
    assert token.query["corpsecret"] == [SECRETS["wecom-api-secret"]]
    messages = sink.to("/wecom/message/send")
    assert all(m.query["access_token"] == ["token-1"] for m in messages)
    assert {(m.body["msgtype"], m.body["agentid"], m.body["toparty"]) for m in messages} == {
        ("markdown", "1000002", "2")
    }
    chat = "\n".join(m.body["markdown"]["content"] for m in messages)
    assert "GPU 1 on node-1 runs above 85" in chat

    # Slack: an incoming-webhook payload at the URL kept in the Secret.
    slack = sink.to("/slack")
    assert slack[0].body["channel"] == "#gpu"
    assert "GpuTemperatureHigh" in slack[0].body["attachments"][0]["title"]

    everything = json.dumps([r.body for r in sink.requests])
    # The warning about the GPU that already pages is held back; the other GPU's is not.
    assert "GPU 0 on node-1 runs above 85" not in everything
    assert alerts[("GpuTemperatureHigh", "GPU-aaaa")]["status"]["inhibitedBy"]
    assert not alerts[("GpuTemperatureHigh", "GPU-bbbb")]["status"]["inhibitedBy"]
    # Info is recorded in Alertmanager, and sent nowhere.
    assert alerts[("GpuIdle", "GPU-cccc")]["status"]["state"] == "active"
    assert "GpuIdle" not in everything
    assert "idle for 2 hours" not in everything
    assert not sink.to("/pagerduty")[1:], "only the critical alert pages"


def test_no_credential_is_written_in_the_values() -> None:
    (stack,) = [r for r in scenario_renders("everything") if r.name == "prometheus_stack"]
    text = yaml.safe_dump(stack.values)
    assert "/etc/alertmanager/secrets/alerting/pagerduty-routing-key" in text
    assert stack.values["alertmanager"]["alertmanagerSpec"]["secrets"] == ["alerting"]
    for integration in ("api_secret:", "routing_key:", "auth_password:", "api_key:", "api_url:"):
        assert integration not in text


@pytest.mark.parametrize(
    ("alerting_block", "message"),
    [
        (
            {"receivers": [{"name": "oncall", "type": "pagerduty"}],
             "routes": {"critical": ["oncal"]}},
            "routes.critical: unknown receiver 'oncal'; did you mean 'oncall'?",
        ),
        (
            {"receivers": [{"name": "oncall", "type": "pagerduty"}],
             "routes": {"critical": ["oncall"]}},
            "receivers read credentials: set secret to the Secret holding them",
        ),
        (
            {"secret": "alerting", "receivers": [{"name": "oncall", "type": "pagerduty"}],
             "routes": {"critical": ["oncall", "oncall"]}},
            "routes.critical: receiver 'oncall' is listed twice",
        ),
        (
            {"secret": "alerting", "receivers": [{"name": "chat", "type": "wecom",
             "corpId": "ww1", "agentId": "1000002"}]},
            "a wecom receiver needs toParty, toUser or toTag",
        ),
        (
            {"secret": "alerting", "receivers": [{"name": "chat", "type": "wechat"}]},
            "'wechat'",
        ),
        # Alertmanager refuses the whole configuration for a URL it cannot parse.
        (
            {"secret": "alerting", "receivers": [{"name": "oncall", "type": "pagerduty",
             "url": "http://[::1"}]},
            "receivers[0].pagerduty.url: 'http://[::1' is not an http(s) URL with a host",
        ),
        (
            {"secret": "alerting", "receivers": [{"name": "oncall", "type": "opsgenie",
             "apiUrl": "https://api.opsgenie.com\x7f/"}]},
            "receivers[0].opsgenie.apiUrl: 'https://api.opsgenie.com\\x7f/' is not an http(s) URL",
        ),
        (
            {"secret": "alerting", "receivers": [{"name": "chat", "type": "wecom", "corpId": "w",
             "agentId": "1", "toParty": "2", "apiUrl": "https://qyapi.example:99999/"}]},
            "(allowed: e.g. https://alerts.example.com/v2; ASCII, a port 1-65535)",
        ),
        *(
            (
                {"secret": "alerting", "receivers": [{"name": "mail", "type": "email",
                 "to": "a@example.com", "sender": "b@example.com", "smarthost": f"smtp:{port}"}]},
                f"receivers[0].email.smarthost: 'smtp:{port}': port {int(port)} is out of range "
                "(allowed: host:port with a port 1-65535, e.g. smtp.example.com:587)",
            )
            for port in ("0", "65536", "99999")
        ),
    ],
)  # fmt: skip
def test_a_bad_alerting_block_is_one_clear_line(
    alerting_block: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigError) as raised:
        validate(AlertingSettings, alerting_block, "stacks/Pulumi.prod.yaml")
    (line,) = raised.value.lines()
    assert line.startswith("stacks/Pulumi.prod.yaml")
    assert message in line

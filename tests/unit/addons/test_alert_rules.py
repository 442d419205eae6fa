"""The GPU alert rules load in Prometheus and fire exactly when tests/rules/ says they should."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from gpuinfra.addons import prometheus_stack

from .conftest import scenario_renders

PROMTOOL = shutil.which("promtool") or "/usr/bin/promtool"
RULE_TESTS = Path(__file__).resolve().parents[2] / "rules" / "gpu-alerts.test.yml"


def _promtool(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    if not Path(PROMTOOL).exists():
        pytest.fail("promtool not found: install the Debian package 'prometheus'")
    return subprocess.run(
        [PROMTOOL, *args], cwd=cwd, capture_output=True, text=True, timeout=120, check=False
    )


@pytest.fixture
def rules_dir(tmp_path: Path) -> Path:
    """The rendered PrometheusRule's groups as a rule file, beside the unit tests."""
    (stack,) = [r for r in scenario_renders("defaults") if r.name == "prometheus_stack"]
    (rule,) = [o for o in stack.objects if o["metadata"]["name"] == "gpuinfra-gpu-alerts"]
    (tmp_path / "gpu-alerts.rules.yml").write_text(yaml.safe_dump(rule["spec"]), "utf-8")
    shutil.copy(RULE_TESTS, tmp_path / RULE_TESTS.name)
    return tmp_path


def test_rules_pass_promtool_check(rules_dir: Path) -> None:
    result = _promtool("check", "rules", "gpu-alerts.rules.yml", cwd=rules_dir)
    assert result.returncode == 0, result.stdout + result.stderr
    rules = yaml.safe_load((rules_dir / "gpu-alerts.rules.yml").read_text())
    count = sum(len(group["rules"]) for group in rules["groups"])
    assert count >= 9
    assert f"SUCCESS: {count} rules found" in result.stdout


def test_alerts_fire_when_they_should_and_not_before(rules_dir: Path) -> None:
    result = _promtool("test", "rules", RULE_TESTS.name, cwd=rules_dir)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_unit_tests_catch_a_shorter_for(rules_dir: Path) -> None:
    rules = yaml.safe_load((rules_dir / "gpu-alerts.rules.yml").read_text("utf-8"))
    memory = next(
        r for g in rules["groups"] for r in g["rules"] if r.get("alert") == "GpuMemoryHigh"
    )
    memory["for"] = "3m"
    (rules_dir / "gpu-alerts.rules.yml").write_text(yaml.safe_dump(rules), "utf-8")
    result = _promtool("test", "rules", RULE_TESTS.name, cwd=rules_dir)
    assert result.returncode != 0
    assert "alertname: GpuMemoryHigh, time: 4m" in result.stdout + result.stderr


def test_every_alert_has_a_unit_test() -> None:
    tests = RULE_TESTS.read_text("utf-8")
    alerts = {r["alert"] for g in prometheus_stack.alert_rules()["groups"] for r in g["rules"]}
    assert {a for a in alerts if f"alertname: {a}\n" not in tests} == set()

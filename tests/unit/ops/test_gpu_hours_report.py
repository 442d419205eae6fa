"""``gpuinfra report gpu-hours`` against a real Prometheus holding a known day of GPU use.

The raw series (kube-state-metrics' GPU requests, pod phases and labels, DCGM utilisation) are
backfilled with ``promtool tsdb create-blocks-from openmetrics``; the shipped recording rules
are then evaluated over that history with ``promtool tsdb create-blocks-from rules`` against
the same Prometheus, which is restarted on both sets of blocks and asked by the report.
"""

from __future__ import annotations

import csv
import io
import json
import subprocess
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
import yaml

from gpuinfra.ops.prometheus import prometheus_duration
from tests import servers
from tests.conftest import run_cli

from ..addons.conftest import scenario_renders

STEP = 60
RETENTION = "400d"
# The window the report covers ends here; the data runs on for a while after it, so that the
# window's last rule evaluation exists whatever promtool does at its --end.
END = datetime.now(UTC).replace(minute=0, second=0, microsecond=0) - timedelta(hours=3)
START = END - timedelta(hours=26)
DATA_END = END + timedelta(minutes=30)
# Half a minute past the grid: the window then holds exactly 1440 evaluations.
UNTIL = END + timedelta(seconds=30)
SERVE_FROM = END - timedelta(hours=12) + timedelta(seconds=30)


def _series(name: str, labels: dict[str, str], value: float, since: datetime) -> list[str]:
    text = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    lines = []
    moment = since
    while moment <= DATA_END:
        lines.append(f"{name}{{{text}}} {value} {moment.timestamp():.0f}")
        moment += timedelta(seconds=STEP)
    return lines


def openmetrics() -> str:
    serve = {"namespace": "ml-prod", "pod": "serve-b"}
    train = {"namespace": "ml-dev", "pod": "train-a"}
    scratch = {"namespace": "scratch", "pod": "scratch-d"}
    pending = {"namespace": "ml-dev", "pod": "pending-c"}
    gpu = {"resource": "nvidia_com_gpu", "unit": "integer"}
    families = {
        "kube_pod_container_resource_requests": [
            ({**train, **gpu, "container": "main"}, 2, START),
            ({**serve, **gpu, "container": "triton"}, 1, SERVE_FROM),
            ({**scratch, **gpu, "container": "main"}, 1, START),
            ({**pending, **gpu, "container": "main"}, 4, START),
            ({**train, "resource": "cpu", "unit": "core", "container": "main"}, 8, START),
        ],
        "kube_pod_status_phase": [
            ({**train, "phase": "Running"}, 1, START),
            ({**serve, "phase": "Running"}, 1, SERVE_FROM),
            ({**scratch, "phase": "Running"}, 1, START),
            ({**pending, "phase": "Pending"}, 1, START),
            ({**pending, "phase": "Running"}, 0, START),
        ],
        "kube_pod_labels": [
            ({**train, "label_team": "vision", "label_project": "resnet"}, 1, START),
            ({**serve, "label_team": "nlp", "label_project": "chat"}, 1, SERVE_FROM),
            (scratch, 1, START),
            ({**pending, "label_team": "vision", "label_project": "resnet"}, 1, START),
        ],
        "DCGM_FI_DEV_GPU_UTIL": [
            ({**train, "UUID": "GPU-1", "gpu": "0"}, 50, START),
            ({**train, "UUID": "GPU-2", "gpu": "1"}, 50, START),
            ({**serve, "UUID": "GPU-3", "gpu": "0"}, 100, SERVE_FROM),
            ({**scratch, "UUID": "GPU-4", "gpu": "1"}, 0, START),
            ({"namespace": "gpu-operator", "UUID": "GPU-5", "gpu": "2"}, 30, START),
        ],
    }
    lines = []
    for name, series in families.items():
        lines.append(f"# TYPE {name} gauge")
        for labels, value, since in series:
            lines += _series(name, labels, value, since)
    return "\n".join([*lines, "# EOF", ""])


def _promtool(*args: str) -> None:
    result = subprocess.run(
        [servers.tool("promtool"), *args], capture_output=True, text=True, timeout=300, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.fixture(scope="module")
def prometheus_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    work = tmp_path_factory.mktemp("gpu-hours")
    (work / "metrics.om").write_text(openmetrics(), "utf-8")
    data = work / "data"
    _promtool("tsdb", "create-blocks-from", "openmetrics", str(work / "metrics.om"), str(data))
    (stack,) = [r for r in scenario_renders("defaults") if r.name == "prometheus_stack"]
    (rule,) = [o for o in stack.objects if o["metadata"]["name"] == "gpuinfra-gpu-accounting"]
    rules = work / "gpu-accounting.rules.yml"
    rules.write_text(yaml.safe_dump(rule["spec"]), "utf-8")
    config = work / "prometheus.yml"
    config.write_text("global: {scrape_interval: 1m, evaluation_interval: 1m}\n", "utf-8")
    with servers.prometheus(config, data, work) as url:
        _promtool(
            "tsdb", "create-blocks-from", "rules", f"--url={url}",
            f"--start={START.timestamp():.0f}", f"--end={DATA_END.timestamp():.0f}",
            "--eval-interval=60s", f"--output-dir={work / 'recorded'}", str(rules),
        )  # fmt: skip
    for block in (work / "recorded").iterdir():
        block.rename(data / block.name)
    # Kept for 400 days: a report over a longer window reaches past the oldest sample.
    with servers.prometheus(config, data, work, retention=RETENTION) as url:
        yield url


def test_a_window_longer_than_the_retention_is_reported_with_a_warning(
    prometheus_url: str,
) -> None:
    result = run_cli(
        "report", "gpu-hours", "--prometheus", prometheus_url, "--until", UNTIL.isoformat(),
        "--since", "401d", "--format", "json",
    )  # fmt: skip
    assert result.code == 0, result.stderr
    # The document stays whole on stdout; the warning, one line, goes to stderr.
    totals = {r["team"]: r["gpu_hours_allocated"] for r in json.loads(result.stdout)["rows"]}
    # Every sample the server holds: train-a's two GPUs over the 26 hours of data, more than
    # the 48 GPU-hours of the last 24 hours.
    assert 48.0 < totals["vision"] <= 52.1
    (line,) = result.stderr.splitlines()
    assert line.startswith(
        f"warning: Prometheus at {prometheus_url} keeps {RETENTION} of samples; the window starts "
    )
    assert "are missing from the report" in line


def test_a_window_inside_the_retention_has_no_warning(prometheus_url: str) -> None:
    result = run_cli(
        "report", "gpu-hours", "--prometheus", prometheus_url, "--until", UNTIL.isoformat(),
        "--since", "399d", "--format", "csv",
    )  # fmt: skip
    assert (result.code, result.stderr) == (0, "")


def _report(url: str, *args: str) -> tuple[int, str]:
    result = run_cli(
        "report", "gpu-hours", "--prometheus", url, "--until", UNTIL.isoformat(), *args
    )
    return result.code, result.stdout + result.stderr


def test_gpu_hours_per_team_project_and_namespace(prometheus_url: str) -> None:
    code, output = _report(prometheus_url, "--since", "24h", "--format", "json")
    assert code == 0, output
    rows = {
        (r["team"], r["project"], r["namespace"]): (
            r["gpu_hours_allocated"], r["gpu_hours_used"], r["utilisation"]
        )
        for r in json.loads(output)["rows"]
    }  # fmt: skip
    assert rows == {
        # Two GPUs all day at half use.
        ("vision", "resnet", "ml-dev"): (48.0, 24.0, 0.5),
        # One GPU fully used for the last 12 hours only.
        ("nlp", "chat", "ml-prod"): (12.0, 12.0, 1.0),
        # Unlabelled pods are still counted; an idle GPU is allocated, not used.
        ("", "", "scratch"): (24.0, 0.0, 0.0),
    }


def test_a_shorter_window_and_grouping_by_team(prometheus_url: str) -> None:
    code, output = _report(prometheus_url, "--since", "6h", "--by", "team", "--format", "csv")
    assert code == 0, output
    rows = list(csv.DictReader(io.StringIO(output)))
    assert [(r["team"], r["gpu_hours_allocated"], r["gpu_hours_used"]) for r in rows] == [
        ("vision", "12.0", "6.0"),
        ("", "6.0", "0.0"),
        ("nlp", "6.0", "6.0"),
    ]
    assert "namespace" not in rows[0]


def test_the_table_shows_each_team_and_the_total(prometheus_url: str) -> None:
    code, output = _report(prometheus_url, "--since", "24h")
    assert code == 0, output
    lines = output.splitlines()
    assert any("vision" in line and "resnet" in line and "48.0" in line for line in lines)
    assert any("total" in line and "84.0" in line and "36.0" in line for line in lines)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--since", "yesterday"], "--since 'yesterday': not a duration"),
        (["--since", "24h\n"], "--since '24h\\n': not a duration"),
        (["--since", "0h"], "--since '0h': not a duration (allowed: 1m to 3650d"),
        (["--since", "3651d"], "--since '3651d': not a duration (allowed: 1m to 3650d"),
        (["--since", "9" * 30 + "d"], f"--since '{'9' * 30}d': not a duration"),
        (["--until", "2999-01-01T00:00:00Z"], "--until '2999-01-01T00:00:00Z': in the future"),
        (["--until", "next week"], "--until 'next week': not a time"),
        (
            ["--until", "0001-01-01", "--since", "3650d"],
            "--since 3650d before --until 0001-01-01T00:00+00:00 starts before 1970",
        ),
        (["--until", "1970-01-01T12:00:00Z", "--since", "1d"], "--since 1d before --until 1970"),
        (["--by", "owner"], "--by 'owner': allowed: team, project, namespace"),
    ],
)
def test_a_bad_argument_is_one_line_and_exit_2(
    prometheus_url: str, args: list[str], message: str
) -> None:
    code, output = _report(prometheus_url, *args)
    assert code == 2
    (line,) = output.splitlines()
    assert line.startswith(f"error: {message}")


def test_a_prometheus_that_does_not_answer_is_exit_3() -> None:
    code, output = _report(f"http://127.0.0.1:{servers.free_port()}")
    assert code == 3
    (line,) = output.splitlines()
    assert "does not answer" in line


@pytest.mark.parametrize(
    ("text", "span"),
    [
        ("15d", timedelta(days=15)),
        ("1y2w", timedelta(days=379)),
        ("36h30m", timedelta(hours=36, minutes=30)),
        ("500ms", timedelta(milliseconds=500)),
        ("10GiB", None),
        ("", None),
    ],
)
def test_retention_reads_as_prometheus_writes_it(text: str, span: timedelta | None) -> None:
    assert prometheus_duration(text) == span

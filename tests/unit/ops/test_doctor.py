"""``gpuinfra doctor`` against a real Prometheus and Alertmanager on loopback.

Prometheus scrapes a small exporter standing in for the DCGM exporter and Triton, and a port
where nothing listens (a failing scrape). Alertmanager holds alerts fired with amtool, one of
them silenced. The Kubernetes API is a loopback server answering with the recorded responses in
tests/fixtures/kubernetes/, read through the kubernetes client as on a cluster. An opt-in test
runs the same command on the cluster ``KUBECONFIG`` points at.
"""

from __future__ import annotations

import base64
import io
import json
import os
import re
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest

from tests import servers
from tests.conftest import ROOT, doctor_rows, left_running, run_cli, run_main

FIXTURES = ROOT / "tests" / "fixtures" / "kubernetes"
H200_REPORT = ROOT / "tests" / "fixtures" / "h200-node-check.json"
SITE = "inventory/example"

EXPORTER = b"""# TYPE DCGM_FI_DEV_GPU_UTIL gauge
DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-1",Hostname="gpu-node-01"} 40
# TYPE nv_inference_request_success counter
nv_inference_request_success{model="resnet50",version="1"} 120
nv_inference_request_success{model="tokenizer",version="2"} 3
"""


def _json(path: Path) -> tuple[str, bytes]:
    return "application/json", path.read_bytes()


@pytest.fixture(scope="module")
def kubeconfig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    pages = {
        "/api/v1/nodes": _json(FIXTURES / "nodes.json"),
        "/apis/apps/v1/namespaces/triton/deployments/triton": _json(
            FIXTURES / "triton-deployment.json"
        ),
    }
    with servers.static(pages) as url:
        yield _kubeconfig(tmp_path_factory.mktemp("kube") / "kubeconfig", url)


def _kubeconfig(
    path: Path, server: str, user: dict[str, Any] | None = None, *, verify: bool = True
) -> Path:
    """A kubeconfig at ``path`` whose one context reaches ``server`` as ``user`` (a token);
    without ``verify``, the cluster skips the server's certificate."""
    cluster: dict[str, Any] = {"server": server}
    if not verify:
        cluster["insecure-skip-tls-verify"] = True
    path.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": cluster}],
                "users": [{"name": "u", "user": user or {"token": "recorded"}}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "x",
            }
        ),
        "utf-8",
    )
    return path


def _wait_scraped(url: str, jobs: int) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        with urllib.request.urlopen(f"{url}/api/v1/targets", timeout=5) as response:
            targets = json.load(response)["data"]["activeTargets"]
        if len(targets) == jobs and all(t["health"] != "unknown" for t in targets):
            return
        time.sleep(0.3)
    raise AssertionError(f"Prometheus at {url} did not scrape every target within 30 s")


@pytest.fixture(scope="module")
def prometheus_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    work = tmp_path_factory.mktemp("doctor-prometheus")
    with (
        servers.static({"/metrics": ("text/plain; version=0.0.4", EXPORTER)}) as exporter,
        socket.socket() as held,
    ):
        target = exporter.removeprefix("http://")
        # Bound and never listening: a scrape there is refused, and no server takes the port.
        held.bind(("127.0.0.1", servers.free_port()))
        dead = f"127.0.0.1:{held.getsockname()[1]}"
        (work / "prometheus.yml").write_text(
            "global: {scrape_interval: 1s, scrape_timeout: 1s}\n"
            "scrape_configs:\n"
            f"  - {{job_name: nvidia-dcgm-exporter, static_configs: [{{targets: ['{target}']}}]}}\n"
            f"  - {{job_name: triton, static_configs: [{{targets: ['{target}']}}]}}\n"
            f"  - {{job_name: node-exporter, static_configs: [{{targets: ['{dead}']}}]}}\n",
            "utf-8",
        )
        with servers.prometheus(work / "prometheus.yml", work / "data", work) as url:
            _wait_scraped(url, 3)
            # One more scrape interval, so that the series are queryable.
            time.sleep(1.5)
            yield url


def _amtool(*args: str) -> None:
    result = subprocess.run(
        [servers.tool(servers.AMTOOL), *args], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.fixture(scope="module")
def alertmanager_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    work = tmp_path_factory.mktemp("doctor-alertmanager")
    (work / "alertmanager.yml").write_text(
        "route: {receiver: 'null'}\nreceivers: [{name: 'null'}]\n", "utf-8"
    )
    with servers.alertmanager(work / "alertmanager.yml", work) as url:
        am = f"--alertmanager.url={url}"
        _amtool("alert", "add", am, "alertname=GpuXidError", "severity=warning",
                "Hostname=gpu-node-02", "--annotation=summary=GPU 3 on gpu-node-02 reported XID 79")  # fmt: skip
        _amtool("alert", "add", am, "alertname=GpuIdle", "severity=info", "Hostname=gpu-node-01")
        _amtool("alert", "add", am, "alertname=Watchdog", "severity=none")
        _amtool("alert", "add", am, "alertname=GpuTemperatureHigh", "severity=critical",
                "Hostname=gpu-node-01")  # fmt: skip
        _amtool("silence", "add", am, "alertname=GpuTemperatureHigh", "--comment=fan swap",
                "--author=ops", "--duration=2h")  # fmt: skip
        yield url


@pytest.fixture
def node_reports(tmp_path: Path) -> Path:
    report = json.loads(H200_REPORT.read_text("utf-8"))
    broken = json.loads(H200_REPORT.read_text("utf-8"))
    for check in broken["checks"]:
        if check["name"] == "ecc_errors":
            check.update(status="fail", detail="2 volatile uncorrectable ECC errors on GPU 0")
    folder = tmp_path / "reports"
    folder.mkdir()
    (folder / "gpu-node-01.json").write_text(json.dumps({**report, "host": "gpu-node-01"}))
    (folder / "gpu-node-02.json").write_text(json.dumps({**broken, "host": "gpu-node-02"}))
    old = folder / "gpu-node-03.json"
    old.write_text(json.dumps({**report, "host": "gpu-node-03"}))
    two_days_ago = time.time() - 48 * 3600
    os.utime(old, (two_days_ago, two_days_ago))
    return folder


def _doctor(*args: str) -> tuple[int, dict[str, Any]]:
    result = run_cli("doctor", "--format", "json", *args)
    assert "Traceback" not in result.stderr, result.stderr
    return result.code, json.loads(result.stdout)


# What a check given only --kubeconfig shows when it cannot read the API: nothing from it.
KUBERNETES_UNREAD = [
    ("source", "kubernetes", "UNREAD"),
    ("scrape", "-", "skip"),
    ("alert", "-", "skip"),
]


def _by_subject(document: dict[str, Any], check: str) -> dict[str, tuple[str, str]]:
    return {
        i["subject"]: (i["status"], i["detail"]) for i in document["items"] if i["check"] == check
    }


def test_the_recorded_responses_are_valid_kubernetes_objects() -> None:
    nodes = json.loads((FIXTURES / "nodes.json").read_text("utf-8"))
    for node in nodes["items"]:
        kubernetes_validate.validate({"apiVersion": "v1", "kind": "Node", **node}, "1.34", True)
    deployment = json.loads((FIXTURES / "triton-deployment.json").read_text("utf-8"))
    kubernetes_validate.validate(deployment, "1.34", True)


def test_the_morning_check_finds_each_problem(
    kubeconfig: Path,
    prometheus_url: str,
    alertmanager_url: str,
    node_reports: Path,
) -> None:
    code, document = _doctor(
        "--site", SITE, "--kubeconfig", str(kubeconfig), "--prometheus", prometheus_url,
        "--alertmanager", alertmanager_url, "--node-checks", str(node_reports),
    )  # fmt: skip
    assert code == 1
    assert document["ok"] is False

    nodes = _by_subject(document, "gpu-node")
    assert nodes["gpu-node-01"][0] == "ok"
    assert nodes["gpu-node-02"] == (
        "fail",
        "allocatable nvidia.com/gpu 7, declared 8 (host gpu-node-02)",
    )
    assert "control-1" not in nodes

    assert _by_subject(document, "triton") == {"triton/triton": ("ok", "2 of 2 replicas ready")}
    # The example site declares resnet50 with the latest version; one is loaded.
    assert _by_subject(document, "triton-model") == {"resnet50": ("ok", "loaded version(s) 1")}

    (dcgm,) = _by_subject(document, "dcgm-exporter").values()
    assert dcgm == ("ok", "up")
    scrape = _by_subject(document, "scrape")
    ((subject, (status, detail)),) = scrape.items()
    assert subject.startswith("node-exporter 127.0.0.1:")
    assert status == "fail"
    assert "connection refused" in detail

    # The warning fires; info, the Watchdog and the silenced critical alert are not problems.
    assert _by_subject(document, "alert") == {
        "GpuXidError gpu-node-02": (
            "fail",
            _by_subject(document, "alert")["GpuXidError gpu-node-02"][1],
        )
    }
    assert "XID 79" in _by_subject(document, "alert")["GpuXidError gpu-node-02"][1]

    checks = _by_subject(document, "node-check")
    assert checks["gpu-node-01"][0] == "ok"
    assert checks["gpu-node-02"][0] == "fail"
    assert "ecc_errors" in checks["gpu-node-02"][1]
    assert checks["gpu-node-03"] == ("fail", "report is 48 h old")


def test_a_declared_model_version_that_is_not_loaded_fails(
    prometheus_url: str, tmp_path: Path
) -> None:
    from gpuinfra.addons.triton import TritonSettings
    from gpuinfra.ops import doctor
    from gpuinfra.ops.prometheus import Prometheus

    settings = TritonSettings.model_validate(
        {
            "enabled": True,
            "modelRepository": {"pvc": "models"},
            "models": [
                {"name": "tokenizer", "backend": "python",
                 "versionPolicy": {"policy": "specific", "versions": [2, 3]}},
                {"name": "llm", "backend": "python"},
            ],
        }
    )  # fmt: skip
    items = {i.subject: (i.status, i.detail) for i in doctor.model_items(
        Prometheus(prometheus_url), settings)}  # fmt: skip
    assert items == {
        "tokenizer": ("fail", "version(s) 3 not loaded (loaded: 2)"),
        "llm": ("fail", "no version loaded"),
    }


def test_all_ok_is_exit_0(node_reports: Path) -> None:
    (node_reports / "gpu-node-02.json").unlink()
    (node_reports / "gpu-node-03.json").unlink()
    code, document = _doctor("--node-checks", str(node_reports))
    assert code == 0
    assert document["ok"] is True
    assert {i["status"] for i in document["items"]} == {"ok", "skip"}


def test_a_host_converge_did_not_check_fails(tmp_path: Path) -> None:
    report = json.loads(H200_REPORT.read_text("utf-8"))
    converged = tmp_path / "converge.json"
    converged.write_text(
        json.dumps(
            {
                "status": "failed",
                "recap": {
                    "gpu-node-01": {"ok": 30, "changed": 0, "failures": 0, "dark": 0},
                    "gpu-node-02": {"ok": 2, "changed": 0, "failures": 0, "dark": 1},
                    "gpu-node-03": {"ok": 5, "changed": 1, "failures": 1, "dark": 0},
                },
                "failures": [],
                "reports": {"gpu-node-01": {**report, "host": "gpu-node-01"}},
            }
        )
    )
    code, document = _doctor("--node-checks", str(converged))
    assert code == 1
    assert _by_subject(document, "node-check") == {
        "gpu-node-01": ("ok", "all checks pass (0.0 h ago)"),
        "gpu-node-02": ("fail", "unreachable in converge, no node check report"),
        "gpu-node-03": ("fail", "failed in converge, no node check report"),
    }


def _utc(seconds_ago: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - seconds_ago))


def _stamped_reports(folder: Path, checked: dict[str, float]) -> Path:
    """``folder`` holding a node check report per host, each stamped as run ``checked[host]``
    seconds ago (ahead of now where negative); every file is written now."""
    report = json.loads(H200_REPORT.read_text("utf-8"))
    folder.mkdir()
    for host, seconds_ago in checked.items():
        stamped = {**report, "host": host, "checked_at": _utc(seconds_ago)}
        (folder / f"{host}.json").write_text(json.dumps(stamped))
    return folder


def test_a_report_is_as_old_as_its_check_not_its_file(tmp_path: Path) -> None:
    # Reports fetched this morning (a CI artifact, a plain scp): the files are new, and the
    # age comes from when each check ran.
    folder = _stamped_reports(
        tmp_path / "fetched",
        {"gpu-node-01": 48 * 3600, "gpu-node-02": 2 * 3600, "gpu-node-03": 3600},
    )
    # A file whose time is old (restored from a backup) with a check that ran an hour ago.
    kept = folder / "gpu-node-03.json"
    week_ago = time.time() - 7 * 24 * 3600
    os.utime(kept, (week_ago, week_ago))
    code, document = _doctor("--node-checks", str(folder))
    assert code == 1
    assert _by_subject(document, "node-check") == {
        "gpu-node-01": ("fail", "report is 48 h old"),
        "gpu-node-02": ("ok", "all checks pass (2.0 h ago)"),
        "gpu-node-03": ("ok", "all checks pass (1.0 h ago)"),
    }


def test_a_report_stamped_ahead_of_this_clock_names_the_clock(tmp_path: Path) -> None:
    # A host whose clock runs hours ahead stamps its reports in the future: they would read as
    # just taken until this machine's clock caught up.
    folder = _stamped_reports(tmp_path / "reports", {"gpu-node-01": -3 * 3600, "gpu-node-02": -60})
    code, document = _doctor("--node-checks", str(folder))
    assert code == 1
    status, detail = _by_subject(document, "node-check")["gpu-node-01"]
    assert status == "fail"
    assert re.fullmatch(
        r"report is stamped (2\.9|3\.0) h ahead of this machine's clock: the host's clock or this "
        r"one is wrong",
        detail,
    )
    # A minute ahead is ordinary skew: the report is just taken.
    assert _by_subject(document, "node-check")["gpu-node-02"] == (
        "ok",
        "all checks pass (0.0 h ago)",
    )


@pytest.mark.parametrize("stamp", ["yesterday", "2026-12-01T06:00:00", 1764568800, ""])
def test_a_check_time_that_is_not_one_is_one_line_and_exit_2(stamp: object, tmp_path: Path) -> None:
    report = json.loads(H200_REPORT.read_text("utf-8"))
    path = tmp_path / "converge.json"
    path.write_text(json.dumps({"reports": {"gpu-node-01": {**report, "checked_at": stamp}}}))
    result = run_cli("doctor", "--node-checks", str(path))
    assert (result.code, result.stdout) == (2, "")
    assert result.stderr.splitlines() == [
        f"error: --node-checks {path}: reports.gpu-node-01.checked_at: {stamp!r} is not a time "
        "(allowed: ISO 8601 with its zone, e.g. 2026-12-01T06:00:00Z)"
    ]


def test_a_converge_report_without_node_checks_fails(tmp_path: Path) -> None:
    converged = tmp_path / "converge.json"
    converged.write_text(json.dumps({"status": "successful", "recap": {}, "reports": {}}))
    code, document = _doctor("--node-checks", str(converged))
    assert code == 1
    assert _by_subject(document, "node-check") == {
        "-": ("fail", f"no node check report in {converged}")
    }


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ('{"checks": "all good"}', "checks"),
        ('{"checks": null}', "checks"),
        ('{"checks": [1]}', "checks"),
        ('{"checks": [{"status": "fail"}]}', "checks"),
        ('{"reports": {"gpu-node-01": 5}}', "reports.gpu-node-01.checks"),
        ('{"reports": {"gpu-node-01": {"checks": {}}}}', "reports.gpu-node-01.checks"),
    ],
)
def test_a_node_check_report_of_another_shape_is_one_line_and_exit_2(
    text: str, where: str, tmp_path: Path
) -> None:
    path = tmp_path / "report.json"
    path.write_text(text)
    result = run_cli("doctor", "--node-checks", str(path))
    assert (result.code, result.stdout) == (2, "")
    assert result.stderr.splitlines() == [
        f"error: --node-checks {path}: {where}: not a node check report's checks "
        "(allowed: a list of checks, each with a name and a status)"
    ]


def test_the_table_names_each_failed_item(kubeconfig: Path) -> None:
    result = run_cli("doctor", "--site", SITE, "--kubeconfig", str(kubeconfig))
    assert result.code == 1
    assert "gpu-node-02" in result.stdout
    assert "FAIL" in result.stdout
    assert "1 of 5 items failed" in result.stdout


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["--kubeconfig", "/nonexistent/kubeconfig"], 2, "--kubeconfig /nonexistent/kubeconfig: no such file"),
        (["--prometheus", "prometheus:9090"], 2, "--prometheus 'prometheus:9090': not an http(s) URL"),
        (["--alertmanager", "http://127.0.0.1:1"], 3, "Alertmanager at http://127.0.0.1:1/api/v2/alerts does not answer"),
        (["--site", "inventory/example"], 2, "nothing to check: give at least one of --kubeconfig"),
        ([], 2, "nothing to check: give at least one of --kubeconfig"),
    ],
)  # fmt: skip
def test_a_bad_source_is_one_line(args: list[str], code: int, message: str) -> None:
    result = run_cli("doctor", *args)
    assert result.code == code
    (line,) = result.stderr.splitlines()
    assert line.startswith(f"error: {message}")


@pytest.mark.skipif(not os.environ.get("KUBECONFIG"), reason="KUBECONFIG names no cluster")
def test_live_cluster() -> None:
    code, document = _doctor("--kubeconfig", os.environ["KUBECONFIG"])
    assert code in (0, 1)
    assert [i for i in document["items"] if i["check"] == "gpu-node"]


def test_each_serving_groups_deployment_is_checked() -> None:
    from gpuinfra.addons.triton import TritonSettings
    from gpuinfra.ops import doctor

    settings = TritonSettings.model_validate(
        {
            "enabled": True,
            "modelRepository": {"pvc": "models"},
            "gateway": {"name": "inference"},
            "models": [{"name": "a", "backend": "python"}, {"name": "b", "backend": "python"}],
            "servingGroups": [
                {"name": "one", "models": ["a"], "canary": {"weight": 5}},
                {"name": "two", "models": ["b"]},
            ],
        }
    )
    deployment = json.loads((FIXTURES / "triton-deployment.json").read_text("utf-8"))
    found = {"triton-one": deployment, "triton-one-canary": None, "triton-two": deployment}
    items = {i.subject: (i.status, i.detail) for i in doctor.triton_items(found, settings)}
    assert items == {
        "triton/triton-one": ("ok", "2 of 2 replicas ready"),
        "triton/triton-one-canary": ("fail", "Deployment not found"),
        "triton/triton-two": ("ok", "2 of 2 replicas ready"),
    }


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("garbage: [\n", "line 2, column 1: not valid YAML: expected the node content"),
        ("[1, 2]\n", "--kubeconfig {path}: not a kubeconfig (allowed: a mapping with clusters"),
        ("clusters: 5\n", "--kubeconfig {path}: not a usable kubeconfig: "),
        ("kind: Config\n", "--kubeconfig {path}: not a usable kubeconfig: Invalid kube-config"),
    ],
)
def test_a_kubeconfig_the_client_cannot_read_is_one_line_and_exit_2(
    text: str, message: str, tmp_path: Path
) -> None:
    path = tmp_path / "kubeconfig"
    path.write_text(text)
    result = run_cli("doctor", "--kubeconfig", str(path))
    assert result.code == 2, result.stderr
    (line,) = result.stderr.splitlines()
    assert line.startswith("error: ") and message.format(path=path) in line


@pytest.mark.parametrize(
    ("kind", "body"),
    [("text/html", b"<html>sign in</html>"), ("application/json", b'{"items": 5}')],
)
def test_a_server_that_is_not_the_kubernetes_api_is_one_line_and_exit_3(
    kind: str, body: bytes, tmp_path: Path
) -> None:
    with servers.static({"/api/v1/nodes": (kind, body)}) as url:
        path = _kubeconfig(tmp_path / "kubeconfig", url)
        result = run_cli("doctor", "--kubeconfig", str(path))
    assert result.code == 3
    assert doctor_rows(result.stdout) == KUBERNETES_UNREAD
    assert result.stderr.splitlines() == [
        f"error: Kubernetes API at {url}: the answer is not what the Kubernetes API returns"
    ]


@pytest.fixture
def silent_server(silent_port: int) -> str:
    return f"http://127.0.0.1:{silent_port}"


def test_a_server_that_cannot_be_read_leaves_the_other_sources_checked(
    kubeconfig: Path,
    node_reports: Path,
    silent_server: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from gpuinfra.ops import http

    monkeypatch.setattr(http, "TIMEOUT_S", 3.0)
    started = time.monotonic()
    code, out, err = run_main(
        capsys, "doctor", "--format", "json", "--site", SITE, "--kubeconfig", str(kubeconfig),
        "--prometheus", silent_server, "--alertmanager", silent_server,
        "--node-checks", str(node_reports),
    )  # fmt: skip
    # Read side by side: two servers that never answer cost one bound, not two.
    assert time.monotonic() - started < 5.5
    assert code == 3
    document = json.loads(out)
    assert document["ok"] is False
    assert _by_subject(document, "source") == {
        "prometheus": (
            "unread",
            f"Prometheus at {silent_server}/api/v1/targets does not answer: timed out",
        ),
        "alertmanager": (
            "unread",
            f"Alertmanager at {silent_server}/api/v2/alerts does not answer: timed out",
        ),
    }
    assert err.splitlines() == [
        f"error: Prometheus at {silent_server}/api/v1/targets does not answer: timed out",
        f"error: Alertmanager at {silent_server}/api/v2/alerts does not answer: timed out",
    ]
    # What could be read is judged as ever.
    assert _by_subject(document, "gpu-node")["gpu-node-02"][0] == "fail"
    assert _by_subject(document, "triton") == {"triton/triton": ("ok", "2 of 2 replicas ready")}
    assert _by_subject(document, "node-check")["gpu-node-02"][0] == "fail"


def test_a_long_wait_is_shown_at_a_terminal_and_erased_before_the_table(
    silent_server: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from rich.console import Console

    from gpuinfra.cli import console
    from gpuinfra.ops import http

    monkeypatch.setattr(http, "TIMEOUT_S", 2.0)
    monkeypatch.setattr(console, "WAIT_SHOWN_S", 0.5)
    line = f"error: Prometheus at {silent_server}/api/v1/targets does not answer: timed out"
    # Through a pipe: the table and the one line, nothing else.
    code, out, err = run_main(capsys, "doctor", "--prometheus", silent_server)
    assert (code, err.splitlines()) == (3, [line])
    terminal = io.StringIO()
    monkeypatch.setattr(console, "err", Console(file=terminal, force_terminal=True, width=200))
    code, out, _ = run_main(capsys, "doctor", "--prometheus", silent_server)
    assert code == 3
    assert ("source", "prometheus", "UNREAD") in doctor_rows(out)
    shown = terminal.getvalue()
    # Counting while it waits, then erased (the cursor back up, the line cleared) before the
    # command goes on to print the table.
    assert re.search(r"doctor: reading Prometheus … \d s", shown), shown
    assert shown.endswith("\x1b[1A\x1b[2K"), shown


def test_the_table_counts_sources_not_read_apart_from_failed_items(
    kubeconfig: Path, closed_port: int
) -> None:
    refused = f"http://127.0.0.1:{closed_port}"
    result = run_cli("doctor", "--site", SITE, "--kubeconfig", str(kubeconfig),
                     "--alertmanager", refused)  # fmt: skip
    assert result.code == 3
    assert ("source", "alertmanager", "UNREAD") in doctor_rows(result.stdout)
    assert result.stdout.splitlines()[-1] == "1 of 5 items failed, 1 source not read"
    assert result.stderr.splitlines() == [
        f"error: Alertmanager at {refused}/api/v2/alerts does not answer: "
        "[Errno 111] Connection refused"
    ]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--alertmanager", "alertmanager:9093"],
         "--alertmanager 'alertmanager:9093': not an http(s) URL (e.g. http://127.0.0.1:9090; "
         "ASCII, no query or fragment)"),
        (["--kubeconfig", "/nonexistent/kubeconfig"], "--kubeconfig /nonexistent/kubeconfig: no such file"),
        (["--node-checks", "/nonexistent/reports"],
         "--node-checks /nonexistent/reports: no such file or no *.json in the directory"),
    ],
    ids=["url", "kubeconfig", "node-checks"],
)  # fmt: skip
def test_a_mistake_is_found_before_any_server_is_asked(
    args: list[str], message: str, silent_server: str
) -> None:
    started = time.monotonic()
    result = run_cli("doctor", "--prometheus", silent_server, *args)
    # Prometheus never answers: the command would wait for it (15 s) before a late check.
    assert time.monotonic() - started < 10
    assert (result.code, result.stdout) == (2, "")
    assert result.stderr.splitlines() == [f"error: {message}"]


def test_a_kubeconfig_the_client_cannot_use_ends_the_check_without_waiting(
    silent_server: str, tmp_path: Path
) -> None:
    # A mapping, so the checks before any server is asked pass; the client finds no context.
    path = tmp_path / "kubeconfig"
    path.write_text("kind: Config\n")
    started = time.monotonic()
    result = run_cli("doctor", "--prometheus", silent_server, "--kubeconfig", str(path))
    # Prometheus never answers: the command would wait for it (15 s) before naming the mistake.
    assert time.monotonic() - started < 10
    assert (result.code, result.stdout) == (2, "")
    (line,) = result.stderr.splitlines()
    assert line.startswith(f"error: --kubeconfig {path}: not a usable kubeconfig: Invalid kube")


def test_a_kubernetes_api_that_never_answers_is_asked_once(
    silent_server: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from gpuinfra.ops import doctor

    monkeypatch.setattr(doctor, "TIMEOUT_S", 1.0)
    path = _kubeconfig(tmp_path / "kubeconfig", silent_server)
    started = time.monotonic()
    code, out, err = run_main(capsys, "doctor", "--kubeconfig", str(path))
    # The client on its own retries three times, each waiting for the whole read timeout.
    assert time.monotonic() - started < 3
    assert code == 3
    assert doctor_rows(out) == KUBERNETES_UNREAD
    assert err.splitlines() == [
        f"error: Kubernetes API at {silent_server} does not answer within 1 s"
    ]


def test_a_kubernetes_api_that_refuses_the_connection_is_one_short_line(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{servers.free_port()}"
    result = run_cli("doctor", "--kubeconfig", str(_kubeconfig(tmp_path / "kubeconfig", url)))
    assert result.code == 3
    assert doctor_rows(result.stdout) == KUBERNETES_UNREAD
    assert result.stderr.splitlines() == [
        f"error: Kubernetes API at {url} does not answer: [Errno 111] Connection refused"
    ]


def test_a_refused_request_shows_the_apis_own_message(tmp_path: Path) -> None:
    status = {"kind": "Status", "status": "Failure", "message": "Unauthorized", "code": 401}
    pages = {"/api/v1/nodes": ("application/json", json.dumps(status).encode())}
    with servers.static(pages, status=401) as url:
        path = _kubeconfig(tmp_path / "kubeconfig", url)
        before = path.read_bytes()
        result = run_cli("doctor", "--kubeconfig", str(path))
    assert result.code == 3
    assert doctor_rows(result.stdout) == KUBERNETES_UNREAD
    assert result.stderr.splitlines() == [f"error: Kubernetes API at {url}: HTTP 401: Unauthorized"]
    assert path.read_bytes() == before


_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n"


@pytest.mark.parametrize(
    ("part", "tls"), [("headers", False), ("body", False), ("headers", True), ("body", True)]
)
def test_a_kubernetes_answer_that_comes_a_byte_at_a_time_is_cut_at_the_bound(
    part: str,
    tls: bool,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from gpuinfra.ops import http

    monkeypatch.setattr(http, "ANSWER_S", 2.0)
    # Each byte within the read timeout. The answer ends after some 25 s: where only each read
    # is bounded, the test fails on the time instead of waiting for good.
    answer = _HEAD + b" " * 5 + (FIXTURES / "nodes.json").read_bytes()[:40]
    at_once = len(_HEAD) if part == "body" else 0
    certificate = servers.self_signed(tmp_path) if tls else None
    with servers.trickle(answer, at_once=at_once, every=0.5, certificate=certificate) as url:
        path = _kubeconfig(tmp_path / "kubeconfig", url, verify=not tls)
        started = time.monotonic()
        code, out, err = run_main(capsys, "doctor", "--kubeconfig", str(path))
        assert time.monotonic() - started < 10
    assert code == 3
    assert doctor_rows(out) == KUBERNETES_UNREAD
    assert err.splitlines() == [f"error: Kubernetes API at {url} does not answer within 2 s"]


def test_a_cluster_that_skips_tls_verification_adds_no_warning(tmp_path: Path) -> None:
    status = json.dumps({"kind": "Status", "message": "Unauthorized", "code": 401}).encode()
    answer = (
        b"HTTP/1.1 401 Unauthorized\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\n\r\n%s" % (len(status), status)
    )
    certificate = servers.self_signed(tmp_path)
    with servers.trickle(answer, at_once=len(answer), certificate=certificate) as url:
        path = _kubeconfig(tmp_path / "kubeconfig", url, verify=False)
        result = run_cli("doctor", "--kubeconfig", str(path))
    assert result.code == 3
    assert doctor_rows(result.stdout) == KUBERNETES_UNREAD
    # urllib3 warns of each unverified request in two lines: the user chose it in the file.
    assert result.stderr.splitlines() == [f"error: Kubernetes API at {url}: HTTP 401: Unauthorized"]


def test_a_kubernetes_answer_larger_than_the_bound_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from gpuinfra.ops import http

    monkeypatch.setattr(http, "MAX_ANSWER_BYTES", 1 << 20)
    nodes = (FIXTURES / "nodes.json").read_bytes()
    padded = nodes.rstrip()[:-1] + b', "padding": "' + b"x" * (2 << 20) + b'"}'
    with servers.static({"/api/v1/nodes": ("application/json", padded)}) as url:
        path = _kubeconfig(tmp_path / "kubeconfig", url)
        code, out, err = run_main(capsys, "doctor", "--kubeconfig", str(path))
    assert code == 3
    assert doctor_rows(out) == KUBERNETES_UNREAD
    assert err.splitlines() == [f"error: Kubernetes API at {url}: the answer is larger than 1 MiB"]


def test_a_directory_given_as_kubeconfig_is_named_as_one(tmp_path: Path) -> None:
    result = run_cli("doctor", "--kubeconfig", str(tmp_path))
    assert (result.code, result.stdout) == (2, "")
    assert result.stderr.splitlines() == [
        f"error: --kubeconfig {tmp_path}: a directory (allowed: a kubeconfig file)"
    ]


def _exec_kubeconfig(path: Path, server: str, plugin: Path) -> Path:
    """A kubeconfig whose user's credential comes from the exec plugin ``plugin``."""
    exec_plugin = {"apiVersion": "client.authentication.k8s.io/v1beta1", "command": str(plugin)}
    return _kubeconfig(path, server, {"exec": exec_plugin})


def _plugin(path: Path, body: str) -> Path:
    path.write_text(f"#!/bin/sh\n{body}\n", "utf-8")
    path.chmod(0o755)
    return path


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (None, "No such file or directory"),
        ("echo 'token expired, run aws sso login' >&2; exit 1", "token expired, run aws sso login"),
        ("echo 'not json'", "exec: failed to decode process output"),
        (
            "echo '"
            + json.dumps(
                {
                    "apiVersion": "client.authentication.k8s.io/v1beta1",
                    "kind": "ExecCredential",
                    "status": {},
                }
            )
            + "'",
            "exec: missing token or clientCertificateData field in plugin output",
        ),
    ],
    ids=["missing", "fails", "not-json", "no-credential"],
)
def test_an_exec_plugin_that_gives_no_credential_is_one_line_and_exit_3(
    body: str | None, reason: str, tmp_path: Path
) -> None:
    plugin = tmp_path / "get-token"
    if body is not None:
        _plugin(plugin, body)
    with servers.static({"/api/v1/nodes": _json(FIXTURES / "nodes.json")}) as url:
        path = _exec_kubeconfig(tmp_path / "kubeconfig", url, plugin)
        result = run_cli("doctor", "--kubeconfig", str(path))
    assert result.code == 3
    assert doctor_rows(result.stdout) == KUBERNETES_UNREAD
    (line,) = result.stderr.splitlines()
    assert line.startswith(f"error: --kubeconfig {path}: the user's exec plugin failed: ")
    assert reason in line


def test_an_exec_plugin_that_never_answers_is_ended_with_what_it_started(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from gpuinfra.ops import doctor

    monkeypatch.setattr(doctor, "EXEC_PLUGIN_TIMEOUT_S", 1.0)
    pids = tmp_path / "pids"
    # A plugin waiting on a network that does not answer, with a helper of its own holding the
    # pipe the client reads.
    plugin = _plugin(tmp_path / "get-token", f"sleep 300 & echo $$ $! > {pids}; wait")
    with servers.static({"/api/v1/nodes": _json(FIXTURES / "nodes.json")}) as url:
        path = _exec_kubeconfig(tmp_path / "kubeconfig", url, plugin)
        started = time.monotonic()
        code, out, err = run_main(capsys, "doctor", "--kubeconfig", str(path))
    assert time.monotonic() - started < 10
    assert code == 3
    assert doctor_rows(out) == KUBERNETES_UNREAD
    assert err.splitlines() == [
        f"error: --kubeconfig {path}: the user's exec plugin failed: exec: no credential within 1 s"
    ]
    assert left_running(pids) == []


def _oidc_kubeconfig(path: Path, server: str, issuer: str) -> Path:
    """A kubeconfig whose user's OIDC id-token has expired: the client refreshes it from
    ``issuer`` before the first request."""

    def part(claims: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(claims).encode()).decode().rstrip("=")

    expired = f"{part({'alg': 'RS256'})}.{part({'iss': issuer, 'exp': 1})}.signature"
    oidc = {
        "auth-provider": {
            "name": "oidc",
            "config": {
                "client-id": "gpuinfra",
                "client-secret": "not-a-secret",
                "id-token": expired,
                "idp-issuer-url": issuer,
                "refresh-token": "refresh",
            },
        }
    }
    return _kubeconfig(path, server, oidc)


def test_an_oidc_issuer_that_never_answers_ends_the_check_by_its_bound(
    silent_server: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from gpuinfra.ops import doctor

    monkeypatch.setattr(doctor, "CREDENTIALS_TIMEOUT_S", 1.0)
    with servers.static({"/api/v1/nodes": _json(FIXTURES / "nodes.json")}) as url:
        path = _oidc_kubeconfig(tmp_path / "kubeconfig", url, silent_server)
        started = time.monotonic()
        code, out, err = run_main(capsys, "doctor", "--kubeconfig", str(path))
    assert time.monotonic() - started < 10
    assert code == 3
    assert doctor_rows(out) == KUBERNETES_UNREAD
    assert err.splitlines() == [
        f"error: --kubeconfig {path}: the user's credentials did not load within 1 s (an OIDC "
        "issuer or an exec plugin that does not answer)"
    ]


def test_a_token_from_an_exec_plugin_reaches_the_api(tmp_path: Path) -> None:
    status = {
        "apiVersion": "client.authentication.k8s.io/v1beta1",
        "kind": "ExecCredential",
        "status": {"token": "from-plugin"},
    }
    plugin = _plugin(tmp_path / "get-token", f"echo '{json.dumps(status)}'")
    pages = {"/api/v1/nodes": _json(FIXTURES / "nodes.json")}
    with servers.static(pages, bearer="from-plugin") as url:
        path = _exec_kubeconfig(tmp_path / "kubeconfig", url, plugin)
        result = run_cli("doctor", "--format", "json", "--kubeconfig", str(path))
    assert result.stderr == ""
    checks = {item["check"] for item in json.loads(result.stdout)["items"]}
    assert "gpu-node" in checks

"""`gpuinfra triton tune` end to end: a real Triton, perf_analyzer, a stand-in of known cost.

The stand-in costs 10 ms per batch plus 0.5 ms per item: without dynamic batching one instance
serves about 95 requests a second whatever the concurrency; batching and a second instance
multiply that. The sweep is cut to the settings that tell the two apart, to keep it short.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from gpuinfra.errors import UsageError
from gpuinfra.lab import triton as local
from tests.conftest import ROOT

STACK_TAIL = """\
    triton:
      enabled: true
      modelRepository: {s3: "s3://models/repo"}
      gpuType: l4
      cpu: "2"
      memory: 8Gi
      models:
        # The classifier the tuning is about.
        - name: bert
          backend: onnxruntime
          instanceGroup: {kind: gpu}
        - {name: tokenizer, backend: python, instanceGroup: {kind: cpu}}
"""


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    try:
        local.installation()
    except UsageError as missing:
        if os.environ.get("GPUINFRA_REQUIRE_TRITON") == "1":
            pytest.fail(str(missing))
        pytest.skip(str(missing))
    for name in ("versions.yaml", "Pulumi.yaml"):
        shutil.copy(ROOT / name, tmp_path / name)
    (tmp_path / "policies").mkdir()
    shutil.copy(ROOT / "policies" / "limits.yaml", tmp_path / "policies" / "limits.yaml")
    (tmp_path / "stacks").mkdir()
    stack = (ROOT / "stacks" / "Pulumi.dev.yaml").read_text()
    (tmp_path / "stacks" / "Pulumi.dev.yaml").write_text(stack + STACK_TAIL)
    return tmp_path


def _tune(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "GPUINFRA_ROOT": str(repo),
        local.VENV_ENV: str(ROOT / local.VENV),
        "COLUMNS": "200",
    }
    return subprocess.run(
        [sys.executable, "-m", "gpuinfra", "triton", "tune", "--stack", "dev", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=repo,
        timeout=600,
        check=False,
    )


def test_tune_writes_a_config_that_meets_the_sla_with_twice_the_throughput(repo: Path) -> None:
    before = (repo / "stacks" / "Pulumi.dev.yaml").read_text()
    done = _tune(
        repo,
        "--model=bert",
        "--p99-ms=120",
        "--concurrency=1,16",
        "--max-batch-size=16",
        "--queue-delay-us=1000",
        "--instances=1,2",
    )
    assert done.returncode == 0, done.stdout + done.stderr

    record = json.loads((repo / "stacks" / "tuning" / "dev-bert.json").read_text())
    assert record["triton_version"] == "2.51.0"
    assert record["machine"]["cpus"] == os.cpu_count()
    rows = {row["label"]: row for row in record["rows"]}
    chosen = rows[record["chosen"]]
    untuned = next(row for row in record["rows"] if row["untuned"])
    assert all(p["p99_ms"] <= 120 for p in chosen["points"])
    assert chosen["points"][-1]["concurrency"] == 16
    assert chosen["points"][-1]["throughput"] >= 2 * untuned["points"][-1]["throughput"]
    # The table a person reads: every configuration, the untuned one marked.
    assert "(untuned)" in done.stdout and "chosen" in done.stdout

    after = (repo / "stacks" / "Pulumi.dev.yaml").read_text()
    assert "# The classifier the tuning is about." in after
    assert after.splitlines()[: len(before.splitlines()) - 5] == before.splitlines()[:-5]
    models = yaml.safe_load(after)["config"]["gpuinfra:addons"]["triton"]["models"]
    bert, tokenizer = models
    assert tokenizer == {"name": "tokenizer", "backend": "python", "instanceGroup": {"kind": "cpu"}}
    assert bert["maxBatchSize"] == chosen["max_batch_size"] == 16
    assert bert["dynamicBatching"]["maxQueueDelayMicroseconds"] == 1000
    assert bert["instanceGroup"] == {"kind": "gpu", "count": chosen["instances"]}
    assert bert["dynamicBatching"].get("preferredBatchSize", []) == chosen["preferred_batch_size"]
    # The diff was shown before it was written.
    assert "+          maxBatchSize: 16" in done.stdout


def test_an_unknown_model_is_one_line_and_changes_nothing(repo: Path) -> None:
    before = (repo / "stacks" / "Pulumi.dev.yaml").read_text()
    done = _tune(repo, "--model=bart", "--p99-ms=100")
    assert done.returncode == 2
    assert done.stderr.strip() == (
        "error: stacks/Pulumi.dev.yaml: no model 'bart' (models: bert, tokenizer)"
    )
    assert (repo / "stacks" / "Pulumi.dev.yaml").read_text() == before


def test_a_stack_config_check_refuses_is_refused_before_measuring(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """No Triton needed: the stack's Triton asks for more memory than an l4 node allocates,
    which ``config check`` refuses; tune says so before it starts a server, and writes nothing."""
    from gpuinfra import cli
    from gpuinfra.lab import tune as tune_mod

    for name in ("versions.yaml", "Pulumi.yaml"):
        shutil.copy(ROOT / name, tmp_path / name)
    shutil.copytree(ROOT / "policies", tmp_path / "policies")
    (tmp_path / "stacks").mkdir()
    stack = tmp_path / "stacks" / "Pulumi.dev.yaml"
    text = (ROOT / "stacks" / "Pulumi.dev.yaml").read_text() + STACK_TAIL.replace(
        "memory: 8Gi", "memory: 16Gi"
    )
    stack.write_text(text)
    monkeypatch.setenv("GPUINFRA_ROOT", str(tmp_path))
    monkeypatch.chdir(tmp_path)

    def measured(*args: object, **kwargs: object) -> None:
        raise AssertionError("tune measured a stack config check refuses")

    monkeypatch.setattr(tune_mod, "tune", measured)
    with pytest.raises(SystemExit) as done:
        cli.main(["triton", "tune", "--stack", "dev", "--model", "bert", "--p99-ms", "100"])
    assert done.value.code == 2
    captured = capsys.readouterr()
    (line,) = captured.err.strip().splitlines()
    assert line.startswith("error: stacks/Pulumi.dev.yaml: Deployment triton/triton ")
    assert "memory 16.0Gi requested, 14.5Gi allocatable" in line
    assert stack.read_text() == text
    assert not (tmp_path / "stacks" / "tuning").exists()

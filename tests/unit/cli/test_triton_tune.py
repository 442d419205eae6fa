"""`gpuinfra triton tune` end to end: a real Triton, perf_analyzer, a stand-in of known cost.

The stand-in costs 10 ms per batch plus 0.5 ms per item: without dynamic batching one instance
serves about 95 requests a second whatever the concurrency; batching and a second instance
multiply that. The sweep is cut to the settings that tell the two apart, to keep it short.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuinfra.errors import ToolError, UsageError, excerpt
from gpuinfra.lab import triton as local
from tests.conftest import ROOT, run_main

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
    except ToolError as missing:
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
    stack = _unmeasured_stack(
        tmp_path, monkeypatch, STACK_TAIL.replace("memory: 8Gi", "memory: 16Gi")
    )
    text = stack.read_text()
    code, _, err = run_main(
        capsys, "triton", "tune", "--stack", "dev", "--model", "bert", "--p99-ms", "100"
    )
    assert code == 2
    (line,) = err.strip().splitlines()
    assert line.startswith("error: stacks/Pulumi.dev.yaml: Deployment triton/triton ")
    assert "memory 16.0Gi requested, 14.5Gi allocatable" in line
    assert stack.read_text() == text
    assert not (tmp_path / "stacks" / "tuning").exists()


def _stack(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tail: str) -> Path:
    """The dev stack with ``tail`` under its add-ons, in a repository tune runs on."""
    for name in ("versions.yaml", "Pulumi.yaml"):
        shutil.copy(ROOT / name, tmp_path / name)
    shutil.copytree(ROOT / "policies", tmp_path / "policies")
    (tmp_path / "stacks").mkdir()
    stack = tmp_path / "stacks" / "Pulumi.dev.yaml"
    stack.write_text((ROOT / "stacks" / "Pulumi.dev.yaml").read_text() + tail)
    monkeypatch.setenv("GPUINFRA_ROOT", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    return stack


def _unmeasured_stack(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tail: str) -> Path:
    """``_stack``, where measuring fails the test."""
    from gpuinfra.lab import tune as tune_mod

    stack = _stack(tmp_path, monkeypatch, tail)

    def measured(*args: object, **kwargs: object) -> None:
        raise AssertionError("tune measured where it should have refused")

    monkeypatch.setattr(tune_mod, "tune", measured)
    return stack


SHARED_BATCHING = """\
    triton:
      enabled: true
      modelRepository: {s3: "s3://models/repo"}
      gpuType: l4
      cpu: "2"
      memory: 8Gi
      models:
        - name: bert
          backend: onnxruntime
          maxBatchSize: 8
          dynamicBatching: &batching {maxQueueDelayMicroseconds: 200}
        - name: resnet50
          backend: onnxruntime
          maxBatchSize: 8
          dynamicBatching: *batching
"""


def test_settings_shared_through_an_anchor_are_refused_before_measuring(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """No Triton needed: bert's batching is resnet50's too, which tuning bert would change."""
    stack = _unmeasured_stack(tmp_path, monkeypatch, SHARED_BATCHING)
    text = stack.read_text()
    assert run_main(capsys, "config", "check", "--stack", "dev")[0] == 0
    code, out, err = run_main(
        capsys,
        "triton",
        "tune",
        "--stack",
        "dev",
        "--model",
        "bert",
        "--p99-ms",
        "100",
        "--dry-run",
    )
    assert (code, out) == (2, "")
    assert err == (
        "error: stacks/Pulumi.dev.yaml: config.gpuinfra:addons.triton.models[0].dynamicBatching "
        "is shared through a YAML anchor (alias or << merge key), so the edit would change every "
        "place using it; write it out in full there first\n"
    )
    assert stack.read_text() == text


P99 = "a number of milliseconds above 0, e.g. 200 or 12.5"
LEAST = "a number of inferences/s of 0 or more, e.g. 250"
COST = "two numbers of microseconds from 0 to 1000000, per batch and per item, e.g. 10000,500"


@pytest.mark.parametrize(
    ("option", "value", "line"),
    [
        *(
            ("--p99-ms", value, f"--p99-ms {value!r}: {what} (allowed: {P99})")
            for value, what in (
                ("nan", "not a number"),
                ("inf", "not a number"),
                ("abc", "not a number"),
                ("1e309", "out of range"),
                ("0", "out of range"),
                ("-1", "out of range"),
            )
        ),
        *(
            ("--min-throughput", value, f"--min-throughput {value!r}: {what} (allowed: {LEAST})")
            for value, what in (("-1", "out of range"), ("nan", "not a number"), ("inf", "not a number"))
        ),
        *(
            (option, value, f"{option} {excerpt(repr(value), 60)}: {what} (allowed: whole numbers from 1 to {most}, comma-separated, e.g. {example})")
            for option, most, example in (
                ("--max-batch-size", 2147483647, "8,32"),
                ("--instances", 2147483647, "1,2"),
                ("--queue-delay-us", 18446744073709551615, "200,1000"),
            )
            for value, what in (
                ("1e30", "not a list of whole numbers"),
                ("\u0661,\u0662", "not a list of whole numbers"),
                ("8,x", "not a list of whole numbers"),
                ("0,8", "out of range"),
                ("-1", "out of range"),
                (str(most + 1), "out of range"),
                ("9" * 5000, "out of range"),
            )
        ),
        ("--concurrency", "1,1e3", "--concurrency '1,1e3': not a list of whole numbers (allowed: whole numbers from 1 to 2147483647, comma-separated, e.g. 1,8,16)"),
        *(
            ("--stand-in-cost-us", value, f"--stand-in-cost-us {value!r}: {what} (allowed: {COST})")
            for value, what in (
                ("abc", "not a cost per batch and per item"),
                ("10000", "not a cost per batch and per item"),
                ("1,2,3", "not a cost per batch and per item"),
                ("nan,500", "not a cost per batch and per item"),
                ("-1,500", "out of range"),
                ("10000,1000001", "out of range"),
            )
        ),
    ],
)  # fmt: skip
def test_a_bad_option_is_one_line_before_anything_is_read_or_run(
    option: str,
    value: str,
    line: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """No Triton and no file: each option is checked before the site is read, a server started
    or anything measured; the values it sweeps are those the model config's fields hold."""
    from gpuinfra.cli import triton as command
    from gpuinfra.lab import tune as tune_mod

    def ran(*args: object, **kwargs: object) -> None:
        raise AssertionError("tune went past its options")

    monkeypatch.setattr(command, "_source", ran)
    monkeypatch.setattr(tune_mod, "tune", ran)
    monkeypatch.setattr(local, "installation", ran)
    code, out, err = run_main(
        capsys,
        *("triton", "tune", "--site", "inventory/example", "--model", "resnet50"),
        *(("--p99-ms", "200") if option != "--p99-ms" else ()),
        f"{option}={value}",
    )
    assert (code, out) == (2, "")
    assert err == f"error: {line}\n"


def test_good_options_reach_the_site(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The largest values the fields hold, and decimals where a number may have them, pass the
    checks: the command goes on to read the site."""
    from gpuinfra.cli import triton as command

    def reached(*args: object, **kwargs: object) -> None:
        raise UsageError("reached the site")

    monkeypatch.setattr(command, "_source", reached)
    code, _, err = run_main(
        capsys,
        *("triton", "tune", "--site", "inventory/example", "--model", "resnet50"),
        *("--p99-ms", "12.5", "--min-throughput", "0", "--concurrency", "1, 8,16"),
        *("--max-batch-size", "1,2147483647", "--instances", "2147483647"),
        *("--queue-delay-us", "18446744073709551615", "--stand-in-cost-us", "0,1000000"),
    )
    assert (code, err) == (2, "error: reached the site\n")


@pytest.fixture
def silent() -> Iterator[str]:
    """A loopback port that accepts connections (the kernel's backlog) and never answers."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(8)
        yield f"127.0.0.1:{sock.getsockname()[1]}"


@pytest.mark.parametrize("down", ["closed", "silent"])
def test_a_server_that_does_not_answer_is_one_line_in_bounded_time(
    down: str,
    repo: Path,
    closed_port: int,
    silent: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A --url that refuses connections, or accepts them and never answers, is the environment
    (exit 3) within the bound, before anything is measured or written."""
    from gpuinfra.lab import tune as tune_mod

    url = f"127.0.0.1:{closed_port}" if down == "closed" else silent
    before = (repo / "stacks" / "Pulumi.dev.yaml").read_text()
    monkeypatch.setenv("GPUINFRA_ROOT", str(repo))
    monkeypatch.setenv(local.VENV_ENV, str(ROOT / local.VENV))
    monkeypatch.chdir(repo)
    monkeypatch.setattr(tune_mod, "ANSWER_TIMEOUT", 1.0)
    started = time.monotonic()
    code, out, err = run_main(
        capsys, *("triton", "tune", "--stack", "dev", "--model", "bert", "--p99-ms", "100"),
        *("--url", url),
    )  # fmt: skip
    assert time.monotonic() - started < 8
    assert (code, out) == (3, ""), err
    (line,) = err.splitlines()
    status = "UNAVAILABLE" if down == "closed" else "DEADLINE_EXCEEDED"
    assert line.startswith(f"error: Triton at {url} does not answer: StatusCode.{status}: ")
    assert (repo / "stacks" / "Pulumi.dev.yaml").read_text() == before
    assert not (repo / "stacks" / "tuning").exists()


@pytest.mark.parametrize("url", ["http://127.0.0.1:8001", "127.0.0.1", "host:0", ""])
def test_a_url_that_is_not_host_port_is_the_argument(
    url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from gpuinfra.cli import triton as command

    def ran(*args: object, **kwargs: object) -> None:
        raise AssertionError("tune went past its options")

    monkeypatch.setattr(command, "_source", ran)
    code, out, err = run_main(
        capsys,
        *("triton", "tune", "--site", "inventory/example", "--model", "resnet50"),
        *("--p99-ms", "200", "--url", url),
    )
    assert (code, out) == (2, "")
    assert err.startswith(f"error: --url {url!r}: not a gRPC address (allowed: HOST:PORT")


def test_models_in_the_inventory_files_all_vars_are_edited_there(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """No Triton needed: the measurement is given. A site's models may stand in hosts.yml's
    ``all: vars``; the chosen settings are shown as a change there."""
    from gpuinfra.lab import tune as tune_mod

    site = tmp_path / "site"
    shutil.copytree(ROOT / "inventory" / "example", site)
    variables = site / "group_vars" / "all" / "triton.yml"
    text = variables.read_text()
    models = text[text.index("triton_models:") :]
    variables.write_text(text[: text.index("triton_models:")])
    hosts = site / "hosts.yml"
    hosts.write_text(
        hosts.read_text()
        + "all:\n  vars:\n"
        + "".join(f"    {line}\n" for line in models.splitlines())
    )
    before = hosts.read_text()

    def measured(
        found: object, sla: tune_mod.Sla, levels: list[int], **kwargs: object
    ) -> tune_mod.Result:
        untuned = tune_mod.Row(
            tune_mod.Candidate(32, (8, 16), 200, 2, untuned=True), [tune_mod.Point(8, 100, 50)]
        )
        best = tune_mod.Row(tune_mod.Candidate(16, (), 1000, 2), [tune_mod.Point(8, 300, 60)])
        chosen = tune_mod.choose([untuned, best], sla)
        return tune_mod.Result("resnet50", sla, levels, [untuned, best], chosen, "2.51.0", {}, 1.0)

    monkeypatch.setattr(tune_mod, "tune", measured)
    code, out, err = run_main(
        capsys, *("triton", "tune", "--site", str(site), "--model", "resnet50", "--p99-ms", "200"),
        *("--concurrency", "8", "--dry-run"),
    )  # fmt: skip
    assert code == 0, err
    assert "+        max_batch_size: 16" in out
    assert "dry run: nothing written" in out
    assert hosts.read_text() == before


@pytest.mark.parametrize("blocking", ["tuning", "tuning/site-resnet50.json/"])
def test_a_measurement_file_that_cannot_be_written_is_refused_before_measuring(
    blocking: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A file where the tuning folder goes, or a folder where the measurement goes: one line,
    exit 2, before anything is measured, and the site's settings are left as they were."""
    from gpuinfra.lab import tune as tune_mod

    site = tmp_path / "site"
    shutil.copytree(ROOT / "inventory" / "example", site)
    if blocking.endswith("/"):
        (site / blocking).mkdir(parents=True)
    else:
        (site / blocking).write_text("notes\n")
    variables = site / "group_vars" / "all" / "triton.yml"
    before = variables.read_text()

    def measured(*args: object, **kwargs: object) -> None:
        raise AssertionError("tune measured with nowhere to record it")

    monkeypatch.setattr(tune_mod, "tune", measured)
    code, out, err = run_main(
        capsys, *("triton", "tune", "--site", str(site), "--model", "resnet50", "--p99-ms", "200"),
    )  # fmt: skip
    assert (code, out) == (2, "")
    (line,) = err.splitlines()
    record = site / "tuning" / "site-resnet50.json"
    if blocking.endswith("/"):
        assert (
            line == f"error: {record}: a directory where the measurement is written (move it away)"
        )
    else:
        assert line == (
            f"error: {site / 'tuning'}: not a directory, and the measurement is written into it "
            f"as {record} (move it away)"
        )
    assert variables.read_text() == before


@pytest.fixture
def stops_answering() -> Iterator[str]:
    """A gRPC server on 127.0.0.1 speaking Triton's protocol that says which Triton it is and
    then stops answering: a load never gets its reply (within the test)."""
    import threading
    from concurrent import futures

    import grpc
    from tritonclient.grpc import service_pb2, service_pb2_grpc

    released = threading.Event()

    class Stalled(service_pb2_grpc.GRPCInferenceServiceServicer):  # type: ignore[misc]
        def ServerMetadata(self, request: object, context: object) -> object:
            return service_pb2.ServerMetadataResponse(name="triton", version="2.51.0")

        def RepositoryModelLoad(self, request: object, context: object) -> object:
            released.wait(20)
            return service_pb2.RepositoryModelLoadResponse()

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    service_pb2_grpc.add_GRPCInferenceServiceServicer_to_server(Stalled(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield f"127.0.0.1:{port}"
    finally:
        released.set()
        server.stop(grace=None)


def test_a_server_that_stops_answering_while_loading_is_one_line_in_bounded_time(
    repo: Path,
    stops_answering: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The server answered its metadata, then never answers the load: exit 3 within the load's
    bound, nothing measured or written."""
    from gpuinfra.lab import tune as tune_mod

    before = (repo / "stacks" / "Pulumi.dev.yaml").read_text()
    monkeypatch.setenv("GPUINFRA_ROOT", str(repo))
    monkeypatch.setenv(local.VENV_ENV, str(ROOT / local.VENV))
    monkeypatch.chdir(repo)
    monkeypatch.setattr(tune_mod, "LOAD_TIMEOUT", 1.0)
    started = time.monotonic()
    code, _, err = run_main(
        capsys, *("triton", "tune", "--stack", "dev", "--model", "bert", "--p99-ms", "100"),
        *("--url", stops_answering),
    )  # fmt: skip
    assert time.monotonic() - started < 8
    assert code == 3, err
    (line,) = err.splitlines()
    assert line == (
        f"error: Triton at {stops_answering} does not answer: StatusCode.DEADLINE_EXCEEDED: "
        "Deadline Exceeded (loading bert, at most 1 s)"
    )
    assert (repo / "stacks" / "Pulumi.dev.yaml").read_text() == before
    assert not (repo / "stacks" / "tuning").exists()


def test_a_measurement_past_its_limit_is_one_line_in_bounded_time(
    repo: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """perf_analyzer on the local Triton, whose stand-in takes 1 s a batch, cannot finish a
    measurement within a limit of 1 s: it is stopped, and the command says so in one line
    (exit 3, the server does not answer in time) instead of a traceback."""
    from gpuinfra.lab import tune as tune_mod

    before = (repo / "stacks" / "Pulumi.dev.yaml").read_text()
    monkeypatch.setenv("GPUINFRA_ROOT", str(repo))
    monkeypatch.setenv(local.VENV_ENV, str(ROOT / local.VENV))
    monkeypatch.chdir(repo)
    monkeypatch.setattr(tune_mod, "MEASURE_TIMEOUT", 1.0)
    code, _, err = run_main(
        capsys, *("triton", "tune", "--stack", "dev", "--model", "bert", "--p99-ms", "100"),
        *("--concurrency", "1", "--stand-in-cost-us", "1000000,0"),
    )  # fmt: skip
    assert code == 3, err
    (line,) = err.splitlines()
    assert line.startswith("error: perf_analyzer did not finish measuring bert at concurrency 1 ")
    assert line.endswith(" within 1 s: the server does not answer its requests in time")
    assert (repo / "stacks" / "Pulumi.dev.yaml").read_text() == before
    assert not (repo / "stacks" / "tuning").exists()


def test_a_level_or_value_given_twice_is_measured_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """No Triton needed: the server is replaced by one that records what is measured. A
    concurrency level given twice is measured once and is one column, as a max_batch_size
    given twice is one configuration."""
    from contextlib import contextmanager

    from gpuinfra.lab import tune as tune_mod

    site = tmp_path / "site"
    shutil.copytree(ROOT / "inventory" / "example", site)
    measured: list[tuple[int, list[int]]] = []

    def measure(configured: Any, levels: list[int]) -> list[tune_mod.Point]:
        measured.append((configured.max_batch_size, levels))
        # Larger batches serve more: a tuned configuration is chosen.
        return [tune_mod.Point(c, 10.0 * c * configured.max_batch_size, 5.0) for c in levels]

    @contextmanager
    def session(model: object, **kwargs: object) -> Iterator[tune_mod.Session]:
        yield tune_mod.Session(measure, "2.51.0")

    monkeypatch.setattr(tune_mod, "session", session)
    code, out, err = run_main(
        capsys, *("triton", "tune", "--site", str(site), "--model", "resnet50", "--p99-ms", "200"),
        *("--concurrency", "8,1,8", "--max-batch-size", "16,16", "--queue-delay-us", "200"),
        *("--instances", "1", "--dry-run"),
    )  # fmt: skip
    assert code == 0, err
    assert all(levels == [1, 8] for _, levels in measured)
    # The model as configured, then batch 16 without and with preferred sizes: once each.
    assert [size for size, _ in measured].count(16) == 2
    header = next(line for line in out.splitlines() if "infer/s" in line)
    assert header.count("c=8 infer/s") == header.count("c=1 infer/s") == 1
    assert "2 concurrency levels" in out


@pytest.mark.parametrize(
    ("untuned_p99", "best_p99", "code", "says"),
    [
        (50, 60, 0, "already the best: nothing to change"),
        (900, 950, 1, "no configuration of resnet50 meets P99 <= 200 ms"),
    ],
)
def test_a_dry_run_writes_no_measurement_whatever_it_finds(
    untuned_p99: float,
    best_p99: float,
    code: int,
    says: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """No Triton needed: the measurement is given. Untuned settings that are already the best,
    or no configuration that meets the SLA: --dry-run still writes nothing."""
    from gpuinfra.lab import tune as tune_mod

    site = tmp_path / "site"
    shutil.copytree(ROOT / "inventory" / "example", site)

    def measured(
        found: object, sla: tune_mod.Sla, levels: list[int], **kwargs: object
    ) -> tune_mod.Result:
        untuned = tune_mod.Row(
            tune_mod.Candidate(32, (8, 16), 200, 2, untuned=True),
            [tune_mod.Point(8, 300, untuned_p99)],
        )
        other = tune_mod.Row(
            tune_mod.Candidate(16, (), 1000, 2), [tune_mod.Point(8, 100, best_p99)]
        )
        chosen = tune_mod.choose([untuned, other], sla)
        return tune_mod.Result("resnet50", sla, levels, [untuned, other], chosen, "2.51.0", {}, 1.0)

    monkeypatch.setattr(tune_mod, "tune", measured)
    code_got, out, err = run_main(
        capsys, *("triton", "tune", "--site", str(site), "--model", "resnet50", "--p99-ms", "200"),
        *("--concurrency", "8", "--dry-run"),
    )  # fmt: skip
    assert code_got == code, err
    assert says in out + err
    assert "dry run" in out + err
    assert not (site / "tuning").exists()


def test_a_missing_local_triton_is_this_machines_lack(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Exit 3, as for any tool the machine lacks, and nothing written, dry run or not."""
    stack = _stack(tmp_path, monkeypatch, STACK_TAIL)
    text = stack.read_text()
    missing = tmp_path / "no-triton"
    monkeypatch.setenv(local.VENV_ENV, str(missing))
    server = local.Installation(missing).server
    for write in ("--dry-run", "--write"):
        code, out, err = run_main(
            capsys, "triton", "tune", "--stack", "dev", "--model", "bert", "--p99-ms", "100", write
        )
        assert (code, out) == (3, "")
        assert err == (
            f"error: no local Triton: {server} is missing; install it with "
            "`bash scripts/setup-triton.sh`\n"
        )
    assert stack.read_text() == text
    assert not (tmp_path / "stacks" / "tuning").exists()

"""`gpuinfra triton repository` lists an S3 model repository (a local S3 server, moto, on
127.0.0.1) and says which version policy finds no version, before Triton would refuse the model."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import boto3
import pytest
from moto.server import ThreadedMotoServer

from tests.conftest import run_cli
from tests.unit.test_integrity import site_copy

BUCKET = "models-bucket"
MODELS = ("serving/resnet50/1/model.onnx", "serving/resnet50/1/labels.txt")


@pytest.fixture
def s3(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    for name, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
    }.items():
        monkeypatch.setenv(name, value)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    try:
        client = boto3.client("s3", endpoint_url=endpoint)
        client.create_bucket(Bucket=BUCKET)
        for key in MODELS:
            client.put_object(Bucket=BUCKET, Key=key, Body=b"model")
        yield endpoint
    finally:
        server.stop()


def s3_site(tmp_path: Path) -> Path:
    """The example site, its repository moved to S3 (resnet50 serves the latest version)."""
    site = site_copy(tmp_path, {})
    triton = site / "group_vars" / "all" / "triton.yml"
    triton.write_text(
        triton.read_text().replace(
            "triton_model_repository:\n  pvc: triton-models\n",
            f"triton_model_repository:\n  s3: s3://{BUCKET}/serving/\n  region: us-east-1\n",
        )
    )
    assert f"s3://{BUCKET}" in triton.read_text()
    return site


def test_a_repository_with_every_version_passes(s3: str, tmp_path: Path) -> None:
    result = run_cli("triton", "repository", "--site", str(s3_site(tmp_path)), "--endpoint-url", s3)
    assert result.code == 0, result.stderr
    assert "every version policy of" in result.stdout
    assert "resnet50: version_policy" in result.stdout


def test_a_model_without_a_version_directory_fails_naming_it(s3: str, tmp_path: Path) -> None:
    site = s3_site(tmp_path)
    client = boto3.client("s3", endpoint_url=s3)
    for key in MODELS:
        client.delete_object(Bucket=BUCKET, Key=key)
    client.put_object(Bucket=BUCKET, Key="serving/resnet50/config.pbtxt", Body=b"name: 'x'")
    result = run_cli("triton", "repository", "--site", str(site), "--endpoint-url", s3)
    assert result.code == 1
    (line,) = [x for x in result.stderr.splitlines() if "resnet50" in x]
    assert "no version directory" in line, result.stderr


def test_a_bucket_that_does_not_exist_is_one_line(s3: str, tmp_path: Path) -> None:
    site = s3_site(tmp_path)
    boto3.resource("s3", endpoint_url=s3).Bucket(BUCKET).objects.all().delete()
    boto3.client("s3", endpoint_url=s3).delete_bucket(Bucket=BUCKET)
    result = run_cli("triton", "repository", "--site", str(site), "--endpoint-url", s3)
    assert result.code == 1
    assert "NoSuchBucket" in result.stderr
    assert "Traceback" not in result.stderr


def test_an_endpoint_that_does_not_answer_ends_with_one_line(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.setenv(name, "testing")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    result = run_cli(
        "triton",
        "repository",
        "--site",
        str(s3_site(tmp_path)),
        "--endpoint-url",
        f"http://127.0.0.1:{port}",
    )
    # It could not look: the environment (3), not a failed check (1).
    assert result.code == 3
    (line,) = result.stderr.splitlines()
    assert line.startswith(f"error: s3://{BUCKET}/serving/: ")
    assert f"127.0.0.1:{port}" in line


def test_no_credentials_is_the_environment_not_a_failed_check(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.delenv("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", raising=False)
    monkeypatch.delenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", raising=False)
    result = run_cli("triton", "repository", "--site", str(s3_site(tmp_path)))
    assert result.code == 3
    (line,) = result.stderr.splitlines()
    assert line.startswith(f"error: s3://{BUCKET}/serving/: Unable to locate credentials; ")
    assert "AWS_PROFILE" in line


@pytest.mark.parametrize("url", ["minio:9000", "ftp://minio", "http://127.0.0.1:99999", "http://"])
def test_an_endpoint_that_is_not_a_url_is_the_argument(tmp_path: Path, url: str) -> None:
    site = s3_site(tmp_path)
    result = run_cli("triton", "repository", "--site", str(site), "--endpoint-url", url)
    assert result.code == 2
    (line,) = result.stderr.splitlines()
    assert line.startswith(f"error: --endpoint-url {url!r}: not an S3 endpoint")
    assert "allowed: an http:// or https:// URL" in line


def test_a_volume_repository_is_refused_with_where_it_is_checked() -> None:
    result = run_cli("triton", "repository", "--site", "inventory/example")
    assert result.code == 2
    assert "init container" in result.stderr


def test_a_stack_without_triton_has_no_repository_to_check() -> None:
    result = run_cli("triton", "repository", "--stack", "prod")
    assert result.code == 2
    (line,) = result.stderr.splitlines()
    assert line == "error: prod: Triton is not enabled there; no model repository to check"

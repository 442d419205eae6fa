"""The triton role writes each model's config.pbtxt into an S3 model repository, once.

The S3 endpoint is a local S3 server (moto) on 127.0.0.1; the role's own task file runs under
ansible-playbook with amazon.aws.s3_object, as it does against AWS.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
import yaml
from google.protobuf import text_format
from moto.server import ThreadedMotoServer
from tritonclient.grpc import model_config_pb2

from gpuinfra import addons

ROOT = Path(__file__).resolve().parents[3]
ANSIBLE_PLAYBOOK = Path(sys.executable).parent / "ansible-playbook"
BUCKET = "models-bucket"
CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
}
SETTINGS: dict[str, Any] = {
    "triton_enabled": True,
    "triton_model_repository": {"s3": f"s3://{BUCKET}/serving/prod/"},
    "triton_models": [
        {
            "name": "resnet50",
            "backend": "onnxruntime",
            "max_batch_size": 32,
            "dynamic_batching": {"preferred_batch_size": [8, 16]},
            "instance_group": {"count": 2, "kind": "gpu"},
        },
        {"name": "ranker", "backend": "python", "version_policy": {"policy": "all"}},
    ],
}


MODEL_FILES = ("serving/prod/resnet50/1/model.onnx", "serving/prod/ranker/1/model.py")


@pytest.fixture
def s3_endpoint() -> Iterator[str]:
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    try:
        s3 = boto3.client("s3", endpoint_url=endpoint, **_boto_credentials())
        s3.create_bucket(Bucket=BUCKET)
        # The models themselves, which the site puts there: one version each.
        for key in MODEL_FILES:
            s3.put_object(Bucket=BUCKET, Key=key, Body=b"model")
        yield endpoint
    finally:
        server.stop()


def _boto_credentials() -> dict[str, str]:
    return {
        "aws_access_key_id": CREDENTIALS["AWS_ACCESS_KEY_ID"],
        "aws_secret_access_key": CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
        "region_name": CREDENTIALS["AWS_DEFAULT_REGION"],
    }


def _upload(
    tmp_path: Path, endpoint: str, settings: dict[str, Any] | None = None
) -> subprocess.CompletedProcess[str]:
    playbook = tmp_path / "files.yml"
    playbook.write_text(
        yaml.safe_dump(
            [
                {
                    "name": "Write Triton's model configurations",
                    "hosts": "localhost",
                    "gather_facts": False,
                    "vars": {
                        **(settings or SETTINGS),
                        "ansible_python_interpreter": "{{ ansible_playbook_python }}",
                    },
                    "tasks": [
                        {
                            "name": "Render",
                            "ansible.builtin.set_fact": {
                                "_triton_render": "{{ lookup('gpuinfra_addon', 'triton') }}"
                            },
                        },
                        {
                            "name": "Model configurations",
                            "ansible.builtin.include_role": {
                                "name": "triton",
                                "tasks_from": "files.yml",
                            },
                        },
                    ],
                }
            ]
        )
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env |= CREDENTIALS | {
        "AWS_URL": endpoint,
        "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"),
        "ANSIBLE_NOCOLOR": "1",
    }
    inventory = tmp_path / "inventory"
    inventory.mkdir(exist_ok=True)
    (inventory / "hosts.yml").write_text("all: {}\n")
    return subprocess.run(
        [str(ANSIBLE_PLAYBOOK), "-i", str(inventory), str(playbook)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def _changed(output: str) -> int:
    match = re.search(r"localhost\s+: ok=\d+\s+changed=(\d+)", output)
    assert match, output
    return int(match.group(1))


def test_config_pbtxt_files_land_next_to_the_models_once(tmp_path: Path, s3_endpoint: str) -> None:
    first = _upload(tmp_path, s3_endpoint)
    assert first.returncode == 0, first.stdout + first.stderr
    assert _changed(first.stdout) == 1, first.stdout

    s3 = boto3.client("s3", endpoint_url=s3_endpoint, **_boto_credentials())
    listed = s3.list_objects_v2(Bucket=BUCKET)
    keys = sorted(o["Key"] for o in listed.get("Contents", []) if o["Key"] not in MODEL_FILES)
    assert keys == ["serving/prod/ranker/config.pbtxt", "serving/prod/resnet50/config.pbtxt"]
    render = addons.render("triton", addons.settings_from_role_vars("triton", SETTINGS))
    for key in keys:
        body = s3.get_object(Bucket=BUCKET, Key=key)["Body"].read().decode()
        model = key.split("/")[-2]
        assert body == render.files[f"models/{model}/config.pbtxt"]
        config = text_format.Parse(body, model_config_pb2.ModelConfig())
        assert config.name == model

    second = _upload(tmp_path, s3_endpoint)
    assert second.returncode == 0, second.stdout + second.stderr
    assert _changed(second.stdout) == 0, second.stdout


def test_a_version_the_policy_needs_is_missing_from_the_bucket(
    tmp_path: Path, s3_endpoint: str
) -> None:
    models = [
        {
            **SETTINGS["triton_models"][0],
            "version_policy": {"policy": "specific", "versions": [1, 2]},
        },
        SETTINGS["triton_models"][1],
    ]
    done = _upload(tmp_path, s3_endpoint, {**SETTINGS, "triton_models": models})
    assert done.returncode == 2, done.stdout
    assert (
        f"s3://{BUCKET}/serving/prod/: model 'resnet50' (version_policy specific [1, 2]): "
        "no version directory resnet50/2/"
    ) in done.stdout


CANARY: dict[str, Any] = {
    **SETTINGS,
    "triton_gateway": {"name": "inference", "namespace": "gateways"},
    "triton_serving_groups": [
        {
            "name": "vision",
            "models": ["resnet50"],
            "canary": {
                "weight": 10,
                "version_policies": {"resnet50": {"policy": "specific", "versions": [2]}},
            },
        },
        {"name": "ranking", "models": ["ranker"]},
    ],
}


def test_a_canarys_config_lands_beside_stables_and_its_version_is_checked(
    tmp_path: Path, s3_endpoint: str
) -> None:
    # Version 2, which only the canary serves, is not in the bucket yet.
    refused = _upload(tmp_path, s3_endpoint, CANARY)
    assert refused.returncode == 2, refused.stdout
    assert (
        "model 'resnet50' (version_policy specific [2]): no version directory resnet50/2/"
    ) in refused.stdout

    s3 = boto3.client("s3", endpoint_url=s3_endpoint, **_boto_credentials())
    s3.put_object(Bucket=BUCKET, Key="serving/prod/resnet50/2/model.onnx", Body=b"model")
    done = _upload(tmp_path, s3_endpoint, CANARY)
    assert done.returncode == 0, done.stdout + done.stderr
    body = s3.get_object(Bucket=BUCKET, Key="serving/prod/resnet50/configs/canary.pbtxt")
    config = text_format.Parse(body["Body"].read().decode(), model_config_pb2.ModelConfig())
    assert list(config.version_policy.specific.versions) == [2]
    stable = s3.get_object(Bucket=BUCKET, Key="serving/prod/resnet50/config.pbtxt")
    parsed = text_format.Parse(stable["Body"].read().decode(), model_config_pb2.ModelConfig())
    assert parsed.version_policy.latest.num_versions == 1

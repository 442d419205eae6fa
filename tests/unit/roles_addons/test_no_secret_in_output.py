"""A Secret's value read by an add-on role appears in no output and no runner artefact.

The Prometheus stack's preflight reads Grafana's admin Secret to check its keys. A planted
password must not reach ansible-playbook's output at -vv, nor any file ansible-runner writes
(stdout, job events with each task's result, the command), which CI keeps as artefacts.
"""

from __future__ import annotations

import base64
import json
import os
import sys
from pathlib import Path

import ansible_runner
import pytest

from .test_addons_apply import EXTRA, MODULES, ROOT, STAND_IN, _renders

PASSWORD = "planted-Grafana-pw-7f3a91"


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    tmp = tmp_path_factory.mktemp("secret")
    modules = tmp / "collections" / "ansible_collections" / "kubernetes" / "core" / "plugins"
    (modules / "modules").mkdir(parents=True)
    for name in MODULES:
        (modules / "modules" / f"{name}.py").write_text(STAND_IN.format(name=name))
    bin_dir = tmp / "bin"
    bin_dir.mkdir()
    (bin_dir / "helm").write_text("#!/bin/sh\necho v3.19.0\n")
    (bin_dir / "helm").chmod(0o755)
    (tmp / "kubeconfig").write_text("apiVersion: v1\nkind: Config\n")
    charts = {r.release: f"{r.chart.name}-{r.chart.version}" for r in _renders() if r.chart}
    planted = tmp / "planted"
    planted.write_text(base64.b64encode(PASSWORD.encode()).decode())
    private = tmp / "private"
    private.mkdir()
    result = ansible_runner.run(
        private_data_dir=str(private),
        project_dir=str(ROOT),
        playbook=str(ROOT / "playbooks" / "addons.yml"),
        inventory=str(ROOT / "inventory" / "example"),
        extravars={**EXTRA, "gpuinfra_chart_cache_dir": str(tmp / "charts")},
        envvars={
            "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"),
            "ANSIBLE_COLLECTIONS_PATH": str(tmp / "collections"),
            "ANSIBLE_LOCAL_TEMP": str(tmp / "ansible"),
            "ANSIBLE_NOCOLOR": "1",
            "KUBECONFIG": str(tmp / "kubeconfig"),
            "PATH": f"{bin_dir}:{Path(sys.executable).parent}:{os.environ['PATH']}",
            "STAND_IN_CHARTS": json.dumps(charts),
            "STAND_IN_LOG": str(tmp / "calls.jsonl"),
            # A file outside the private data dir: runner keeps its environment there.
            "STAND_IN_SECRET_FILE": str(planted),
        },
        verbosity=2,
        quiet=True,
    )
    stdout = Path(result.stdout.name).read_text()
    assert result.rc == 0, stdout
    return private, stdout


def _forms() -> list[str]:
    encoded = base64.b64encode(PASSWORD.encode()).decode()
    return [PASSWORD, encoded]


def test_the_preflight_read_the_planted_secret(run: tuple[Path, str]) -> None:
    # Without this the search below could pass because nothing was read.
    _private, stdout = run
    assert "Read the objects the add-ons need to exist" in stdout
    assert "Assert each exists with its keys" in stdout


def test_no_output_and_no_runner_artefact_holds_the_secret(run: tuple[Path, str]) -> None:
    private, stdout = run
    task = ""
    for line in stdout.splitlines():
        task = line if line.startswith("TASK [") else task
        assert not any(form in line for form in _forms()), f"{task} prints the secret"
    searched = 0
    for path in private.rglob("*"):
        if path.is_file():
            searched += 1
            text = path.read_bytes().decode(errors="replace")
            for form in _forms():
                assert form not in text, f"{path.relative_to(private)} holds the secret"
    # stdout, the command and one file per job event at least.
    assert searched > 10

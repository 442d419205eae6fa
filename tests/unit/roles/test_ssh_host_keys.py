"""Host keys are checked on every inventory but the lab's own.

ansible.cfg applies to every site the playbooks run against: a global "don't check host keys"
would let anyone in the network path answer for a production GPU node's root session.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpuinfra import lab
from gpuinfra.lab import runner

from .conftest import ROOT

BIN = Path(sys.executable).parent


def _config(*args: str) -> list[dict[str, object]]:
    out = subprocess.run(
        [str(BIN / "ansible-config"), "dump", "--format", "json", *args],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
        env={**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg")},
    ).stdout
    return json.loads(out)


def test_ansible_cfg_checks_host_keys() -> None:
    settings = {item["name"]: item["value"] for item in _config() if "name" in item}
    assert settings["HOST_KEY_CHECKING"] is True
    ssh = {
        item["name"]: item["value"]
        for plugin in _config("-t", "connection")
        for name, options in plugin.items()
        if name == "ssh"
        for item in options
    }
    assert ssh["host_key_checking"] is True
    args = str(ssh["ssh_args"])
    assert "StrictHostKeyChecking" not in args
    assert "UserKnownHostsFile" not in args


def test_the_runner_passes_ansible_cfg_s_host_key_checking_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # ansible-runner sets ANSIBLE_HOST_KEY_CHECKING=False unless it is given a value; a converge
    # gives it the one ansible-playbook would use (tests/lab/test_host_keys.py runs it on SSH).
    monkeypatch.delenv("ANSIBLE_HOST_KEY_CHECKING", raising=False)
    assert runner.host_key_checking(ROOT / "ansible.cfg") is True
    relaxed = tmp_path / "ansible.cfg"
    relaxed.write_text("[defaults]\nhost_key_checking = False\n")
    assert runner.host_key_checking(relaxed) is False
    monkeypatch.setenv("ANSIBLE_HOST_KEY_CHECKING", "false")
    assert runner.host_key_checking(ROOT / "ansible.cfg") is False


def test_only_the_lab_inventory_relaxes_host_key_checking(tmp_path: Path) -> None:
    settings = lab.Settings(prefix="unit", port_base=2600, root=tmp_path)
    path = lab.write_inventory(
        settings, [lab.Host("unit-1", 2601, "running")], "http://127.0.0.1:1/", "0" * 40
    )
    lab_vars = _hostvars(path)["unit-1"]
    assert "StrictHostKeyChecking=no" in lab_vars["ansible_ssh_common_args"]
    for name, host_vars in _hostvars(ROOT / "inventory" / "example").items():
        relaxed = " ".join(
            str(host_vars.get(key, ""))
            for key in ("ansible_ssh_common_args", "ansible_ssh_extra_args", "ansible_ssh_args")
        )
        assert "StrictHostKeyChecking" not in relaxed, name
        assert host_vars.get("ansible_host_key_checking", True) is True, name


def _hostvars(inventory: Path) -> dict[str, dict[str, object]]:
    listed = subprocess.run(
        [str(BIN / "ansible-inventory"), "-i", str(inventory), "--list"],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    )
    return dict(json.loads(listed.stdout)["_meta"]["hostvars"])

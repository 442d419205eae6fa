"""Ansible Vault values in a site: `config check` and `plan` read the rest of the file and show
the value as <vaulted>; `converge` decrypts them with the vault password file."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT, run_cli

SECRET = "planted-vault-plaintext-51c2"
BIN = Path(sys.executable).parent


def encrypt(tmp_path: Path, name: str, value: str) -> tuple[str, Path]:
    password = tmp_path / "vault-pass"
    password.write_text("correct horse battery staple\n")
    out = subprocess.run(
        [str(BIN / "ansible-vault"), "encrypt_string", "--vault-password-file", str(password),
         "--name", name, value],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    return out, password


@pytest.fixture
def vaulted_site(tmp_path: Path) -> tuple[Path, Path, str]:
    site = tmp_path / "site"
    shutil.copytree(ROOT / "inventory" / "example", site)
    text, password = encrypt(tmp_path, "nvidia_container_toolkit_repo_url", SECRET)
    (site / "group_vars" / "gpu_nodes" / "vaulted.yml").write_text(text)
    whole = site / "group_vars" / "gpu_nodes" / "whole.yml"
    whole.write_text(f"site_mirror_token: {SECRET}\n")
    subprocess.run(
        [str(BIN / "ansible-vault"), "encrypt", "--vault-password-file", str(password), str(whole)],
        check=True, capture_output=True,
    )  # fmt: skip
    ciphertext = text.split("\n", 2)[2].split()[0]
    return site, password, ciphertext


def test_config_check_accepts_vaulted_values(vaulted_site: tuple[Path, Path, str]) -> None:
    site, _password, _cipher = vaulted_site
    result = run_cli("config", "check", "--site", str(site))
    assert result.code == 0, result.stdout + result.stderr
    assert "!vault" not in result.stderr


def test_plan_shows_a_vaulted_value_as_vaulted(vaulted_site: tuple[Path, Path, str]) -> None:
    site, _password, ciphertext = vaulted_site
    result = run_cli("plan", "--site", str(site), "--format", "json")
    assert result.code == 0, result.stderr
    document = json.loads(result.stdout)
    assert '"nvidia_container_toolkit_repo_url": "<vaulted>"' in json.dumps(document)
    for fmt in ("json", "markdown", "table"):
        shown = run_cli("plan", "--site", str(site), "--format", fmt).stdout
        assert SECRET not in shown and ciphertext not in shown


PLAYBOOK = """
- name: Read a vaulted variable
  hosts: all
  gather_facts: false
  tasks:
    - name: The vaulted value is decrypted
      ansible.builtin.assert:
        that: nvidia_container_toolkit_repo_url == expected
        quiet: true
      vars:
        expected: "{secret}"
"""


def test_converge_decrypts_with_the_vault_password_file(tmp_path: Path) -> None:
    site = tmp_path / "site"
    (site / "group_vars").mkdir(parents=True)
    (site / "hosts.yml").write_text(
        "all:\n  hosts:\n    alpha: {ansible_connection: local}\n"
        "  vars: {ansible_python_interpreter: '{{ ansible_playbook_python }}'}\n"
    )
    text, password = encrypt(tmp_path, "nvidia_container_toolkit_repo_url", SECRET)
    (site / "group_vars" / "all.yml").write_text(text)
    playbook = tmp_path / "play.yml"
    playbook.write_text(PLAYBOOK.replace("{secret}", SECRET))
    without = run_cli("converge", "--site", str(site), "--playbook", str(playbook))
    assert without.code != 0
    result = run_cli(
        "converge", "--site", str(site), "--playbook", str(playbook),
        "--vault-password-file", str(password),
    )  # fmt: skip
    assert result.code == 0, result.stdout + result.stderr
    assert SECRET not in result.stdout + result.stderr


def test_an_inventory_encrypted_whole_is_refused_saying_to_encrypt_values(tmp_path: Path) -> None:
    site = tmp_path / "site"
    shutil.copytree(ROOT / "inventory" / "example", site)
    _, password = encrypt(tmp_path, "unused", SECRET)
    subprocess.run(
        [str(BIN / "ansible-vault"), "encrypt", "--vault-password-file", str(password),
         str(site / "hosts.yml")],
        capture_output=True, check=True,
    )  # fmt: skip
    result = run_cli("config", "check", "--site", "site", root=ROOT, cwd=tmp_path)
    assert result.code == 2
    assert result.stderr.splitlines() == [
        "error: site/hosts.yml: encrypted whole with ansible-vault, so its hosts cannot be "
        "checked (allowed: a plain inventory with secret values encrypted one by one, "
        "`ansible-vault encrypt_string`)"
    ]

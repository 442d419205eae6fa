"""A site's hosts are trusted by the host keys the operator knows, whichever way a play is run.

ansible.cfg checks host keys; `gpuinfra converge` runs playbooks through ansible-runner, which
turns that check off unless it is told otherwise. Only the lab's own inventory relaxes it.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from gpuinfra import lab
from gpuinfra.lab import runner

from .conftest import CONVERGED

pytestmark = pytest.mark.lab

PING = [
    {
        "name": "Connect",
        "hosts": "all",
        "gather_facts": False,
        "tasks": [{"ansible.builtin.ping": {}}],
    }
]


def _site(tmp_path: Path, settings: lab.Settings, known_hosts: Path) -> tuple[Path, int]:
    """A site of one lab host, as a real site's inventory names it: no relaxed SSH options, its
    known hosts in a file of the test's own."""
    port = next(h.port for h in lab.hosts(settings) if h.name == CONVERGED[0])
    hosts = tmp_path / "site" / "hosts.yml"
    hosts.parent.mkdir()
    hosts.write_text(
        yaml.safe_dump(
            {
                "all": {
                    "hosts": {
                        "gpu-01": {
                            "ansible_host": "127.0.0.1",
                            "ansible_port": port,
                            "ansible_user": "root",
                            "ansible_ssh_private_key_file": str(settings.key_file),
                            "ansible_ssh_common_args": f"-o UserKnownHostsFile={known_hosts}",
                            # SSH checks a host key when it opens a connection; a master that the
                            # suite's lab opened to the same address, port and user (persisted,
                            # with the lab's relaxed options) would carry this run past the check.
                            "ansible_control_path_dir": str(tmp_path / "ssh"),
                        }
                    }
                }
            }
        )
    )
    return hosts, port


def test_a_converge_refuses_a_host_whose_key_it_does_not_know(
    tmp_path: Path, lab_settings: lab.Settings, lab_hosts: list[lab.Host]
) -> None:
    del lab_hosts
    known_hosts = tmp_path / "known_hosts"
    known_hosts.touch()
    inventory, port = _site(tmp_path, lab_settings, known_hosts)
    playbook = tmp_path / "ping.yml"
    playbook.write_text(yaml.safe_dump(PING))

    refused = runner.converge(playbook, inventory)

    assert not refused.ok
    assert refused.recap["gpu-01"]["dark"] == 1
    (failure,) = refused.failures
    assert failure.unreachable
    assert "Host key verification failed" in failure.message
    assert "ssh-keyscan -p PORT ADDRESS >> ~/.ssh/known_hosts" in failure.message
    # Nothing was written for the operator: the key is not trusted on first use.
    assert known_hosts.read_text() == ""

    # Once the operator has recorded the host's key, the same run connects.
    scanned = subprocess.run(
        ["ssh-keyscan", "-T", "10", "-p", str(port), "127.0.0.1"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    known_hosts.write_text(scanned)

    trusted = runner.converge(playbook, inventory)

    assert trusted.ok, trusted.failures
    assert trusted.recap["gpu-01"]["dark"] == 0

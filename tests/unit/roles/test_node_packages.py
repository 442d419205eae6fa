"""roles/node_packages refuses requests it must not install, before touching the host.

The play runs the role against this machine; every case stops at the role's first tasks, which
only read variables.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from .conftest import ROOT, run_playbook_here


def run_role(tmp_path: Path, requests: list[dict[str, Any]]) -> subprocess.CompletedProcess[str]:
    playbook = tmp_path / "play.yml"
    playbook.write_text(
        "- hosts: localhost\n  connection: local\n  gather_facts: true\n"
        "  gather_subset: [min]\n  roles: [node_packages]\n"
    )
    return run_playbook_here(
        tmp_path,
        "-i",
        "localhost,",
        "-e",
        json.dumps({"node_packages_requests": requests}),
        str(playbook),
        env={
            "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"),
            "ANSIBLE_ROLES_PATH": str(ROOT / "roles"),
        },
    )


MISSING = "gpuinfra-no-such-package"


def test_a_blocked_request_stops_the_run_with_its_reason(tmp_path: Path) -> None:
    reason = "no kernel headers for the running kernel on this host"
    result = run_role(
        tmp_path,
        [
            {
                "role": "nvidia_driver",
                "packages": [f"{MISSING}=1"],
                "hold": [MISSING],
                "settled": False,
                "blocked": reason,
            }
        ],
    )
    output = " ".join(result.stdout.split())
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Packages | no open request is blocked" in output
    assert reason in output
    assert "apt-get" not in output


def test_a_malformed_request_is_named(tmp_path: Path) -> None:
    result = run_role(tmp_path, [{"role": "nvidia_driver", "packages": [f"{MISSING}=1"]}])
    output = " ".join(result.stdout.split())
    assert result.returncode == 2, result.stdout + result.stderr
    assert "node_packages_requests must be a list of {role, packages, hold, settled}" in output


def test_settled_requests_install_nothing(tmp_path: Path) -> None:
    # A package apt cannot find would fail the run if the role tried to install it.
    result = run_role(
        tmp_path,
        [
            {
                "role": "nvidia_driver",
                "packages": [f"{MISSING}=1"],
                "hold": [MISSING],
                "settled": True,
            }
        ],
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "changed=0" in result.stdout
    assert "failed=0" in result.stdout

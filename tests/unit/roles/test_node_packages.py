"""roles/node_packages refuses requests it must not install, before touching the host.

The play runs the role against this machine; every case stops at the role's first tasks, which
only read variables.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[3]


def run_role(tmp_path: Path, requests: list[dict[str, Any]]) -> subprocess.CompletedProcess[str]:
    playbook = tmp_path / "play.yml"
    playbook.write_text(
        "- hosts: localhost\n  connection: local\n  gather_facts: true\n"
        "  gather_subset: [min]\n  roles: [node_packages]\n"
    )
    env = {
        **os.environ,
        "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"),
        "ANSIBLE_ROLES_PATH": str(ROOT / "roles"),
        "ANSIBLE_FACT_CACHING": "memory",
        "ANSIBLE_LOCAL_TEMP": str(tmp_path / "ansible"),
        "ANSIBLE_NOCOLOR": "1",
    }
    extra = json.dumps({"node_packages_requests": requests})
    return subprocess.run(
        [
            str(Path(sys.executable).parent / "ansible-playbook"),
            "-i",
            "localhost,",
            "-e",
            f"ansible_python_interpreter={sys.executable}",
            "-e",
            extra,
            str(playbook),
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=300,
        check=False,
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

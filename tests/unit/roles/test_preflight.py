"""Bad inventory values stop nodes.yml in preflight, before anything is installed, and
check.yml before the check runs.

The play runs against this machine with only the preflight tag: every task it reaches is read-only.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import yaml

from .conftest import ROOT, run_playbook_here


def preflight(
    tmp_path: Path, *extra_vars: str, playbook: str = "playbooks/nodes.yml"
) -> subprocess.CompletedProcess[str]:
    inventory = tmp_path / "hosts.yml"
    inventory.write_text("gpu_nodes:\n  hosts:\n    localhost:\n      ansible_connection: local\n")
    args = ["-i", str(inventory)]
    for value in extra_vars:
        args += ["-e", value]
    return run_playbook_here(tmp_path, *args, "--tags", "preflight", playbook)


@pytest.mark.skipif(os.geteuid() != 0, reason="the play becomes root")
def test_unsupported_install_source_names_the_allowed_ones(tmp_path: Path) -> None:
    result = preflight(tmp_path, "nvidia_driver_source=runfile")
    assert result.returncode != 0
    output = result.stdout + result.stderr
    assert "nvidia_driver_source" in output
    assert "runfile" in output
    assert "distro, cuda_repo, preinstalled" in output


@pytest.mark.skipif(os.geteuid() != 0, reason="the play becomes root")
def test_unpinned_driver_version_says_to_bump_versions_yaml(tmp_path: Path) -> None:
    result = preflight(tmp_path, "nvidia_driver_version=535.999.01")
    assert result.returncode != 0
    output = " ".join((result.stdout + result.stderr).split())
    assert "nvidia_driver_version '535.999.01' is not pinned for source 'distro'" in output
    assert "versions.yaml pins 535.261.03" in output


@pytest.mark.skipif(os.geteuid() != 0, reason="the play becomes root")
def test_node_check_with_a_source_that_has_no_pin_says_what_to_set(tmp_path: Path) -> None:
    result = preflight(tmp_path, "gpu_node_check_driver_source=foo", playbook="playbooks/check.yml")
    assert result.returncode != 0
    output = " ".join((result.stdout + result.stderr).split())
    assert 'gpu_node_check_driver_source "foo" has no pinned driver' in output
    assert "one of distro, cuda_repo, preinstalled" in output
    assert "Traceback" not in output


@pytest.mark.skipif(os.geteuid() != 0, reason="the play becomes root")
def test_unpinned_toolkit_version_says_to_bump_versions_yaml(tmp_path: Path) -> None:
    # The toolkit role alone: on this machine the driver's probe stops nodes.yml first.
    playbook = tmp_path / "toolkit.yml"
    playbook.write_text(
        yaml.safe_dump(
            [
                {
                    "hosts": "gpu_nodes",
                    "become": True,
                    "gather_subset": ["min"],
                    "pre_tasks": [
                        {
                            "ansible.builtin.include_vars": {
                                "file": str(ROOT / "versions.yaml"),
                                "name": "gpuinfra_versions",
                            },
                            "tags": ["always"],
                        }
                    ],
                    "roles": ["nvidia_container_toolkit"],
                }
            ]
        )
    )
    result = preflight(tmp_path, "nvidia_container_toolkit_version=1.99.0", playbook=str(playbook))
    assert result.returncode != 0
    output = " ".join((result.stdout + result.stderr).split())
    assert "nvidia_container_toolkit 1.99.0 is not the pin (1.20.0," in output
    assert "bump nvidia_container_toolkit in versions.yaml" in output


def _toolkit_playbook(tmp_path: Path) -> Path:
    playbook = tmp_path / "toolkit-only.yml"
    playbook.write_text(
        yaml.safe_dump(
            [
                {
                    "hosts": "gpu_nodes",
                    "become": True,
                    "gather_subset": ["min"],
                    "pre_tasks": [
                        {
                            "ansible.builtin.include_vars": {
                                "file": str(ROOT / "versions.yaml"),
                                "name": "gpuinfra_versions",
                            },
                            "tags": ["always"],
                        }
                    ],
                    "roles": ["nvidia_container_toolkit"],
                }
            ]
        )
    )
    return playbook


@pytest.mark.skipif(os.geteuid() != 0, reason="the play becomes root")
def test_a_repository_url_with_a_newline_stops_the_toolkit_in_preflight(tmp_path: Path) -> None:
    url = "https://mirror.example.internal/deb /\ndeb [trusted=yes] http://evil.example/ /"
    value = json.dumps({"nvidia_container_toolkit_repo_url": url})
    result = preflight(tmp_path, value, playbook=str(_toolkit_playbook(tmp_path)))
    assert result.returncode != 0
    output = " ".join((result.stdout + result.stderr).split())
    assert "nvidia_container_toolkit_repo_url:" in output
    assert "a repository URL is one plain http(s) URL" in output
    assert not Path("/etc/apt/sources.list.d/nvidia-container-toolkit.list").exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="the play becomes root")
def test_a_key_over_http_stops_the_driver_in_preflight(tmp_path: Path) -> None:
    value = json.dumps(
        {"nvidia_driver_cuda_repo_key_url": "http://mirror.example.internal/3bf863cc.pub"}
    )
    result = preflight(tmp_path, value)
    assert result.returncode != 0
    output = " ".join((result.stdout + result.stderr).split())
    assert "nvidia_driver_cuda_repo_key_url:" in output
    assert "fetched over http; serve the key over https" in output


@pytest.mark.skipif(os.geteuid() != 0, reason="the play becomes root")
def test_a_command_in_the_preinstalled_paths_stops_preflight_and_never_runs(
    tmp_path: Path,
) -> None:
    marker = tmp_path / "ran"
    paths = {"nvidia_driver_preinstalled_paths": [f"/usr/local/nvidia/bin$(touch {marker})"]}
    result = preflight(tmp_path, json.dumps(paths))
    assert result.returncode != 0
    assert "nvidia_driver_preinstalled_paths:" in " ".join(result.stdout.split())
    # Past preflight, the task that searches the paths reads them as data only.
    playbook = tmp_path / "search.yml"
    playbook.write_text(
        yaml.safe_dump(
            [
                {
                    "hosts": "gpu_nodes",
                    "gather_facts": False,
                    "vars": {"_nvidia_driver_version": "580.159.04", **paths},
                    "tasks": [
                        {
                            "ansible.builtin.include_tasks": str(
                                ROOT / "roles" / "nvidia_driver" / "tasks" / "preinstalled.yml"
                            )
                        }
                    ],
                }
            ]
        )
    )
    inventory = tmp_path / "hosts.yml"
    searched = run_playbook_here(tmp_path, "-i", str(inventory), str(playbook))
    assert "no nvidia-smi is on localhost" in " ".join(searched.stdout.split()), searched.stdout
    assert not marker.exists()

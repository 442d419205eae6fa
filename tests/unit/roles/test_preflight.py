"""Bad inventory values stop nodes.yml in preflight, before anything is installed, and
check.yml before the check runs.

The play runs against this machine with only the preflight tag: every task it reaches is read-only.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from .conftest import ROOT, run_playbook_here


def localhost_inventory(tmp_path: Path) -> Path:
    """An inventory whose one GPU node is this machine."""
    inventory = tmp_path / "hosts.yml"
    inventory.write_text("gpu_nodes:\n  hosts:\n    localhost:\n      ansible_connection: local\n")
    return inventory


def this_release() -> str:
    """This machine's Debian codename."""
    return subprocess.run(
        ["sh", "-c", ". /etc/os-release && echo $VERSION_CODENAME"], capture_output=True, text=True
    ).stdout.strip()


def variables_play(
    tmp_path: Path, versions: Path, roles: list[str], tasks: list[Any], *extra_vars: str
) -> str:
    """What ``tasks`` print on this machine, after a play loaded ``versions`` and ``roles`` (their
    variables only: their own tasks are tagged never). Fails on a failed play."""
    playbook = tmp_path / "variables.yml"
    playbook.write_text(
        yaml.safe_dump(
            [
                {
                    "hosts": "gpu_nodes",
                    "gather_subset": ["min"],
                    "pre_tasks": [
                        {
                            "ansible.builtin.include_vars": {
                                "file": str(versions),
                                "name": "gpuinfra_versions",
                            }
                        }
                    ],
                    "roles": [{"role": name, "tags": ["never"]} for name in roles],
                    "tasks": tasks,
                }
            ]
        )
    )
    (tmp_path / "roles").symlink_to(ROOT / "roles")
    args = ["-i", str(localhost_inventory(tmp_path))]
    for value in extra_vars:
        args += ["-e", value]
    result = run_playbook_here(tmp_path, *args, str(playbook))
    assert result.returncode == 0, result.stdout + result.stderr
    return " ".join(result.stdout.split())


def preflight(
    tmp_path: Path, *extra_vars: str, playbook: str = "playbooks/nodes.yml"
) -> subprocess.CompletedProcess[str]:
    inventory = localhost_inventory(tmp_path)
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
    playbook = toolkit_alone(tmp_path)
    result = preflight(tmp_path, "nvidia_container_toolkit_version=1.99.0", playbook=str(playbook))
    assert result.returncode != 0
    output = " ".join((result.stdout + result.stderr).split())
    assert "nvidia_container_toolkit 1.99.0 is not the pin (1.20.0," in output
    assert "bump nvidia_container_toolkit in versions.yaml" in output


def toolkit_alone(tmp_path: Path, versions: Path = ROOT / "versions.yaml") -> Path:
    playbook = tmp_path / "toolkit-alone.yml"
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
                                "file": str(versions),
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


def releases_other_than_this_one(role_prefix: str) -> str:
    """Extra vars that leave this machine's Debian release out of a role's supported list (the
    driver role keeps one per install source)."""
    releases = {"Debian": ["11"], "Ubuntu": ["24"]}
    if role_prefix == "nvidia_driver":
        return json.dumps({"_nvidia_driver_supported": {"distro": releases}})
    return json.dumps({f"_{role_prefix}_supported": releases})


def run_to_the_end(tmp_path: Path, playbook: str, *extra: str) -> subprocess.CompletedProcess[str]:
    """The whole play in check mode (nothing is changed even if a refusal were missing)."""
    args = ["-i", str(localhost_inventory(tmp_path)), "--check"]
    for value in extra:
        args += ["-e", value]
    return run_playbook_here(tmp_path, *args, playbook)


@pytest.mark.skipif(os.geteuid() != 0, reason="the play becomes root")
def test_the_toolkit_role_alone_refuses_an_unsupported_release_before_writing(
    tmp_path: Path,
) -> None:
    result = run_to_the_end(
        tmp_path,
        str(toolkit_alone(tmp_path)),
        releases_other_than_this_one("nvidia_container_toolkit"),
    )
    output = " ".join((result.stdout + result.stderr).split())
    assert result.returncode != 0, output
    assert (
        "is not supported by nvidia_container_toolkit; supported: Debian 11, Ubuntu 24." in output
    )
    # Refused in preflight: neither the key nor the source was reached.
    assert "TASK [nvidia_container_toolkit : Repository" not in result.stdout
    assert "the distribution and release are ones the role is tested on" in output


@pytest.mark.skipif(os.geteuid() != 0, reason="the play becomes root")
def test_a_pin_from_another_suite_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    versions = yaml.safe_load((ROOT / "versions.yaml").read_text())
    versions["nvidia_driver"]["distro"]["source"]["suite"] = "trixie"
    versions["nvidia_driver"]["distro"]["releases"] = {}
    versions["containerd"]["source"]["suite"] = "trixie"
    versions["containerd"]["releases"] = {
        "forky": {"version": "2.1.4", "package_version": "2.1.4-1"}
    }
    other = tmp_path / "versions.yaml"
    other.write_text(yaml.safe_dump(versions))
    release = this_release()
    if release == "trixie":
        pytest.skip("this machine runs trixie")
    result = run_to_the_end(tmp_path, str(toolkit_alone(tmp_path, other)))
    output = " ".join((result.stdout + result.stderr).split())
    assert result.returncode != 0, output
    assert (
        f"versions.yaml pins containerd {versions['containerd']['source']['package_version']} "
        f"from trixie; this host runs Debian" in output
    )
    assert f"({release}), whose archive does not carry that build" in output
    assert f"Builds are pinned for: trixie, forky. Add one for {release} under containerd" in output
    driver = tmp_path / "driver.yml"
    driver.write_text(
        (ROOT / "playbooks" / "nodes.yml")
        .read_text()
        .replace('"{{ playbook_dir }}/../versions.yaml"', json.dumps(str(other)))
    )
    (tmp_path / "roles").symlink_to(ROOT / "roles")
    result = preflight(tmp_path, playbook=str(driver))
    output = " ".join((result.stdout + result.stderr).split())
    assert result.returncode != 0, output
    assert (
        "versions.yaml pins nvidia_driver.distro 535.261.03-1 from trixie; this host runs" in output
    )
    assert (
        f"Builds are pinned for: trixie. Add one for {release} under nvidia_driver.distro" in output
    )


@pytest.mark.skipif(os.geteuid() != 0, reason="the play becomes root")
def test_a_host_takes_the_build_pinned_for_its_own_release(tmp_path: Path) -> None:
    """An entry from another suite whose `releases` lists this machine's: the host's own build is
    taken, and named in the install request."""
    release = this_release()
    versions = yaml.safe_load((ROOT / "versions.yaml").read_text())
    distro = versions["nvidia_driver"]["distro"]
    own = {"version": distro["version"], "package_version": distro["source"]["package_version"]}
    distro.update(version="550.163.01", cuda="12.4", releases={release: own})
    distro["source"].update(suite="other", package_version="550.163.01-2")
    versions["containerd"]["source"]["suite"] = "other"
    versions["containerd"]["releases"] = {
        release: {"version": "1.6.20", "package_version": "1.6.20~ds1-1+deb12u3"}
    }
    other = tmp_path / "versions.yaml"
    other.write_text(yaml.safe_dump(versions))
    # The toolkit's and the node check's variables: what each would install and expect.
    output = variables_play(
        tmp_path,
        other,
        ["nvidia_container_toolkit", "gpu_node_check"],
        [
            {
                "ansible.builtin.include_role": {
                    "name": "nvidia_driver",
                    "tasks_from": "preflight",
                    "public": True,
                },
                "vars": {"nvidia_driver_version": None},
            },
            {
                "ansible.builtin.debug": {
                    "msg": "pin={{ _nvidia_driver_apt_version }} "
                    "containerd={{ nvidia_container_toolkit_containerd_package_version }} "
                    "expected={{ gpu_node_check_expected_driver }}"
                },
                "vars": {"gpu_node_check_driver_source": "distro"},
            },
        ],
    )
    assert "whose archive does not carry that build" not in output, output
    assert (
        f"pin={own['package_version']} containerd=1.6.20~ds1-1+deb12u3 expected={own['version']}"
        in output
    ), output


@pytest.mark.skipif(os.geteuid() != 0, reason="the play becomes root")
def test_upgrade_refuses_an_unsupported_host_before_draining_or_releasing_holds(
    tmp_path: Path,
) -> None:
    result = run_to_the_end(
        tmp_path,
        "playbooks/upgrade_driver.yml",
        releases_other_than_this_one("nvidia_driver"),
        "gpuinfra_k8s_node=true",
    )
    output = result.stdout + result.stderr
    assert result.returncode != 0, output
    assert "is not supported with nvidia_driver_source 'distro'" in " ".join(output.split())
    for task in ("Cordon and drain", "Release the holds", "Read the held NVIDIA packages"):
        assert f"TASK [{task}" not in output, task


@pytest.mark.skipif(os.geteuid() != 0, reason="the play becomes root")
def test_upgrade_refuses_a_bad_node_check_input_before_draining(tmp_path: Path) -> None:
    result = run_to_the_end(
        tmp_path,
        "playbooks/upgrade_driver.yml",
        "gpu_node_check_mig_mode=sometimes",
        "gpuinfra_k8s_node=true",
    )
    output = result.stdout + result.stderr
    assert result.returncode != 0, output
    assert "gpu_node_check_mig_mode must be one of: enabled, disabled, any" in output
    assert "TASK [Cordon and drain" not in output


@pytest.mark.skipif(os.geteuid() != 0, reason="the play becomes root")
def test_a_repository_url_with_a_newline_stops_the_toolkit_in_preflight(tmp_path: Path) -> None:
    url = "https://mirror.example.internal/deb /\ndeb [trusted=yes] http://evil.example/ /"
    value = json.dumps({"nvidia_container_toolkit_repo_url": url})
    result = preflight(tmp_path, value, playbook=str(toolkit_alone(tmp_path)))
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


def containerd_pins(tmp_path: Path, *extra_vars: str) -> str:
    """What the toolkit role would add and install for containerd on this machine."""
    return variables_play(
        tmp_path,
        ROOT / "versions.yaml",
        ["nvidia_container_toolkit"],
        [
            {
                "ansible.builtin.debug": {
                    "msg": "source=[{{ _nvidia_container_toolkit_containerd_sources_line }}] "
                    "package={{ _nvidia_container_toolkit_containerd_package }}="
                    "{{ nvidia_container_toolkit_containerd_package_version }} "
                    "paths={{ _nvidia_container_toolkit_paths | join(',') }}"
                }
            }
        ],
        *extra_vars,
    )


def test_dockers_source_and_pin_are_those_of_the_hosts_release(tmp_path: Path) -> None:
    release = this_release()
    if release != "bookworm":
        pytest.skip("the pins below are Debian 12's")
    docker = containerd_pins(tmp_path, "nvidia_container_toolkit_containerd_source=docker")
    assert (
        "source=[deb [signed-by=/etc/apt/keyrings/docker-containerd.asc] "
        "https://download.docker.com/linux/debian bookworm stable]" in docker
    ), docker
    assert "package=containerd.io=2.3.3-1~debian.12~bookworm" in docker
    assert "/etc/apt/sources.list.d/docker-containerd.list" in docker


def test_a_mirror_of_dockers_repository_takes_the_same_suite_and_pin(tmp_path: Path) -> None:
    if this_release() != "bookworm":
        pytest.skip("the pins below are Debian 12's")
    mirror = containerd_pins(
        tmp_path,
        "nvidia_container_toolkit_containerd_source=docker",
        "nvidia_container_toolkit_containerd_repo_url=https://mirror.example.internal/docker",
    )
    assert "https://mirror.example.internal/docker bookworm stable]" in mirror, mirror
    assert "package=containerd.io=2.3.3-1~debian.12~bookworm" in mirror


def test_the_distro_source_stays_on_debians_containerd_without_dockers_files(
    tmp_path: Path,
) -> None:
    if this_release() != "bookworm":
        pytest.skip("the pins below are Debian 12's")
    distro = containerd_pins(tmp_path)
    assert "package=containerd=1.6.20~ds1-1+deb12u3" in distro, distro
    assert "docker-containerd" not in distro.split("paths=")[1]


@pytest.mark.skipif(os.geteuid() != 0, reason="the play becomes root")
def test_a_bad_docker_repository_url_stops_the_toolkit_in_preflight(tmp_path: Path) -> None:
    url = "https://mirror.example.internal/debian bookworm stable\ndeb [trusted=yes] http://evil/ /"
    value = json.dumps(
        {
            "nvidia_container_toolkit_containerd_source": "docker",
            "nvidia_container_toolkit_containerd_repo_url": url,
        }
    )
    result = preflight(tmp_path, value, playbook=str(toolkit_alone(tmp_path)))
    assert result.returncode != 0
    output = " ".join((result.stdout + result.stderr).split())
    assert "nvidia_container_toolkit_containerd_repo_url:" in output
    assert "a repository URL is one plain http(s) URL" in output
    assert not Path("/etc/apt/sources.list.d/docker-containerd.list").exists()

"""Site inventories: role variables typed by the roles' argument_specs, versions by versions.yaml."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from gpuinfra import site
from gpuinfra.errors import ConfigError, UsageError

SPECS = {
    "argument_specs": {
        "main": {
            "options": {
                "nvidia_driver_source": {
                    "type": "str",
                    "choices": ["distro", "cuda_repo", "preinstalled"],
                },
                "nvidia_driver_version": {"type": "str"},
                "nvidia_driver_reboot": {"type": "bool"},
            }
        }
    }
}


@pytest.fixture
def roles(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    # Messages name files relative to where the user runs the command; the pins stay the
    # repository's (versions.yaml is found from GPUINFRA_ROOT, not from the working directory).
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("GPUINFRA_ROOT", str(Path(__file__).resolve().parents[2]))
    meta = tmp_path / "roles" / "nvidia_driver" / "meta"
    meta.mkdir(parents=True)
    (meta / "argument_specs.yml").write_text(yaml.safe_dump(SPECS))
    site.role_specs.cache_clear()
    return tmp_path / "roles"


def make_site(tmp_path: Path, group_vars: dict[str, object]) -> Path:
    root = tmp_path / "mysite"
    (root / "group_vars" / "gpu_nodes").mkdir(parents=True, exist_ok=True)
    inventory = {
        "all": {
            "children": {
                "gpu_nodes": {"hosts": {"node-a": {"ansible_host": "127.0.0.1"}, "node-b": None}}
            }
        }
    }
    (root / "hosts.yml").write_text(yaml.safe_dump(inventory))
    (root / "group_vars" / "gpu_nodes" / "driver.yml").write_text(yaml.safe_dump(group_vars))
    return root


def problems(tmp_path: Path, roles: Path, group_vars: dict[str, object]) -> list[str]:
    with pytest.raises(ConfigError) as info:
        site.load_site(make_site(tmp_path, group_vars), roles)
    return [str(p) for p in info.value.problems]


def test_valid_site_resolves_hosts_groups_and_vars(tmp_path: Path, roles: Path) -> None:
    loaded = site.load_site(
        make_site(tmp_path, {"nvidia_driver_source": "distro", "ansible_user": "root"}), roles
    )
    assert sorted(loaded.hosts) == ["node-a", "node-b"]
    assert loaded.groups["gpu_nodes"] == ["node-a", "node-b"]
    assert loaded.hosts["node-a"].vars["nvidia_driver_source"] == "distro"
    assert loaded.hosts["node-a"].vars["ansible_host"] == "127.0.0.1"


def test_misspelled_role_variable_gets_a_suggestion(tmp_path: Path, roles: Path) -> None:
    assert problems(tmp_path, roles, {"nvidia_driver_sorce": "distro"}) == [
        "mysite/group_vars/gpu_nodes/driver.yml: nvidia_driver_sorce: unknown variable of role "
        "'nvidia_driver'; did you mean 'nvidia_driver_source'?"
    ]


def test_unsupported_choice_lists_what_is_allowed(tmp_path: Path, roles: Path) -> None:
    assert problems(tmp_path, roles, {"nvidia_driver_source": "distr"}) == [
        "mysite/group_vars/gpu_nodes/driver.yml: nvidia_driver_source: 'distr' is not allowed; "
        "did you mean 'distro'? (allowed: 'cuda_repo', 'distro' or 'preinstalled')"
    ]


def test_wrong_type(tmp_path: Path, roles: Path) -> None:
    assert problems(tmp_path, roles, {"nvidia_driver_reboot": "yes please"}) == [
        "mysite/group_vars/gpu_nodes/driver.yml: nvidia_driver_reboot: expected bool, "
        "got 'yes please'"
    ]


def test_driver_version_must_be_pinned_in_versions_yaml(tmp_path: Path, roles: Path) -> None:
    [line] = problems(tmp_path, roles, {"nvidia_driver_version": "550.54.14"})
    assert line.startswith(
        "mysite/group_vars/gpu_nodes/driver.yml: nvidia_driver_version: '550.54.14' is not the "
        "version versions.yaml pins for source 'distro' (535.261.03 or 550.163.01)"
    )
    assert line.endswith("Bump versions.yaml, not the inventory")


def test_a_driver_version_pinned_for_another_release_is_accepted(
    tmp_path: Path, roles: Path
) -> None:
    # The site does not say which Debian release a host runs; the role holds it to its own.
    loaded = site.load_site(make_site(tmp_path, {"nvidia_driver_version": "550.163.01"}), roles)
    assert loaded.hosts["node-a"].vars["nvidia_driver_version"] == "550.163.01"


def test_foreign_variables_are_left_to_ansible(tmp_path: Path, roles: Path) -> None:
    loaded = site.load_site(make_site(tmp_path, {"ansible_port": 2201, "ntp_server": "x"}), roles)
    assert loaded.hosts["node-b"].vars["ansible_port"] == 2201


def test_missing_site_suggests_known_ones(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="no site at"):
        site.load_site(tmp_path / "nope")


def test_list_choices_apply_to_each_element(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    meta = tmp_path / "roles" / "nvidia_container_toolkit" / "meta"
    meta.mkdir(parents=True)
    spec = {"type": "list", "elements": "str", "choices": ["containerd", "docker"]}
    document = {
        "argument_specs": {"main": {"options": {"nvidia_container_toolkit_runtimes": spec}}}
    }
    (meta / "argument_specs.yml").write_text(yaml.safe_dump(document))
    site.role_specs.cache_clear()
    roles_dir = tmp_path / "roles"
    ok = make_site(tmp_path, {"nvidia_container_toolkit_runtimes": ["containerd", "docker"]})
    assert site.load_site(ok, roles_dir).hosts["node-a"].vars["nvidia_container_toolkit_runtimes"]
    bad = make_site(tmp_path, {"nvidia_container_toolkit_runtimes": ["containerd", "dokcer"]})
    with pytest.raises(ConfigError, match="'dokcer' is not allowed; did you mean 'docker'"):
        site.load_site(bad, roles_dir)

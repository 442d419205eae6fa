"""Site inventories: role variables typed by the roles' argument_specs, versions by versions.yaml."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuinfra import addons, site
from gpuinfra.errors import ConfigError, UsageError
from tests.conftest import ROOT, run_cli, run_main

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


def one_problem(tmp_path: Path, roles: Path, group_vars: dict[str, object]) -> str:
    found = problems(tmp_path, roles, group_vars)
    assert len(found) == 1, found
    return found[0]


DRIVER_YML = "mysite/group_vars/gpu_nodes/driver.yml"


@pytest.mark.parametrize("port", ["abc", "22x", "70000", 70000, 0, 22.5, True, [22]])
def test_a_port_that_is_no_tcp_port_is_refused(tmp_path: Path, roles: Path, port: object) -> None:
    line = one_problem(tmp_path, roles, {"ansible_port": port})
    assert line.startswith(f"{DRIVER_YML}: ansible_port: "), line
    assert line.endswith("(allowed: 1 to 65535; a TCP port)"), line


def test_a_port_ansible_converts_is_accepted_as_the_number(tmp_path: Path, roles: Path) -> None:
    loaded = site.load_site(make_site(tmp_path, {"ansible_port": "2201"}), roles)
    assert loaded.hosts["node-a"].vars["ansible_port"] == 2201


@pytest.mark.parametrize(
    ("value", "node"),
    [(True, True), ("yes", True), ("On", True), (1, True), ("1", True), (False, False),
     ("no", False), (0, False)],
)  # fmt: skip
def test_k8s_node_is_read_as_ansibles_bool_filter_reads_it(
    tmp_path: Path, roles: Path, value: object, node: bool
) -> None:
    """The playbooks read it with `| bool`: what the filter reads as true makes a node."""
    loaded = site.load_site(make_site(tmp_path, {"gpuinfra_k8s_node": value}), roles)
    assert loaded.hosts["node-a"].vars["gpuinfra_k8s_node"] is node


@pytest.mark.parametrize("value", ["maybe", "y", "t", 2, 1.0, [True]])
def test_k8s_node_the_bool_filter_would_guess_is_refused(
    tmp_path: Path, roles: Path, value: object
) -> None:
    line = one_problem(tmp_path, roles, {"gpuinfra_k8s_node": value})
    assert line.startswith(f"{DRIVER_YML}: gpuinfra_k8s_node: expected a boolean, got "), line
    assert "(allowed: true or false;" in line


@pytest.mark.parametrize(
    ("key", "meant"),
    [
        ("gpuinfra_k8s_nod", "gpuinfra_k8s_node"),
        ("gpuinfra_enviroment", "gpuinfra_environment"),
        ("gpuinfra_kubeconfig_hots", "gpuinfra_kubeconfig_host"),
        ("gpuinfra_upgrade_reboots", "gpuinfra_upgrade_reboot"),
    ],
)
def test_a_misspelt_gpuinfra_variable_gets_a_suggestion(
    tmp_path: Path, roles: Path, key: str, meant: str
) -> None:
    assert one_problem(tmp_path, roles, {key: True}) == (
        f"{DRIVER_YML}: {key}: unknown variable: no gpuinfra playbook or role reads it; "
        f"did you mean '{meant}'?"
    )


def test_an_unknown_gpuinfra_variable_lists_the_known_ones(tmp_path: Path, roles: Path) -> None:
    line = one_problem(tmp_path, roles, {"gpuinfra_colour": "blue"})
    assert line.startswith(
        f"{DRIVER_YML}: gpuinfra_colour: unknown variable: no gpuinfra playbook or role reads it "
        "(known: 'gpuinfra_check_fail_on_error', "
    ), line


def test_a_misspelt_environment_cannot_escape_the_prod_rules(tmp_path: Path, roles: Path) -> None:
    line = one_problem(tmp_path, roles, {"gpuinfra_enviroment": "prod"})
    assert "did you mean 'gpuinfra_environment'?" in line
    assert one_problem(tmp_path, roles, {"gpuinfra_environment": "prd"}) == (
        f"{DRIVER_YML}: gpuinfra_environment: 'prd' is not an environment "
        "(allowed: dev, staging, prod)"
    )


@pytest.mark.parametrize(
    "key",
    ["gpuinfra_upgrade_serial", "gpuinfra_upgrade_max_fail_percentage", "gpuinfra_check_hosts"],
)
def test_a_play_keyword_variable_in_the_inventory_says_to_pass_it_with_e(
    tmp_path: Path, roles: Path, key: str
) -> None:
    line = one_problem(tmp_path, roles, {key: 1})
    assert line.startswith(f"{DRIVER_YML}: {key}: playbooks/"), line
    assert line.endswith("which inventory variables never reach; pass it with -e"), line


@pytest.mark.parametrize(
    ("key", "meant"),
    [
        ("ansible_hostt", "ansible_host"),
        ("ansible_prot", "ansible_port"),
        ("ansible_usr", "ansible_user"),
        ("ansible_pyhton_interpreter", "ansible_python_interpreter"),
        ("ansible_ssh_private_keyfile", "ansible_ssh_private_key_file"),
        ("ansible_become_passwd", "ansible_become_password"),
        ("ansible_sshprivatekeyfile", "ansible_ssh_private_key_file"),
    ],
)
def test_a_misspelt_ansible_connection_variable_gets_a_suggestion(
    tmp_path: Path, roles: Path, key: str, meant: str
) -> None:
    assert one_problem(tmp_path, roles, {key: "x"}) == (
        f"{DRIVER_YML}: {key}: not a variable Ansible reads, so it would be ignored (allowed: "
        f"the variables Ansible reads; did you mean '{meant}'?)"
    )


def _ansible_core_variables() -> set[str]:
    """Every variable ansible-core's connection, become and shell plugins document, its
    connection variable mapping and its base configuration read."""
    import sys

    from ansible import constants
    from ansible.plugins import loader
    from ansible.utils.plugin_docs import get_docstring

    loader.init_plugin_loader()
    names: set[str] = set()
    for names_of in constants.MAGIC_VARIABLE_MAPPING.values():
        names.update(names_of)
    for definition in constants.config.get_configuration_definitions().values():
        names.update(v["name"] for v in definition.get("vars") or [])
    for plugins in (loader.connection_loader, loader.become_loader, loader.shell_loader):
        for plugin in plugins.all(class_only=True):
            path = sys.modules[plugin.__module__].__file__
            doc = get_docstring(path, fragment_loader=loader.fragment_loader)[0] or {}
            for option in (doc.get("options") or {}).values():
                names.update(v["name"] for v in option.get("vars") or [])
    return {str(n) for n in names if n.startswith("ansible_")}


def test_every_variable_ansible_core_reads_is_accepted(tmp_path: Path, roles: Path) -> None:
    known = _ansible_core_variables()
    assert {"ansible_ssh_host", "ansible_become_pass", "ansible_psrp_port"} <= known
    values: dict[str, object] = dict.fromkeys(sorted(known), "x")
    values.update(ansible_port=22, ansible_ssh_port=22)  # typed: a number
    loaded = site.load_site(make_site(tmp_path, values), roles)
    assert set(loaded.hosts["node-a"].vars) >= known


def test_a_users_own_variables_are_left_alone(tmp_path: Path, roles: Path) -> None:
    mine = {
        "ntp_server": "x",
        "nvidia_drvier_mirror": "x",  # no prefix of gpuinfra's: a user's own, however close
        "ansible_hostname": "x",  # a fact, four edits from ansible_host
        "ansible_lxd_host": "x",  # a collection plugin's own
        "ansible_perl_interpreter": "/usr/bin/perl",
    }
    loaded = site.load_site(make_site(tmp_path, mine), roles)
    assert loaded.hosts["node-b"].vars["ntp_server"] == "x"


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


@pytest.mark.parametrize(
    ("file", "old", "new", "key"),
    [
        ("hosts.yml", "gpu-node-01.example.internal\n", "gpu-node-01.example.internal\n"
         "      ansible_port: abc\n", "ansible_port"),
        ("group_vars/all/connection.yml", "ansible_user: ops", 'ansible_port: "70000"',
         "ansible_port"),
        ("group_vars/gpu_nodes/kubernetes.yml", "gpuinfra_k8s_node: true",
         "gpuinfra_k8s_nod: true", "gpuinfra_k8s_nod"),
        ("group_vars/gpu_nodes/kubernetes.yml", "gpuinfra_k8s_node: true",
         "gpuinfra_k8s_node: maybe", "gpuinfra_k8s_node"),
        ("group_vars/all/connection.yml", "ansible_user: ops",
         "ansible_user: ops\ngpuinfra_enviroment: prod", "gpuinfra_enviroment"),
        ("group_vars/all/connection.yml", "ansible_user: ops", "ansible_usr: ops", "ansible_usr"),
    ],
)  # fmt: skip
def test_config_check_refuses_a_site_variable_in_one_line(
    tmp_path: Path, file: str, old: str, new: str, key: str
) -> None:
    site_dir = tmp_path / "mysite"
    shutil.copytree(ROOT / "inventory" / "example", site_dir)
    path = site_dir / file
    assert old in path.read_text()
    path.write_text(path.read_text().replace(old, new, 1))
    before = _tree(tmp_path)
    result = run_cli("config", "check", "--site", str(site_dir))
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert (result.code, len(lines)) == (2, 1), result.stderr
    assert lines[0].startswith(f"error: {site_dir / file}: {key}: "), lines[0]
    assert result.stdout == ""
    assert _tree(tmp_path) == before


def test_a_k8s_node_written_as_one_is_a_kubernetes_node(tmp_path: Path) -> None:
    """`1 | bool` is true: the integrity check counts the hosts as nodes, as the roles do."""
    site_dir = tmp_path / "mysite"
    shutil.copytree(ROOT / "inventory" / "example", site_dir)
    path = site_dir / "group_vars" / "gpu_nodes" / "kubernetes.yml"
    path.write_text(path.read_text().replace("gpuinfra_k8s_node: true", "gpuinfra_k8s_node: 1"))
    result = run_cli("config", "check", "--site", str(site_dir))
    assert result.code == 0, result.stderr
    assert "site mysite: valid (2 hosts)" in result.stdout


class _HostVars(dict[str, object]):
    """A host's variables as Ansible's hostvars hand them out: reading one templates it."""

    def __init__(self, variables: dict[str, object]) -> None:
        super().__init__(variables)
        self.read: list[str] = []

    def __getitem__(self, key: str) -> object:
        self.read.append(key)
        return super().__getitem__(key)


def test_a_resolved_site_holds_the_declared_variables_as_ansible_converts_them(
    roles: Path,
) -> None:
    (roles / "kueue" / "meta").mkdir(parents=True)
    (roles / "kueue" / "meta" / "argument_specs.yml").write_text(
        yaml.safe_dump({"argument_specs": {"main": {"options": {"kueue_teams": {"type": "list"}}}}})
    )
    node = _HostVars(
        {
            "nvidia_driver_reboot": "yes",
            "gpuinfra_k8s_node": "on",
            "kueue_teams": ["ml"],
            "nvidia_driver_result": {"rc": 0},
            "ansible_facts": {},
            "inventory_hostname": "node-a",
        }
    )
    resolved = site.resolved_site("mysite", {"node-a": node}, roles_dir=roles, skip=("kueue",))
    assert resolved.hosts["node-a"].vars == {
        "nvidia_driver_reboot": True,
        "gpuinfra_k8s_node": True,
    }
    # Facts, registered results and the skipped role's variables are not even read.
    assert sorted(node.read) == ["gpuinfra_k8s_node", "nvidia_driver_reboot"]


def test_a_resolved_site_refuses_what_load_site_refuses_naming_the_host(roles: Path) -> None:
    hosts = {
        "node-a": {"nvidia_driver_source": "distr"},
        "node-b": {"gpuinfra_environment": "production"},
    }
    with pytest.raises(ConfigError) as caught:
        site.resolved_site("mysite", hosts, roles_dir=roles)
    assert caught.value.lines() == [
        "variables of host node-a: nvidia_driver_source: 'distr' is not allowed; did you mean "
        "'distro'? (allowed: 'cuda_repo', 'distro' or 'preinstalled')",
        "variables of host node-b: gpuinfra_environment: 'production' is not an environment "
        "(allowed: dev, staging, prod)",
    ]


def test_variables_resolve_with_ansibles_precedence(tmp_path: Path) -> None:
    """Each pair of sources sets one variable; gpuinfra must read the value Ansible reads, for a
    host and for the implicit localhost the add-on play runs on."""
    root = tmp_path / "mysite"
    (root / "group_vars" / "g").mkdir(parents=True)
    (root / "host_vars").mkdir()
    inventory = {
        "all": {
            "vars": {"v_all_file": "inline all", "v_inline": "inline all"},
            "children": {
                "g": {
                    "vars": {
                        "v_file_all": "inline g",
                        "v_file_g": "inline g",
                        "v_inline": "inline g",
                    },
                    "hosts": {
                        "h1": {"v_host": "inline host", "v_inline_host": "inline host"},
                    },
                    "children": {"g_child": {"hosts": {"h1": None}}},
                },
                # Groups of one depth: by ansible_group_priority, then by name.
                "b": {"hosts": {"h1": None}},
                "a": {"hosts": {"h1": None}},
                "p_hi": {"vars": {"ansible_group_priority": 10}, "hosts": {"h1": None}},
                "p_lo": {"hosts": {"h1": None}},
            },
        }
    }
    (root / "hosts.yml").write_text(yaml.safe_dump(inventory))
    (root / "group_vars" / "all.yml").write_text(
        yaml.safe_dump({"v_all_file": "file all", "v_file_all": "file all", "v_all_g": "file all"})
    )
    (root / "group_vars" / "g" / "main.yml").write_text(
        yaml.safe_dump({"v_file_g": "file g", "v_all_g": "file g", "v_inline_host": "file g"})
    )
    (root / "host_vars" / "h1.yml").write_text(yaml.safe_dump({"v_host": "file host"}))
    # The implicit localhost, listed nowhere, still reads a host_vars file of its own.
    (root / "host_vars" / "localhost.yml").write_text(
        yaml.safe_dump({"v_all_file": "file localhost", "v_local": "file localhost"})
    )
    for group, name, value in (
        ("g_child", "v_depth", "child"),
        ("a", "v_sibling", "a"),
        ("b", "v_sibling", "b"),
        ("p_hi", "v_priority", "hi"),
        ("p_lo", "v_priority", "lo"),
    ):
        (root / "group_vars" / f"{group}.yml").write_text(yaml.safe_dump({name: value}))
    (root / "group_vars" / "g" / "depth.yml").write_text(yaml.safe_dump({"v_depth": "g"}))
    names = sorted(
        {"v_all_file", "v_inline", "v_file_all", "v_file_g", "v_all_g", "v_host", "v_inline_host"}
        | {"v_depth", "v_sibling", "v_priority", "v_local"}
    )
    loaded = site.load_site(root)
    assert loaded.controller is not None
    ansible = Path(sys.executable).parent / "ansible"
    for host, ours in (("h1", loaded.hosts["h1"].vars), ("localhost", loaded.controller.vars)):
        expression = "{{ [" + ", ".join(f"{n} | default('-')" for n in names) + "] }}"
        result = subprocess.run(
            [
                *(str(ansible), "-i", str(root / "hosts.yml"), host, "-c", "local", "-o"),
                *("-m", "debug", "-a", f"msg={expression}"),
            ],
            capture_output=True,
            text=True,
            check=True,
            env={**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg")},
            cwd=tmp_path,
        )
        theirs = json.loads(result.stdout.split("=>", 1)[1])["msg"]
        assert dict(zip(names, theirs, strict=True)) == {n: ours.get(n, "-") for n in names}, host
    # The pairs where the inventory file's own vars lose to a vars file of a parent group.
    assert loaded.hosts["h1"].vars["v_file_all"] == "file all"
    assert loaded.hosts["h1"].vars["v_inline_host"] == "inline host"
    assert loaded.controller.vars["v_inline"] == "inline all"
    assert loaded.controller.vars["v_all_file"] == "file localhost"
    assert "v_local" not in loaded.hosts["h1"].vars
    assert [loaded.hosts["h1"].vars[n] for n in ("v_depth", "v_sibling", "v_priority")] == [
        "child",
        "b",
        "hi",
    ]


@pytest.mark.parametrize(
    ("where", "setting", "message"),
    [
        (
            "group_vars/gpu_nodes/kueue.yml",
            "kueue_enabled: false\n",
            "kueue_enabled: differs from inventory/mysite/group_vars/all/kueue.yml, which the "
            "add-on play reads on the controller (allowed: add-on settings once, in group_vars/all)",
        ),
        (
            "host_vars/gpu-node-01.yml",
            "loki_storage_class: fast\n",
            "loki_storage_class: an add-on setting the add-on play never reads: it runs on the "
            "controller, which sees group_vars/all, host_vars/localhost and hosts.yml's all: vars "
            "only (allowed: add-on settings in group_vars/all)",
        ),
    ],
)
def test_an_add_on_setting_the_add_on_play_does_not_read_is_refused(
    tmp_path: Path, where: str, setting: str, message: str
) -> None:
    # The plan would take the hosts' value while the play, on the controller, applies another.
    root = tmp_path / "repo"
    shutil.copytree(ROOT / "inventory" / "example", root / "inventory" / "mysite")
    for name in ("versions.yaml", "Pulumi.yaml"):
        shutil.copy(ROOT / name, root / name)
    (root / "inventory" / "mysite" / where).parent.mkdir(parents=True, exist_ok=True)
    (root / "inventory" / "mysite" / where).write_text(setting)
    result = run_cli("config", "check", "--site", "inventory/mysite", root=root, cwd=root)
    assert result.code == 2, result.stdout + result.stderr
    assert result.stderr.splitlines() == [f"error: inventory/mysite/{where}: {message}"]
    # The same value as group_vars/all's is what the play reads too.
    (root / "inventory" / "mysite" / where).write_text("kueue_enabled: true\n")
    assert run_cli("config", "check", "--site", "inventory/mysite", root=root, cwd=root).code == 0


def test_host_vars_of_localhost_are_the_controllers(tmp_path: Path) -> None:
    # Ansible gives host_vars/localhost.yml to the implicit localhost the add-on play runs on,
    # so an add-on setting there is one the play applies; no node host reads it.
    root = tmp_path / "repo"
    shutil.copytree(ROOT / "inventory" / "example", root / "inventory" / "mysite")
    for name in ("versions.yaml", "Pulumi.yaml"):
        shutil.copy(ROOT / name, root / name)
    (root / "inventory" / "mysite" / "host_vars").mkdir(exist_ok=True)
    (root / "inventory" / "mysite" / "host_vars" / "localhost.yml").write_text(
        "loki_storage_class: fast\n"
    )
    result = run_cli("config", "check", "--site", "inventory/mysite", root=root, cwd=root)
    assert result.code == 0, result.stdout + result.stderr
    loaded = site.load_site(root / "inventory" / "mysite")
    assert addons.settings_from_site(loaded).loki.storage_class == "fast"
    assert all("loki_storage_class" not in host.vars for host in loaded.hosts.values())


def test_a_site_with_both_hosts_yml_and_hosts_yaml_is_refused_naming_both(tmp_path: Path) -> None:
    shutil.copytree(ROOT / "inventory" / "example", tmp_path / "mysite")
    shutil.copy(tmp_path / "mysite" / "hosts.yml", tmp_path / "mysite" / "hosts.yaml")
    before = _tree(tmp_path)
    result = run_cli("config", "check", "--site", "mysite", root=ROOT, cwd=tmp_path)
    assert result.code == 2
    assert result.stderr.splitlines() == [
        "error: mysite: both hosts.yml and hosts.yaml in the site directory, and Ansible given "
        "the directory would read both (allowed: one of them; merge them into hosts.yml)"
    ]
    assert result.stdout == ""
    assert _tree(tmp_path) == before


@pytest.mark.parametrize("folder", ["group_vars", "host_vars"])
def test_a_vars_folder_written_as_a_file_is_refused(tmp_path: Path, folder: str) -> None:
    """Ansible skips a group_vars that is a file, and every variable in it."""
    shutil.copytree(ROOT / "inventory" / "example", tmp_path / "mysite")
    if folder == "group_vars":
        shutil.rmtree(tmp_path / "mysite" / "group_vars")
    (tmp_path / "mysite" / folder).write_text("nvidia_driver_source: distro\n")
    kind = folder.split("_")[0]
    result = run_cli("config", "check", "--site", "mysite", root=ROOT, cwd=tmp_path)
    assert result.code == 2
    assert result.stderr.splitlines() == [
        f"error: mysite/{folder}: a file, and Ansible reads {folder} only as a directory "
        f"(allowed: a directory of <{kind} name>.yml files or <{kind} name>/ folders)"
    ]
    assert result.stdout == ""


def test_group_vars_of_a_group_as_one_file_is_checked(tmp_path: Path) -> None:
    shutil.copytree(ROOT / "inventory" / "example", tmp_path / "mysite")
    (tmp_path / "mysite" / "group_vars" / "gpu_nodes.yml").write_text("nvidia_driver_sorce: x\n")
    result = run_cli("config", "check", "--site", "mysite", root=ROOT, cwd=tmp_path)
    assert result.code == 2
    assert result.stderr.splitlines() == [
        "error: mysite/group_vars/gpu_nodes.yml: nvidia_driver_sorce: unknown variable of role "
        "'nvidia_driver'; did you mean 'nvidia_driver_source'?"
    ]


@pytest.mark.parametrize(
    "address", [" 10.0.0.1", "10.0.0.1 ", "10.0.0.1\n", "gpu node 01"], ids=repr
)
def test_an_address_with_whitespace_is_refused(tmp_path: Path, address: str) -> None:
    shutil.copytree(ROOT / "inventory" / "example", tmp_path / "mysite")
    hosts = tmp_path / "mysite" / "hosts.yml"
    text = hosts.read_text()
    hosts.write_text(
        text.replace(
            "ansible_host: gpu-node-01.example.internal", f"ansible_host: {address!r}"
        ).replace("'", '"')
    )
    result = run_cli("config", "check", "--site", "mysite", root=ROOT, cwd=tmp_path)
    assert result.code == 2
    assert result.stderr.splitlines() == [
        f"error: mysite/hosts.yml: ansible_host: host gpu-node-01: {address!r} holds whitespace "
        "(allowed: a host name or an IP address, without spaces or newlines)"
    ]


LOOPS = {
    "itself": (
        "gpu_nodes:\n  hosts: {a: {}}\n  children:\n    gpu_nodes: {}\n",
        "gpu_nodes -> gpu_nodes",
    ),
    "through-another": (
        "gpu_nodes:\n  hosts: {a: {}}\n  children:\n    racks:\n      children:\n"
        "        gpu_nodes: {}\n",
        "gpu_nodes -> racks -> gpu_nodes",
    ),
    "across-entries": (
        "gpu_nodes:\n  hosts: {a: {}}\n  children:\n    racks: {}\nracks:\n  children:\n"
        "    gpu_nodes: {}\n",
        "gpu_nodes -> racks -> gpu_nodes",
    ),
}


@pytest.mark.parametrize("case", sorted(LOOPS))
def test_a_group_that_is_its_own_child_is_refused(tmp_path: Path, case: str) -> None:
    """Ansible refuses such an inventory whole and runs on the implicit localhost alone."""
    text, chain = LOOPS[case]
    shutil.copytree(ROOT / "inventory" / "example", tmp_path / "mysite")
    (tmp_path / "mysite" / "hosts.yml").write_text(text)
    result = run_cli("config", "check", "--site", "mysite", root=ROOT, cwd=tmp_path)
    assert result.code == 2
    assert result.stderr.splitlines() == [
        f"error: mysite/hosts.yml: group 'gpu_nodes' is its own child ({chain}), and Ansible "
        "refuses the whole inventory (allowed: children without loops)"
    ]


def _site_commands() -> list[list[str]]:
    import typer

    from gpuinfra.cli import app

    found = []

    def walk(command: Any, path: list[str]) -> None:
        if any("--site" in getattr(p, "opts", ()) for p in command.params):
            found.append(path)
        for name, sub in getattr(command, "commands", {}).items():
            walk(sub, [*path, name])

    walk(typer.main.get_command(app), [])
    return found


@pytest.mark.parametrize("command", _site_commands(), ids=" ".join)
def test_an_empty_site_option_is_refused_not_read_as_the_current_directory(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    command: list[str],
) -> None:
    # An unset shell variable, given where the user stands in a site of their own.
    shutil.copytree(ROOT / "inventory" / "example", tmp_path / "mysite")
    monkeypatch.chdir(tmp_path / "mysite")
    monkeypatch.setenv("GPUINFRA_ROOT", str(ROOT))
    required = {"diff": ["--base", "HEAD"]}.get(command[0], [])
    code, out, err = run_main(capsys, *command, *required, "--site", "")
    name = " ".join(["gpuinfra", *command])
    expected = (
        f"error: {name}: invalid value for '--site': '' is empty (allowed: a site inventory "
        f"directory, e.g. inventory/example) (see {name} --help)"
    )
    if command == ["diff"]:  # diff takes a site by name
        expected = (
            "error: --site '': not a site name (allowed: a directory name under inventory/, at "
            "most 255 bytes)"
        )
    assert (code, out, err.splitlines()) == (2, "", [expected])


def test_config_check_counts_one_host_as_one(tmp_path: Path) -> None:
    from gpuinfra import lab

    shared_vars = tmp_path / "inventory" / "lab" / "group_vars"
    shared_vars.parent.mkdir(parents=True)
    shared_vars.symlink_to(ROOT / "inventory" / "lab" / "group_vars")
    settings = lab.Settings(prefix="unit", port_base=2600, root=tmp_path)
    path = lab.write_inventory(
        settings, [lab.Host("unit-1", 2601, "running")], "http://127.0.0.1:8000/", "AB" * 20
    )
    result = run_cli("config", "check", "--site", str(path.parent), root=ROOT)
    assert result.code == 0, result.stderr
    assert result.stdout.splitlines()[-1] == "site inventory: valid (1 host)"


KEEPALIVE_WARNING = (
    "ansible_ssh_args: drops ansible.cfg's SSH keepalives, so a host that stops answering holds "
    "the run instead of failing in 60 s; add -o ServerAliveInterval=15 -o ServerAliveCountMax=4 "
    "(or use ansible_ssh_common_args, which adds to them)"
)


@pytest.mark.parametrize(
    ("connection", "warned"),
    [
        ({"ansible_ssh_args": "-o ControlMaster=auto -o ControlPersist=60s"}, True),
        ({"ansible_ssh_args": "-o ServerAliveInterval=0 -o ServerAliveCountMax=4"}, True),
        ({"ansible_ssh_args": "-o ServerAliveInterval=30 -o ServerAliveCountMax=3"}, False),
        ({"ansible_ssh_args": "-oserveraliveinterval 10"}, False),
        ({"ansible_ssh_args": "{{ site_ssh_args }}"}, False),
        ({"ansible_ssh_common_args": "-o ProxyJump=bastion"}, False),
        ({}, False),
    ],
    ids=["no-keepalive", "keepalive-off", "keepalive", "lowercase", "templated", "common", "none"],
)
def test_ssh_args_that_drop_the_keepalives_are_warned_once_per_file(
    tmp_path: Path, roles: Path, connection: dict[str, object], warned: bool
) -> None:
    checked = site.load_site(make_site(tmp_path, connection), roles)
    # Both hosts take the value from the same file: one warning names it.
    expected = [f"mysite/group_vars/gpu_nodes/driver.yml: {KEEPALIVE_WARNING}"] if warned else []
    assert [str(p) for p in site.keepalive_warnings(checked)] == expected


ENV_KEEPALIVE_WARNING = (
    "the environment: ANSIBLE_SSH_ARGS: drops ansible.cfg's SSH keepalives, so a host that stops "
    "answering holds the run instead of failing in 60 s; add -o ServerAliveInterval=15 "
    "-o ServerAliveCountMax=4 (or use ANSIBLE_SSH_COMMON_ARGS, which adds to them)"
)


@pytest.mark.parametrize(
    ("connection", "environ", "warned"),
    [
        ({}, {"ANSIBLE_SSH_ARGS": "-o ControlMaster=auto"}, True),
        ({}, {"ANSIBLE_SSH_ARGS": ""}, True),
        ({}, {"ANSIBLE_SSH_ARGS": "-o ServerAliveInterval=20"}, False),
        ({}, {"ANSIBLE_SSH_COMMON_ARGS": "-o ProxyJump=bastion"}, False),
        # The inventory's value wins over the environment's for every host: nothing reads it.
        ({"ansible_ssh_args": "-o ServerAliveInterval=15"}, {"ANSIBLE_SSH_ARGS": "-o X=y"}, False),
    ],
    ids=["no-keepalive", "empty", "keepalive", "common", "inventory-wins"],
)
def test_ssh_args_from_the_environment_that_drop_the_keepalives_are_warned(
    tmp_path: Path,
    roles: Path,
    connection: dict[str, object],
    environ: dict[str, str],
    warned: bool,
) -> None:
    checked = site.load_site(make_site(tmp_path, connection), roles)
    expected = [ENV_KEEPALIVE_WARNING] if warned else []
    assert [str(p) for p in site.keepalive_warnings(checked, environ)] == expected


def test_converge_warns_of_ssh_args_from_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shutil.copytree(ROOT / "inventory" / "example", tmp_path / "mysite")
    monkeypatch.setenv("ANSIBLE_SSH_ARGS", "-o ControlMaster=no")
    converged = run_cli(
        "converge", "--site", "mysite", "--limit", "nowhere", root=ROOT, cwd=tmp_path
    )
    assert converged.code == 2
    assert converged.stdout.splitlines()[0] == f"warning: {ENV_KEEPALIVE_WARNING}"


def test_config_check_and_converge_warn_of_ssh_args_without_keepalives(tmp_path: Path) -> None:
    site_dir = tmp_path / "mysite"
    shutil.copytree(ROOT / "inventory" / "example", site_dir)
    connection = site_dir / "group_vars" / "all" / "connection.yml"
    connection.write_text(connection.read_text() + "ansible_ssh_args: -o ControlMaster=no\n")
    line = f"warning: mysite/group_vars/all/connection.yml: {KEEPALIVE_WARNING}"

    checked = run_cli("config", "check", "--site", "mysite", root=ROOT, cwd=tmp_path)
    assert checked.code == 0, checked.stderr
    assert line in checked.stdout.splitlines()
    assert "site mysite: valid (2 hosts)" in checked.stdout

    # converge warns before it touches a host: here it stops at the next check, the limit.
    converged = run_cli(
        "converge", "--site", "mysite", "--limit", "nowhere", root=ROOT, cwd=tmp_path
    )
    assert converged.code == 2
    assert converged.stdout.splitlines()[0] == line


@pytest.mark.parametrize("value", [0, -1, 3601, "2m", True])
def test_a_kubernetes_timeout_that_would_not_bound_a_call_is_refused(
    tmp_path: Path, roles: Path, value: object
) -> None:
    # 0 is Ansible's "no timeout" for a task: a call to a silent API server would wait for good.
    # The add-on roles' specs declare the variable; the node roles read it too.
    line = one_problem(tmp_path, ROOT / "roles", {"gpuinfra_kubernetes_timeout": value})
    assert line.startswith(f"{DRIVER_YML}: gpuinfra_kubernetes_timeout: "), line
    assert line.endswith("(allowed: 1 to 3600; seconds, at most an hour)"), line


def test_a_kubernetes_timeout_in_seconds_is_accepted(tmp_path: Path, roles: Path) -> None:
    loaded = site.load_site(
        make_site(tmp_path, {"gpuinfra_kubernetes_timeout": "30"}), ROOT / "roles"
    )
    assert loaded.hosts["node-a"].vars["gpuinfra_kubernetes_timeout"] == 30


def _site_with_neighbours(tmp_path: Path) -> Path:
    """A site whose directory holds, beside hosts.yml, what Ansible skips and one inventory more."""
    root = make_site(tmp_path, {})
    one_host = {"all": {"hosts": {"{name}": {"ansible_host": "127.0.0.1"}}}}
    for name in ("README.md", "notes.txt", "hosts.yml.bak", "old.orig", ".hidden.yml"):
        (root / name).write_text(yaml.safe_dump(one_host).replace("{name}", f"from-{name}"))
    (root / "tuning").mkdir()
    (root / "tuning" / "resnet50.yml").write_text(yaml.safe_dump(one_host))
    (root / "extra.yml").write_text(yaml.safe_dump(one_host).replace("{name}", "node-x"))
    return root


def test_an_inventory_file_beside_hosts_yml_is_refused_naming_it(
    tmp_path: Path, roles: Path
) -> None:
    root = _site_with_neighbours(tmp_path)
    with pytest.raises(ConfigError) as info:
        site.load_site(root, roles)
    assert [str(p) for p in info.value.problems] == [
        "mysite/extra.yml: Ansible given the site directory reads it as one more inventory, "
        "which converge and config check do not (allowed beside hosts.yml: group_vars/, "
        "host_vars/ and files Ansible skips, such as *.md; move its hosts and groups into "
        "hosts.yml)"
    ]
    (root / "extra.yml").unlink()
    assert sorted(site.load_site(root, roles).hosts) == ["node-a", "node-b"]


def test_what_the_check_lets_beside_hosts_yml_is_what_ansible_skips(tmp_path: Path) -> None:
    """Ansible itself, given the directory, reads hosts.yml and extra.yml and nothing else."""
    root = _site_with_neighbours(tmp_path)
    listed = subprocess.run(
        [str(Path(sys.executable).parent / "ansible-inventory"), "-i", str(root), "--list"],
        cwd=ROOT,
        env={**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg")},
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    groups = json.loads(listed.stdout)
    hosts = {host for group in groups.values() for host in group.get("hosts", [])}
    assert sorted(hosts) == ["node-a", "node-b", "node-x"]
    from ansible import constants

    ansibles = (*constants.REJECT_EXTS, ".orig", ".cfg", ".retry")
    assert ansibles == site.ANSIBLE_SKIPPED_EXTENSIONS

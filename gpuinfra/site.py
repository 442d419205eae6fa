"""A bare-metal site: an Ansible inventory directory (hosts.yml, group_vars/, host_vars/).

Role variables are typed by the roles themselves: each ``roles/<role>/meta/argument_specs.yml``
declares its public variables with type and choices. A site file that sets a variable with a
role's prefix is checked against that spec, so a misspelled ``nvidia_driver_sorce`` is an error
with a suggestion instead of a silently ignored setting.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Callable, Collection, Iterator, Mapping
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from gpuinfra import inputs
from gpuinfra import versions as versions_mod
from gpuinfra.errors import ConfigError, Problem, UsageError, excerpt
from gpuinfra.loading import MAX_DEPTH, Vaulted, display_path, is_dir, is_file, list_dir, load_yaml
from gpuinfra.paths import repo_root
from gpuinfra.suggest import allowed, did_you_mean


@dataclass(frozen=True)
class VarSpec:
    role: str
    name: str
    type: str
    choices: tuple[Any, ...] = ()
    elements: str | None = None


@dataclass
class Host:
    name: str
    groups: list[str] = field(default_factory=list)
    vars: dict[str, Any] = field(default_factory=dict)
    # Which file set each variable last, to name it in messages.
    origin: dict[str, str] = field(default_factory=dict)


# The inventory file of a site directory, in the order they are looked for.
HOSTS_FILES = ("hosts.yml", "hosts.yaml")
# What Ansible given a site directory (``-i inventory/<site>``, as the README runs the plays)
# skips instead of reading it as one more inventory source: hidden entries, the vars folders,
# ansible.cfg's inventory_ignore_patterns (``tuning``) and ansible-core's default
# inventory_ignore_extensions (a unit test keeps the two lists equal).
ANSIBLE_SKIPPED_NAMES = ("host_vars", "group_vars", "vars_plugins", "tuning")
ANSIBLE_SKIPPED_EXTENSIONS = (
    ".pyc",
    ".pyo",
    ".swp",
    ".bak",
    "~",
    ".rpm",
    ".md",
    ".txt",
    ".rst",
    ".orig",
    ".cfg",
    ".retry",
)

ENVIRONMENTS = ("dev", "staging", "prod")
# The site-wide variable that names the environment a site serves, as a stack file's
# `gpuinfra:environment` does; prod makes a pin past its end of support an error.
ENVIRONMENT_VAR = "gpuinfra_environment"


@dataclass
class Site:
    name: str
    path: Path
    hosts: dict[str, Host]
    groups: dict[str, list[str]]
    # What the inventory gives the controller, the implicit localhost the add-on play runs on:
    # the vars of the group all (group_vars/all, hosts.yml's all: vars). None for a site read
    # from a play's resolved variables.
    controller: Host | None = None
    # The inventory file Ansible is given (hosts.yml or hosts.yaml); None for a resolved site.
    inventory: Path | None = None

    @property
    def environment(self) -> str | None:
        """The environment the site serves: prod when any host's is (a site may set it per
        group; its prod hosts decide)."""
        values = {
            str(h.vars[ENVIRONMENT_VAR]) for h in self.hosts.values() if ENVIRONMENT_VAR in h.vars
        }
        return next((e for e in reversed(ENVIRONMENTS) if e in values), None)

    def driver_sources(self) -> set[str]:
        return {str(h.vars.get("nvidia_driver_source", "distro")) for h in self.hosts.values()}

    def containerd_sources(self) -> set[str]:
        """Where the hosts' containerd comes from: the distribution's package or Docker's."""
        return {
            str(h.vars.get("nvidia_container_toolkit_containerd_source", "distro"))
            for h in self.hosts.values()
        }


@cache
def role_specs(roles_dir: Path | None = None) -> dict[str, dict[str, VarSpec]]:
    """Public variables of every role, from their argument_specs (the roles' own truth)."""
    roles_dir = roles_dir or repo_root() / "roles"
    specs: dict[str, dict[str, VarSpec]] = {}
    for spec_file in sorted(roles_dir.glob("*/meta/argument_specs.yml")):
        role = spec_file.parent.parent.name
        document = load_yaml(spec_file) or {}
        options = (document.get("argument_specs", {}).get("main", {}) or {}).get("options", {})
        specs[role] = {
            name: VarSpec(
                role=role,
                name=name,
                type=str(opt.get("type", "str")),
                choices=tuple(opt.get("choices", ()) or ()),
                elements=opt.get("elements"),
            )
            for name, opt in (options or {}).items()
        }
    return specs


# Ansible's own converters for argument_specs types: a site value is accepted where Ansible
# accepts it ("8" for an int, "yes" for a bool), with two exceptions: a boolean is never a
# number (Ansible would read ``true`` as 1) and a number is never a string (``535.10`` would
# become "535.1").
_TYPE_NAMES = ("str", "int", "bool", "float", "list", "dict", "path", "raw")


@cache
def _checkers() -> dict[str, Callable[[Any], Any]]:
    # Imported when a site is read: stack commands do not pay for Ansible's import.
    from ansible.module_utils.common import validation  # type: ignore[import-untyped]

    return {name: getattr(validation, f"check_type_{name}") for name in _TYPE_NAMES}


# Ranges Ansible's argument_specs cannot state, with the fact behind each.
BOUNDS: dict[str, tuple[int, int, str]] = {
    "gpu_node_check_expected_gpu_count": (
        0,
        16,
        "a host carries at most 16 GPUs (8 on an HGX board, 16 on the largest DGX)",
    ),
    "gpu_node_check_min_temperature_headroom_c": (0, 100, "degrees Celsius below the slowdown"),
    "gpu_node_check_min_power_headroom_pct": (0, 100, "a percentage"),
    "gpu_node_check_command_timeout": (1, 3600, "seconds, at most an hour"),
    "gpu_node_check_dcgm_diag_timeout": (1, 86400, "seconds, at most a day"),
    "nvidia_driver_reboot_timeout": (1, 86400, "seconds, at most a day"),
    "node_packages_lock_timeout": (0, 86400, "seconds, at most a day"),
    "node_packages_deadline": (1, 86400, "seconds, at most a day"),
    "node_packages_fetch_timeout": (1, 3600, "seconds, at most an hour"),
    "node_packages_fetch_retries": (0, 100, "tries"),
    # 0 would be Ansible's "no limit" for a task's timeout.
    "gpuinfra_kubernetes_timeout": (1, 3600, "seconds, at most an hour"),
    "ansible_port": (1, 65535, "a TCP port"),
    "ansible_ssh_port": (1, 65535, "a TCP port"),
}

# Ansible's ``bool`` filter, which the playbooks read gpuinfra's switches with
# (``gpuinfra_k8s_node | default(false) | bool``): these words in any case, booleans, 1 and 0.
# Anything else it guesses with a deprecation warning (``maybe`` and ``y`` as false, ``1.0`` as
# true), so a site that wrote ``maybe`` would silently not be a Kubernetes node.
BOOL_FILTER = "bool filter"
_BOOL_FILTER_TRUE = ("true", "yes", "on", "1")
_BOOL_FILTER_FALSE = ("false", "no", "off", "0")

# Variables no role's argument_specs declares that a site may set: the playbooks' own
# ``gpuinfra_*`` variables (README, "play-level variable") and the Ansible connection variables
# gpuinfra bounds. The add-on roles' shared ``gpuinfra_*`` options come from their specs.
SITE_VARS: dict[str, VarSpec] = {
    spec.name: spec
    for spec in (
        # Its value is checked on the merged host variables (_check_environment).
        VarSpec("site", ENVIRONMENT_VAR, "raw"),
        VarSpec("playbooks", "gpuinfra_k8s_node", BOOL_FILTER),
        VarSpec("playbooks", "gpuinfra_k8s_node_name", "str"),
        VarSpec("playbooks", "gpuinfra_kubeconfig_host", "str"),
        VarSpec("playbooks", "gpuinfra_kubeconfig", "path"),
        VarSpec("playbooks", "gpuinfra_check_fleet_groups", "list", elements="str"),
        VarSpec("playbooks", "gpuinfra_check_fleet_fail_on_drift", BOOL_FILTER),
        VarSpec("playbooks", "gpuinfra_check_fail_on_error", BOOL_FILTER),
        # upgrade_driver.yml hands it to nvidia_driver_reboot, a bool of the driver role's spec.
        VarSpec("playbooks", "gpuinfra_upgrade_reboot", "bool"),
        VarSpec("ansible", "ansible_port", "int"),
        VarSpec("ansible", "ansible_ssh_port", "int"),
    )
}

# gpuinfra variables an inventory cannot set: Ansible reads them where inventory variables
# never reach (a play keyword is templated before any host is chosen; include_vars wins over
# the inventory).
NOT_FROM_INVENTORY: dict[str, str] = {
    "gpuinfra_check_hosts": "playbooks/check.yml reads it in the play's 'hosts', which inventory "
    "variables never reach; pass it with -e",
    "gpuinfra_upgrade_serial": "playbooks/upgrade_driver.yml reads it in the play's 'serial', "
    "which inventory variables never reach; pass it with -e",
    "gpuinfra_upgrade_max_fail_percentage": "playbooks/upgrade_driver.yml reads it in the play's "
    "'max_fail_percentage', which inventory variables never reach; pass it with -e",
    "gpuinfra_versions": "the playbooks load it from versions.yaml over any inventory value; "
    "edit versions.yaml",
}

# The prefix of gpuinfra's own variables: one a playbook or role does not read is a mistake.
OWN_PREFIX = "gpuinfra_"

# The Ansible connection and privilege variables sites set most. An ``ansible_*`` name within two
# edits of one of these and not itself one is a misspelling Ansible would silently ignore
# (``ansible_hostt``, ``ansible_prot``). No variable of ansible-core's or the installed
# collections' connection, become and shell plugins is that close to another of these (a unit
# test keeps ansible-core's so), so a plugin's own variable (``ansible_ssh_host``,
# ``ansible_lxd_host``) passes.
COMMON_ANSIBLE_VARS = (
    "ansible_become",
    "ansible_become_exe",
    "ansible_become_flags",
    "ansible_become_method",
    "ansible_become_password",
    "ansible_become_user",
    "ansible_connection",
    "ansible_host",
    "ansible_password",
    "ansible_port",
    "ansible_private_key_file",
    "ansible_python_interpreter",
    "ansible_shell_type",
    "ansible_ssh_common_args",
    "ansible_ssh_private_key_file",
    "ansible_timeout",
    "ansible_user",
)


def coerce(value: Any, spec: VarSpec) -> Any:
    """``value`` as Ansible's argument validation converts it; ValueError when it cannot."""
    if value is None:  # Ansible's argument validation leaves an unset (null) option alone
        return None
    if spec.type == BOOL_FILTER:
        return _bool_filter(value)
    if isinstance(value, bool) and spec.type in ("int", "float"):
        raise ValueError(f"expected {spec.type}, got a boolean {value!r}")
    if spec.type in ("str", "path") and not isinstance(value, str):
        # Ansible would turn 535.10 into "535.1"; a string setting is written as a string.
        raise ValueError(f"expected {spec.type}, got {excerpt(repr(value))}; quote it")
    checkers = _checkers()
    checker = checkers.get(spec.type, checkers["raw"])
    try:
        converted = checker(value)
        if spec.type == "list" and spec.elements in checkers:
            element = VarSpec(spec.role, spec.name, spec.elements)
            converted = [coerce(item, element) for item in converted]
    except (TypeError, ValueError) as exc:
        if isinstance(exc, ValueError) and str(exc).startswith("expected "):
            raise
        raise ValueError(f"expected {spec.type}, got {excerpt(repr(value))}") from None
    return converted


def check_vars(
    variables: dict[str, Any], file: str, roles_dir: Path | None = None
) -> list[Problem]:
    """Problems with the role variables set in one vars file."""
    return _checked(variables, file, roles_dir)[0]


def _checked(
    variables: dict[str, Any], file: str, roles_dir: Path | None = None
) -> tuple[list[Problem], dict[str, Any]]:
    """Problems of one vars file, and its variables as Ansible converts them."""
    specs = role_specs(roles_dir)
    typed = site_vars(roles_dir)
    problems: list[Problem] = []
    converted: dict[str, Any] = {}
    for key, value in variables.items():
        if not isinstance(key, str):
            problems.append(
                Problem(file, excerpt(repr(key), 40), "a variable name must be a string; quote it")
            )
            continue
        converted[key] = value
        problem = _bound(key, value)
        if problem:
            problems.append(Problem(file, key, problem))
            continue
        role = owner(key, specs)
        spec = typed.get(key) if role is None else specs[role].get(key)
        if spec is None:
            if role is None:
                # Not gpuinfra's: a user's own variable, unless it misspells one of ours.
                if why := _unknown(key, typed):
                    problems.append(Problem(file, key, why))
                continue
            hint = did_you_mean(key, specs[role])
            problems.append(
                Problem(
                    file,
                    key,
                    f"unknown variable of role '{role}'{hint}"
                    + ("" if hint else f" (known: {allowed(specs[role])})"),
                )
            )
            continue
        if _templated(value):
            continue
        try:
            value = coerce(value, spec)
        except ValueError as exc:
            low_high = BOUNDS.get(key)
            bound = f" (allowed: {low_high[0]} to {low_high[1]}; {low_high[2]})" if low_high else ""
            problems.append(Problem(file, key, f"{exc}{bound}"))
            continue
        converted[key] = value
        problem = _bound(key, value)
        if problem:
            problems.append(Problem(file, key, problem))
        elif spec.choices and any(v not in spec.choices for v in _members(value, spec)):
            value = next(v for v in _members(value, spec) if v not in spec.choices)
            choices = [str(c) for c in spec.choices]
            problems.append(
                Problem(
                    file,
                    key,
                    f"{excerpt(repr(value))} is not allowed"
                    f"{did_you_mean(str(value), choices)} "
                    f"(allowed: {allowed(choices)})",
                )
            )
        elif why := inputs.problem(key, value):
            problems.append(Problem(file, key, why))
    return problems, converted


def _bool_filter(value: Any) -> bool:
    """``value`` as Ansible's ``bool`` filter reads it; ValueError where the filter would guess."""
    # bool is an int: True reads as "true", as the filter reads it.
    word = str(value).lower() if isinstance(value, str | int) else None
    if word in _BOOL_FILTER_TRUE:
        return True
    if word in _BOOL_FILTER_FALSE:
        return False
    raise ValueError(
        f"expected a boolean, got {excerpt(repr(value))} (allowed: true or false; Ansible's bool "
        "filter also reads yes/no, on/off and 1/0)"
    )


def site_vars(roles_dir: Path | None = None) -> dict[str, VarSpec]:
    """The typed variables of a site that no role owns by its prefix: SITE_VARS, and the
    ``gpuinfra_*`` options the add-on roles declare in their specs."""
    shared = {
        name: spec
        for options in role_specs(roles_dir).values()
        for name, spec in options.items()
        if name.startswith(OWN_PREFIX)
    }
    return {**shared, **SITE_VARS}


def _unknown(key: str, typed: dict[str, VarSpec]) -> str | None:
    """Why a variable no role or playbook declares is a mistake, or None for a user's own."""
    if key in NOT_FROM_INVENTORY:
        return NOT_FROM_INVENTORY[key]
    if key.startswith(OWN_PREFIX):
        known = [
            *(name for name in typed if name.startswith(OWN_PREFIX)),
            *NOT_FROM_INVENTORY,
        ]
        # Compared without the shared prefix, which would make any two names look alike.
        hint = did_you_mean(
            key.removeprefix(OWN_PREFIX), [k.removeprefix(OWN_PREFIX) for k in known]
        )
        hint = hint.replace("'", f"'{OWN_PREFIX}", 1) if hint else ""
        return "unknown variable: no gpuinfra playbook or role reads it" + (
            hint or f" (known: {allowed(known)})"
        )
    if key.startswith("ansible_") and key not in COMMON_ANSIBLE_VARS:
        folded = key.replace("_", "")
        close = sorted(
            (_edits(key, name), name)
            for name in COMMON_ANSIBLE_VARS
            if _edits(key, name) <= 2 or name.replace("_", "") == folded
        )
        if close:
            # After "(allowed": a name like ansible_become_passwd is a secret's, and the
            # message's quoted values before it are masked.
            return (
                "not a variable Ansible reads, so it would be ignored (allowed: the variables "
                f"Ansible reads; did you mean '{close[0][1]}'?)"
            )
    return None


def _edits(a: str, b: str) -> int:
    """Edits between two names: insertions, deletions, substitutions and swaps of neighbours."""
    if abs(len(a) - len(b)) > 2:
        return 3  # more than any name counts as close
    previous2: list[int] = []
    previous = list(range(len(b) + 1))
    for i in range(1, len(a) + 1):
        row = [i] + [0] * len(b)
        for j in range(1, len(b) + 1):
            row[j] = min(previous[j] + 1, row[j - 1] + 1, previous[j - 1] + (a[i - 1] != b[j - 1]))
            if i > 1 and j > 1 and a[i - 1] == b[j - 2] and a[i - 2] == b[j - 1]:
                row[j] = min(row[j], previous2[j - 2] + 1)
        previous2, previous = previous, row
    return previous[-1]


def _bound(key: str, value: Any) -> str | None:
    if key not in BOUNDS or isinstance(value, bool) or not isinstance(value, int | float):
        return None
    low, high, why = BOUNDS[key]
    if low <= value <= high:
        return None
    return f"{excerpt(repr(value))} is out of range (allowed: {low} to {high}; {why})"


def _members(value: Any, spec: VarSpec) -> list[Any]:
    # For a list option, Ansible applies `choices` to each element.
    return list(value) if spec.type == "list" else [value]


def _templated(value: Any) -> bool:
    # A template, or a vaulted value: only Ansible knows what either holds.
    return isinstance(value, Vaulted) or (isinstance(value, str) and "{{" in value)


def _declared(key: str, roles_dir: Path | None) -> bool:
    """Whether a role or playbook of gpuinfra reads ``key``."""
    specs = role_specs(roles_dir)
    role = owner(key, specs)
    return key in _site_var_names(roles_dir) if role is None else key in specs[role]


@cache
def _site_var_names(roles_dir: Path | None) -> frozenset[str]:
    return frozenset(site_vars(roles_dir))


def owner(key: str, specs: dict[str, dict[str, VarSpec]]) -> str | None:
    """The role whose variable ``key`` is, or None for a variable no role declares."""
    # The longest role name that prefixes the key owns it (nvidia_driver vs nvidia_driver_x).
    owners = [role for role in specs if key == role or key.startswith(role + "_")]
    return max(owners, key=len) if owners else None


def _site_names(root: Path) -> list[str]:
    inventory = root / "inventory"
    if not is_dir(inventory):
        return []
    return sorted(p.name for p in list_dir(inventory) if is_dir(p))


def _refuse_other_inventories(path: Path, hosts_file: Path) -> None:
    """Ansible given the directory reads every other entry as an inventory too (its hosts, its
    variables); converge and config check read hosts.yml alone, so they would check and converge
    a different site than ``ansible-playbook -i inventory/<site>`` runs on."""
    others = sorted(
        entry
        for entry in path.iterdir()
        if entry.name != hosts_file.name
        and not entry.name.startswith(".")
        and entry.name not in ANSIBLE_SKIPPED_NAMES
        and not entry.name.endswith(ANSIBLE_SKIPPED_EXTENSIONS)
    )
    if others:
        raise ConfigError(
            [
                Problem(
                    display_path(entry),
                    "",
                    f"Ansible given the site directory reads it as one more inventory, which "
                    f"converge and config check do not (allowed beside {hosts_file.name}: "
                    "group_vars/, host_vars/ and files Ansible skips, such as *.md; move its "
                    f"hosts and groups into {hosts_file.name})",
                )
                for entry in others
            ]
        )


def load_site(path: Path, roles_dir: Path | None = None) -> Site:
    """Read an inventory directory; raise ConfigError listing every problem in its files."""
    if len(os.fsencode(path.name)) > 255 or not is_dir(path):
        sites: list[str] = []
        with contextlib.suppress(UsageError):
            sites = _site_names(repo_root())
        # A site is named by its folder: `--site example` means inventory/example.
        close = did_you_mean(excerpt(path.name, 80), sites).removeprefix("; did you mean '")
        hint = f"; did you mean 'inventory/{close}" if close else ""
        raise UsageError(
            f"no site at {display_path(path)}{hint}; sites under inventory/: "
            f"{', '.join(sites) or 'none'}"
        )
    present = [
        path / n
        for n in HOSTS_FILES
        if is_file(path / n) or is_dir(path / n) or (path / n).is_symlink()
    ]
    if len(present) > 1:
        # Ansible given the directory reads both; converge and this check read one.
        raise ConfigError(
            [
                Problem(
                    display_path(path),
                    "",
                    f"both {' and '.join(p.name for p in present)} in the site directory, and "
                    "Ansible given the directory would read both (allowed: one of them; merge "
                    "them into hosts.yml)",
                )
            ]
        )
    if not present:
        raise ConfigError(
            [
                Problem(
                    display_path(path),
                    "",
                    "no hosts.yml in the site directory (allowed: hosts.yml or hosts.yaml)",
                )
            ]
        )
    hosts_file = present[0]
    _refuse_other_inventories(path, hosts_file)
    problems: list[Problem] = []
    hosts: dict[str, Host] = {}
    groups: dict[str, list[str]] = {}
    inline: list[tuple[str, dict[str, Any], str | None]] = []
    depths: dict[str, int] = {}
    document = load_yaml(hosts_file)
    shown = display_path(hosts_file)
    if document is None:
        raise ConfigError(
            [
                Problem(
                    shown,
                    "",
                    "the inventory is empty (allowed: a mapping of groups with at least one host)",
                )
            ]
        )
    if isinstance(document, str) and document.startswith("$ANSIBLE_VAULT;"):
        raise ConfigError(
            [
                Problem(
                    shown,
                    "",
                    "encrypted whole with ansible-vault, so its hosts cannot be checked (allowed: "
                    "a plain inventory with secret values encrypted one by one, "
                    "`ansible-vault encrypt_string`)",
                )
            ]
        )
    if not isinstance(document, dict):
        raise ConfigError([Problem(shown, "", "an inventory must be a mapping of groups")])
    edges: dict[str, set[str]] = {}
    for group, body in document.items():
        _walk_group(
            str(group), body, shown, str(group), hosts, groups, inline, problems, depths, (), edges
        )
    if loop := _group_loop(edges):
        problems.append(
            Problem(
                shown,
                "",
                f"group '{excerpt(loop[0], 40)}' is its own child ("
                f"{excerpt(' -> '.join(loop), 120)}), and Ansible refuses the whole inventory "
                "(allowed: children without loops)",
            )
        )
    if not hosts and not problems:
        problems.append(
            Problem(shown, "", "the inventory has no hosts (allowed: at least one host)")
        )

    per_file: dict[str, tuple[str, str, dict[str, Any]]] = {}
    set_by: dict[tuple[str, str, str], str] = {}
    refused: set[tuple[str, str, str]] = set()
    for kind, target, file in vars_files(path):
        file_shown = display_path(file)
        known = groups if kind == "group" else hosts
        # host_vars/localhost reaches the implicit localhost, the controller the add-on play
        # runs on, as group_vars/all does.
        implicit = (kind, target) in (
            ("group", "all"),
            ("group", "ungrouped"),
            ("host", "localhost"),
        )
        if target not in known and not implicit:
            folder = "group_vars" if kind == "group" else "host_vars"
            problems.append(
                Problem(
                    file_shown,
                    "",
                    f"no {kind} '{excerpt(target, 40)}' in {shown}, so Ansible never reads it"
                    f"{did_you_mean(target, known)} (allowed: {folder}/<{kind} name>)",
                )
            )
            continue
        try:
            data = load_yaml(file)
        except ConfigError as exc:
            problems.extend(exc.problems)
            continue
        if data is None:
            continue
        if isinstance(data, str) and data.startswith("$ANSIBLE_VAULT;"):
            # A whole file encrypted with ansible-vault: Ansible reads it, gpuinfra cannot.
            continue
        if not isinstance(data, dict):
            problems.append(Problem(file_shown, "", "a vars file must be a mapping"))
            continue
        found, converted = _checked(data, file_shown, roles_dir)
        problems.extend(found)
        # Two files of one group or host that set the same variable of gpuinfra's: Ansible
        # keeps the one it reads last, and nothing says the other is ignored.
        # A value already refused is that mistake's one line, in whichever file it stands.
        refused.update((kind, target, problem.path) for problem in found)
        for key in converted:
            first = set_by.setdefault((kind, target, key), file_shown)
            if (
                first != file_shown
                and (kind, target, key) not in refused
                and _declared(key, roles_dir)
            ):
                problems.append(
                    Problem(
                        file_shown,
                        key,
                        f"also set in {first}, and Ansible keeps only the value of the file it "
                        f"reads last (allowed: each variable once per {kind})",
                    )
                )
        per_file[file_shown] = (kind, target, converted)
    checked_inline: list[tuple[str, dict[str, Any], str | None]] = []
    for group_name, data, host_name in inline:
        found, converted = _checked(data, shown, roles_dir)
        problems.extend(found)
        checked_inline.append((group_name, converted, host_name))
    if problems:
        raise ConfigError(problems)

    # Precedence as Ansible applies it for these sources: the inventory file's group vars (all's
    # below a child group's), group_vars/all, other group_vars, the inventory file's host vars,
    # host_vars. Among groups, Ansible's order: by depth, then ansible_group_priority (set in the
    # inventory file only), then name. The implicit localhost, which is in no group, gets all's
    # of both kinds.
    priority: dict[str, int] = {}
    for group_name, data, host_name in checked_inline:
        if host_name is None and isinstance(data.get("ansible_group_priority"), int):
            priority[group_name] = data["ansible_group_priority"]

    def group_order(group: str) -> tuple[int, int, str]:
        return depths.get(group, 1), priority.get(group, 1), group

    Layer = tuple[tuple[int, tuple[int, int, str]], str, dict[str, Any]]

    def layers_of(host: Host | None) -> list[Layer]:
        layers: list[Layer] = []
        for group_name, data, host_name in checked_inline:
            if host_name is None and group_name == "all":
                layers.append(((0, group_order("all")), shown, data))
            elif host is not None and host_name is None and group_name in host.groups:
                layers.append(((1, group_order(group_name)), shown, data))
            elif host is not None and host_name == host.name:
                layers.append(((4, group_order("")), shown, data))
        for file_shown, (kind, target, data) in per_file.items():
            if kind == "group" and target == "all":
                layers.append(((2, group_order("all")), file_shown, data))
            elif host is not None and kind == "group" and target in host.groups:
                layers.append(((3, group_order(target)), file_shown, data))
            elif kind == "host" and target == (host.name if host else "localhost"):
                layers.append(((5, group_order("")), file_shown, data))
        return sorted(layers, key=lambda item: item[0])

    controller = Host(name="localhost")
    for host in [*hosts.values(), controller]:
        for _rank, origin, data in layers_of(None if host is controller else host):
            for key, value in data.items():
                host.vars[key] = value
                host.origin[key] = origin
    site = Site(
        name=path.name,
        path=path,
        hosts=hosts,
        groups=groups,
        controller=controller,
        inventory=hosts_file,
    )
    problems = (
        check_versions(site)
        + _check_addresses(site)
        + _check_environment(site)
        + _check_gpu_counts(site)
    )
    if problems:
        raise ConfigError(problems)
    return site


# ansible.cfg's ssh_args carry the SSH keepalives that declare a host that stops answering
# unreachable within a minute. A site's ansible_ssh_args replaces that setting whole; its
# ansible_ssh_common_args and ansible_ssh_extra_args are added to it.
_KEEPALIVE = re.compile(r"ServerAliveInterval(?:\s*=\s*|\s+)([0-9]+)", re.IGNORECASE)


def _drops_keepalives(value: Any) -> bool:
    keepalive = _KEEPALIVE.search(str(value))
    return keepalive is None or int(keepalive.group(1)) == 0


_KEEPALIVE_ADVICE = (
    "drops ansible.cfg's SSH keepalives, so a host that stops answering holds the run instead "
    "of failing in 60 s; add -o ServerAliveInterval=15 -o ServerAliveCountMax=4 (or use {common}, "
    "which adds to them)"
)


def keepalive_warnings(site: Site, environ: Mapping[str, str] | None = None) -> list[Problem]:
    """Where the site's ``ansible_ssh_args`` drop the SSH keepalives ansible.cfg sets: one per
    file that sets them; and ``ANSIBLE_SSH_ARGS`` in ``environ`` when it drops them for a host
    whose inventory sets no ``ansible_ssh_args`` of its own (the inventory's value wins)."""
    found: dict[str, Problem] = {}
    # A host whose inventory sets no ansible_ssh_args takes ANSIBLE_SSH_ARGS, where it is set.
    reads_env = False
    for host in site.hosts.values():
        value = host.vars.get("ansible_ssh_args")
        if value is None:
            reads_env = True
            continue
        if _templated(value) or not _drops_keepalives(value):
            continue
        file = host.origin.get("ansible_ssh_args", site.name)
        found.setdefault(
            file,
            Problem(
                file,
                "ansible_ssh_args",
                _KEEPALIVE_ADVICE.format(common="ansible_ssh_common_args"),
            ),
        )
    warnings = list(found.values())
    env_value = (environ or {}).get("ANSIBLE_SSH_ARGS")
    if reads_env and env_value is not None and _drops_keepalives(env_value):
        warnings.append(
            Problem(
                "the environment",
                "ANSIBLE_SSH_ARGS",
                _KEEPALIVE_ADVICE.format(common="ANSIBLE_SSH_COMMON_ARGS"),
            )
        )
    return warnings


def resolved_site(
    name: str,
    hosts: Mapping[str, Mapping[str, Any]],
    file: Callable[[str], str] = lambda host: f"variables of host {host}",
    roles_dir: Path | None = None,
    skip: Collection[str] = (),
) -> Site:
    """A site from its hosts' variables as a play resolved them (Ansible's ``hostvars``), checked
    as load_site checks a site's files: each variable a role or playbook of gpuinfra declares,
    converted as Ansible converts it, and the checks across hosts (driver pins, environment).
    Variables gpuinfra does not declare (facts, registered results, a user's own) are left out:
    only a vars file tells a misspelling from a variable of someone else's; so are those of the
    roles in ``skip``. ``file(host)`` names where a host's variables come from in a problem;
    ConfigError names every problem."""
    specs = role_specs(roles_dir)

    def declared(key: str) -> bool:
        return owner(key, specs) not in skip and _declared(key, roles_dir)

    problems: list[Problem] = []
    resolved: dict[str, Host] = {}
    for host_name, variables in hosts.items():
        shown = file(host_name)
        # Only the declared names are read: reading a value is templating it.
        read = {key: variables[key] for key in variables if declared(key)}
        found, converted = _checked(read, shown, roles_dir)
        problems += found
        resolved[host_name] = Host(
            name=host_name, vars=converted, origin=dict.fromkeys(converted, shown)
        )
    site = Site(name=name, path=Path(name), hosts=resolved, groups={})
    problems += check_versions(site) + _check_environment(site)
    if problems:
        raise ConfigError(problems)
    return site


def _check_environment(site: Site) -> list[Problem]:
    problems: list[Problem] = []
    for host in site.hosts.values():
        value = host.vars.get(ENVIRONMENT_VAR)
        if value is not None and not _templated(value) and str(value) not in ENVIRONMENTS:
            origin = host.origin.get(ENVIRONMENT_VAR, site.name)
            problem = Problem(
                origin,
                ENVIRONMENT_VAR,
                f"{excerpt(repr(value), 40)} is not an environment (allowed: {', '.join(ENVIRONMENTS)})",
            )
            if problem not in problems:
                problems.append(problem)
    return problems


def _check_gpu_counts(site: Site) -> list[Problem]:
    """A Kubernetes node registered with a GPU type is a GPU node: the node check expecting it to
    show no GPU contradicts it, and every quota, serving group and smoke test on that type would
    be judged against a node without GPUs. One line per file that sets it."""
    count = "gpu_node_check_expected_gpu_count"
    hosts: dict[str, list[str]] = {}
    for host in sorted(site.hosts.values(), key=lambda h: h.name):
        variables = host.vars
        gpu_type = variables.get("gpu_node_registration_gpu_type")
        if (
            variables.get("gpuinfra_k8s_node") is True
            and isinstance(gpu_type, str)
            and gpu_type
            and type(variables.get(count)) is int
            and variables[count] == 0
        ):
            hosts.setdefault(host.origin.get(count, site.name), []).append(host.name)
    low, high, _ = BOUNDS[count]
    return [
        Problem(
            origin,
            count,
            f"0, but {', '.join(names)} {'registers' if len(names) == 1 else 'register'} as a "
            f"GPU node (gpu_node_registration_gpu_type) (allowed: {low + 1} to {high}, the GPUs "
            "each carries; null only reports the count)",
        )
        for origin, names in hosts.items()
    ]


def _check_addresses(site: Site) -> list[Problem]:
    """A host Ansible must reach needs an address: ``ansible_host`` may not be empty nor hold
    whitespace."""
    problems: list[Problem] = []
    for host in site.hosts.values():
        if "ansible_host" not in host.vars:
            continue
        address = host.vars["ansible_host"]
        if isinstance(address, str) and not address.strip():
            message = "an empty address (allowed: a host name or an IP address)"
        elif isinstance(address, str) and (_templated(address) or address.split() == [address]):
            continue
        elif isinstance(address, str):
            # ssh would be given the name with its spaces, and resolve nothing.
            message = (
                f"{excerpt(repr(address))} holds whitespace (allowed: a host name or an IP "
                "address, without spaces or newlines)"
            )
        else:
            message = (
                f"{excerpt(repr(address))} is not an address (allowed: a host name or an IP "
                "address, as a string)"
            )
        problems.append(
            Problem(
                host.origin.get("ansible_host", site.name),
                "ansible_host",
                f"host {host.name}: {message}",
            )
        )
    return problems


def _walk_group(
    name: str,
    body: Any,
    file: str,
    where: str,
    hosts: dict[str, Host],
    groups: dict[str, list[str]],
    inline: list[tuple[str, dict[str, Any], str | None]],
    problems: list[Problem],
    depths: dict[str, int],
    parents: tuple[str, ...] = (),
    edges: dict[str, set[str]] | None = None,
) -> None:
    """Read one group of the inventory into ``hosts`` and ``groups``; ``edges`` gathers each
    group's children, for the loop check."""
    groups.setdefault(name, [])
    # Ansible's depth of a group: how far below all it stands, by its longest path.
    depth = sum(1 for group in (*parents, name) if group != "all")
    depths[name] = max(depths.get(name, 0), depth)
    if body is None:
        return
    if not isinstance(body, dict):
        problems.append(Problem(file, where, "a group must be a mapping"))
        return
    for key in body:
        if key not in ("hosts", "children", "vars"):
            problems.append(
                Problem(
                    file,
                    f"{where}.{excerpt(str(key), 40)}",
                    f"unknown group key '{excerpt(str(key), 40)}'"
                    f"{did_you_mean(str(key), ['hosts', 'children', 'vars'])} "
                    "(allowed: 'children', 'hosts' or 'vars')",
                )
            )
    for section in ("hosts", "children", "vars"):
        if body.get(section) is not None and not isinstance(body[section], dict):
            problems.append(Problem(file, f"{where}.{section}", f"'{section}' must be a mapping"))
    host_entries: dict[Any, Any] = body["hosts"] if isinstance(body.get("hosts"), dict) else {}
    for host_name, host_vars in host_entries.items():
        if not str(host_name).strip() or host_name is None:
            problems.append(
                Problem(file, f"{where}.hosts", "a host without a name (allowed: a host name)")
            )
            continue
        if not _HOST_NAME.match(str(host_name)):
            problems.append(
                Problem(
                    file,
                    f"{where}.hosts.{excerpt(str(host_name), 40)}",
                    "not a host name (allowed: up to 253 letters, digits, '.', '-', '_' or ':', "
                    "starting with a letter, digit or '_'; a range such as gpu-[01:04] is not "
                    "expanded here, list each host)",
                )
            )
            continue
        if host_vars is not None and not isinstance(host_vars, dict):
            problems.append(
                Problem(file, f"{where}.hosts.{host_name}", "host variables must be a mapping")
            )
            continue
        host = hosts.setdefault(str(host_name), Host(name=str(host_name)))
        for group in (*parents, name):
            if group not in host.groups:
                host.groups.append(group)
            if host.name not in groups.setdefault(group, []):
                groups[group].append(host.name)
        if host_vars:
            inline.append((name, dict(host_vars), host.name))
    if isinstance(body.get("vars"), dict) and body["vars"]:
        inline.append((name, dict(body["vars"]), None))
    children: dict[Any, Any] = body["children"] if isinstance(body.get("children"), dict) else {}
    for child, child_body in children.items():
        if edges is not None:
            edges.setdefault(name, set()).add(str(child))
        if str(child) in (*parents, name):
            continue  # a loop, which load_site reports once the whole inventory is read
        _walk_group(
            str(child),
            child_body,
            file,
            f"{where}.children.{child}",
            hosts,
            groups,
            inline,
            problems,
            depths,
            (*parents, name),
            edges,
        )


def _group_loop(edges: Mapping[str, Collection[str]]) -> list[str]:
    """A chain of groups that leads back to its first (``[g, h, g]``), or [] where none does."""

    # Groups whose descendants hold no loop: each is walked once.
    clear: set[str] = set()

    def walk(chain: list[str]) -> list[str]:
        for child in sorted(edges.get(chain[-1], ())):
            if child in chain:
                return [*chain[chain.index(child) :], child]
            if child not in clear and (found := walk([*chain, child])):
                return found
        clear.add(chain[-1])
        return []

    return next((loop for group in sorted(edges) if (loop := walk([group]))), [])


# An inventory host name: a DNS name, an IPv4 or IPv6 address, or an alias made of the same
# characters (a space or a '!' would reach ssh, and the node's Kubernetes name, as written).
_HOST_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._:-]{0,252}$")


# The vars file extensions Ansible reads (its YAML_FILENAME_EXTENSIONS); a file without one is
# read too.
VARS_EXTENSIONS = (".yml", ".yaml", ".json")


def vars_files(site: Path) -> Iterator[tuple[str, str, Path]]:
    """(``group``/``host``, its name, file) for every vars file Ansible reads, in its order.

    As Ansible's ``host_group_vars`` plugin finds them: ``group_vars/<name>`` as a file with
    one of VARS_EXTENSIONS or none, or as a directory read recursively in sorted order,
    skipping hidden files, backups (``~``) and other extensions.
    """
    for kind, folder in (("group", "group_vars"), ("host", "host_vars")):
        base = site / folder
        if not is_dir(base):
            if is_file(base):
                # Ansible would skip it without a word, and every variable in it with it.
                raise ConfigError(
                    [
                        Problem(
                            display_path(base),
                            "",
                            f"a file, and Ansible reads {folder} only as a directory (allowed: "
                            f"a directory of <{kind} name>.yml files or <{kind} name>/ folders)",
                        )
                    ]
                )
            continue
        for entry in list_dir(base):
            if entry.name.startswith(".") or entry.name.endswith("~"):
                continue
            if is_dir(entry):
                if entry.suffix and entry.suffix not in VARS_EXTENSIONS:
                    continue
                for file in _dir_files(entry, depth=0):
                    yield kind, entry.name, file
            elif not entry.suffix or entry.suffix in VARS_EXTENSIONS:
                name = entry.name if not entry.suffix else entry.stem
                yield kind, name, entry


def _dir_files(folder: Path, depth: int) -> Iterator[Path]:
    if depth > MAX_DEPTH:
        raise ConfigError(
            [Problem(display_path(folder), "", f"nested deeper than {MAX_DEPTH} directories")]
        )
    for entry in list_dir(folder):
        if entry.name.startswith(".") or entry.name.endswith("~"):
            continue
        if is_dir(entry):
            if not entry.suffix:
                yield from _dir_files(entry, depth + 1)
        elif not entry.suffix or entry.suffix in VARS_EXTENSIONS:
            yield entry


DRIVER_SOURCES = ("distro", "cuda_repo", "preinstalled")


def check_versions(site: Site) -> list[Problem]:
    """A host's driver version must be the one versions.yaml pins for its install source."""
    problems: list[Problem] = []
    pins = versions_mod.pinned()
    seen: set[tuple[str, str]] = set()
    for host in site.hosts.values():
        source = host.vars.get("nvidia_driver_source", "distro")
        version = host.vars.get("nvidia_driver_version")
        if version is None or _templated(version) or source not in DRIVER_SOURCES:
            continue
        # A host takes its release's build (the entry's `releases`); the site does not say
        # which release a host runs, so any of the source's builds is accepted here and the
        # role's preflight holds the host to its own.
        expected = pins.driver(source).versions()
        origin = host.origin.get("nvidia_driver_version", site.name)
        if str(version) not in expected and (origin, str(version)) not in seen:
            seen.add((origin, str(version)))
            listed = sorted({pins.driver(s).version for s in DRIVER_SOURCES})
            problems.append(
                Problem(
                    origin,
                    "nvidia_driver_version",
                    f"{version!r} is not the version versions.yaml pins for "
                    f"source '{source}' ({' or '.join(expected)}); pinned drivers: "
                    f"{', '.join(listed)}. Bump versions.yaml, not the inventory",
                )
            )
    return problems

"""A bare-metal site: an Ansible inventory directory (hosts.yml, group_vars/, host_vars/).

Role variables are typed by the roles themselves: each ``roles/<role>/meta/argument_specs.yml``
declares its public variables with type and choices. A site file that sets a variable with a
role's prefix is checked against that spec, so a misspelled ``nvidia_driver_sorce`` is an error
with a suggestion instead of a silently ignored setting.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from gpuinfra import inputs
from gpuinfra import versions as versions_mod
from gpuinfra.errors import ConfigError, Problem, UsageError
from gpuinfra.loading import Vaulted, display_path, load_yaml
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


@dataclass
class Site:
    name: str
    path: Path
    hosts: dict[str, Host]
    groups: dict[str, list[str]]


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


_TYPES: dict[str, tuple[type, ...]] = {
    "str": (str,),
    "int": (int,),
    "bool": (bool,),
    "float": (int, float),
    "list": (list,),
    "dict": (dict,),
    "path": (str,),
    "raw": (object,),
}


def check_vars(
    variables: dict[str, Any], file: str, roles_dir: Path | None = None
) -> list[Problem]:
    """Problems with the role variables set in one vars file."""
    specs = role_specs(roles_dir)
    problems: list[Problem] = []
    for key, value in variables.items():
        role = owner(key, specs)
        if role is None:
            continue
        spec = specs[role].get(key)
        if spec is None:
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
        expected = _TYPES.get(spec.type, (object,))
        if isinstance(value, bool) and bool not in expected and spec.type != "raw":
            problems.append(Problem(file, key, f"expected {spec.type}, got a boolean {value!r}"))
        elif not isinstance(value, expected):
            problems.append(Problem(file, key, f"expected {spec.type}, got {value!r}"))
        elif spec.choices and any(v not in spec.choices for v in _members(value, spec)):
            value = next(v for v in _members(value, spec) if v not in spec.choices)
            choices = [str(c) for c in spec.choices]
            problems.append(
                Problem(
                    file,
                    key,
                    f"{value!r} is not allowed"
                    f"{did_you_mean(str(value), choices)} "
                    f"(allowed: {allowed(choices)})",
                )
            )
        elif why := inputs.problem(key, value):
            problems.append(Problem(file, key, why))
    return problems


def _members(value: Any, spec: VarSpec) -> list[Any]:
    # For a list option, Ansible applies `choices` to each element.
    return list(value) if spec.type == "list" else [value]


def _templated(value: Any) -> bool:
    # A template, or a vaulted value: only Ansible knows what either holds.
    return isinstance(value, Vaulted) or (isinstance(value, str) and "{{" in value)


def owner(key: str, specs: dict[str, dict[str, VarSpec]]) -> str | None:
    """The role whose variable ``key`` is, or None for a variable no role declares."""
    # The longest role name that prefixes the key owns it (nvidia_driver vs nvidia_driver_x).
    owners = [role for role in specs if key == role or key.startswith(role + "_")]
    return max(owners, key=len) if owners else None


def load_site(path: Path, roles_dir: Path | None = None) -> Site:
    """Read an inventory directory; raise ConfigError listing every problem in its files."""
    if not path.is_dir():
        sites = sorted(p.name for p in (repo_root() / "inventory").glob("*") if p.is_dir())
        raise UsageError(
            f"no site at {path}{did_you_mean(path.name, sites)}; "
            f"sites under inventory/: {', '.join(sites) or 'none'}"
        )
    hosts_file = next((path / n for n in ("hosts.yml", "hosts.yaml") if (path / n).exists()), None)
    if hosts_file is None:
        raise ConfigError([Problem(display_path(path), "", "no hosts.yml in the site directory")])
    problems: list[Problem] = []
    hosts: dict[str, Host] = {}
    groups: dict[str, list[str]] = {}
    inline: list[tuple[str, dict[str, Any], str | None]] = []
    document = load_yaml(hosts_file) or {}
    shown = display_path(hosts_file)
    if not isinstance(document, dict):
        raise ConfigError([Problem(shown, "", "an inventory must be a mapping of groups")])
    for group, body in document.items():
        _walk_group(str(group), body, shown, str(group), hosts, groups, inline, problems)

    files = list(_vars_files(path))
    per_file: dict[str, tuple[str, str, dict[str, Any]]] = {}
    for kind, target, file in files:
        data = load_yaml(file) or {}
        file_shown = display_path(file)
        if isinstance(data, str) and data.startswith("$ANSIBLE_VAULT;"):
            # A whole file encrypted with ansible-vault: Ansible reads it, gpuinfra cannot.
            continue
        if not isinstance(data, dict):
            problems.append(Problem(file_shown, "", "a vars file must be a mapping"))
            continue
        problems.extend(check_vars(data, file_shown, roles_dir))
        per_file[file_shown] = (kind, target, data)
    for _group_path, data, _host in inline:
        problems.extend(check_vars(data, shown, roles_dir))
    if problems:
        raise ConfigError(problems)

    # Precedence as Ansible applies it for these sources: all < group < inline group < host.
    order = {"all": 0, "group": 1, "host": 3}
    for host in hosts.values():
        layers: list[tuple[int, str, dict[str, Any]]] = []
        for file_shown, (kind, target, data) in per_file.items():
            if kind == "group" and (target == "all" or target in host.groups):
                layers.append((order["all" if target == "all" else "group"], file_shown, data))
            elif kind == "host" and target == host.name:
                layers.append((order["host"], file_shown, data))
        for group_name, data, host_name in inline:
            if host_name == host.name or (host_name is None and group_name in host.groups):
                layers.append((2 if host_name is None else 3, shown, data))
        for _rank, origin, data in sorted(layers, key=lambda item: item[0]):
            for key, value in data.items():
                host.vars[key] = value
                host.origin[key] = origin
    site = Site(name=path.name, path=path, hosts=hosts, groups=groups)
    problems = check_versions(site)
    if problems:
        raise ConfigError(problems)
    return site


def _walk_group(
    name: str,
    body: Any,
    file: str,
    where: str,
    hosts: dict[str, Host],
    groups: dict[str, list[str]],
    inline: list[tuple[str, dict[str, Any], str | None]],
    problems: list[Problem],
    parents: tuple[str, ...] = (),
) -> None:
    groups.setdefault(name, [])
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
                    f"{where}.{key}",
                    f"unknown group key '{key}'"
                    f"{did_you_mean(str(key), ['hosts', 'children', 'vars'])}",
                )
            )
    for host_name, host_vars in (body.get("hosts") or {}).items():
        host = hosts.setdefault(str(host_name), Host(name=str(host_name)))
        for group in (*parents, name):
            if group not in host.groups:
                host.groups.append(group)
            if host.name not in groups.setdefault(group, []):
                groups[group].append(host.name)
        if host_vars:
            inline.append((name, dict(host_vars), host.name))
    if body.get("vars"):
        inline.append((name, dict(body["vars"]), None))
    for child, child_body in (body.get("children") or {}).items():
        _walk_group(
            str(child),
            child_body,
            file,
            f"{where}.children.{child}",
            hosts,
            groups,
            inline,
            problems,
            (*parents, name),
        )


def _vars_files(site: Path) -> Iterator[tuple[str, str, Path]]:
    for kind, folder in (("group", "group_vars"), ("host", "host_vars")):
        base = site / folder
        if not base.is_dir():
            continue
        for entry in sorted(base.iterdir()):
            if entry.is_dir():
                for file in sorted(entry.glob("*.y*ml")):
                    yield kind, entry.name, file
            elif entry.suffix in (".yml", ".yaml"):
                yield kind, entry.stem, entry


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
        expected = pins.driver(source).version
        origin = host.origin.get("nvidia_driver_version", site.name)
        if str(version) != expected and (origin, str(version)) not in seen:
            seen.add((origin, str(version)))
            listed = sorted({pins.driver(s).version for s in DRIVER_SOURCES})
            problems.append(
                Problem(
                    origin,
                    "nvidia_driver_version",
                    f"{version!r} is not the version versions.yaml pins for "
                    f"source '{source}' ({expected}); pinned drivers: "
                    f"{', '.join(listed)}. Bump versions.yaml, not the inventory",
                )
            )
    return problems

"""Every role's meta/argument_specs.yml and defaults/main.yml describe the same variables.

The site validation types inventory values by these specs, so a variable missing from them is
silently unchecked and a spec without a default is a variable the role never reads. Variables
named ``gpuinfra_*`` are shared by several roles and set by the play, so they have no default.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

ROLES = Path(__file__).resolve().parents[3] / "roles"
ROLE_DIRS = sorted(p.parent.parent for p in ROLES.glob("*/meta/argument_specs.yml"))
SHARED_PREFIX = "gpuinfra_"
PYTHON_TYPES: dict[str, tuple[type, ...]] = {
    "str": (str,),
    "path": (str,),
    "int": (int,),
    "float": (int, float),
    "bool": (bool,),
    "list": (list,),
    "dict": (dict,),
}


def load(path: Path) -> Any:
    return yaml.safe_load(path.read_text()) if path.exists() else None


def options(role: Path) -> dict[str, Any]:
    """The options of every entry point (an internal role such as addon_helm has no main)."""
    document = load(role / "meta" / "argument_specs.yml") or {}
    merged: dict[str, Any] = {}
    for entry in document["argument_specs"].values():
        merged |= entry.get("options") or {}
    return merged


def defaults(role: Path) -> dict[str, Any]:
    return load(role / "defaults" / "main.yml") or {}


def owned(names: set[str]) -> set[str]:
    return {name for name in names if not name.startswith(SHARED_PREFIX)}


def test_the_node_roles_are_covered() -> None:
    names = {role.name for role in ROLE_DIRS}
    assert {"nvidia_driver", "nvidia_container_toolkit", "gpu_node_check"} <= names


@pytest.mark.parametrize("role", ROLE_DIRS, ids=lambda p: p.name)
def test_specs_and_defaults_name_the_same_variables(role: Path) -> None:
    specs = options(role)
    # A required option is one the caller must pass; a default would hide that it did not.
    specified = owned({name for name, spec in specs.items() if not spec.get("required")})
    defaulted = set(defaults(role))
    assert not defaulted - specified, f"defaults without a spec: {sorted(defaulted - specified)}"
    assert not specified - defaulted, f"specs without a default: {sorted(specified - defaulted)}"


@pytest.mark.parametrize("role", ROLE_DIRS, ids=lambda p: p.name)
def test_every_public_variable_is_prefixed_and_described(role: Path) -> None:
    for name, spec in options(role).items():
        assert name.startswith((role.name + "_", SHARED_PREFIX)), name
        assert spec.get("type") in PYTHON_TYPES, f"{name}: type {spec.get('type')!r}"
        assert str(spec.get("description") or "").strip(), f"{name}: no description"


@pytest.mark.parametrize("role", ROLE_DIRS, ids=lambda p: p.name)
def test_literal_defaults_have_the_specified_type_and_choice(role: Path) -> None:
    specs = options(role)
    for name, value in defaults(role).items():
        spec = specs.get(name)
        if spec is None or value is None or (isinstance(value, str) and "{{" in value):
            continue
        expected = PYTHON_TYPES[spec["type"]]
        assert isinstance(value, expected), f"{name}: {value!r} is not {spec['type']}"
        assert not (isinstance(value, bool) and bool not in expected), f"{name}: bool"
        choices = spec.get("choices")
        if choices:
            values: list[Any] = value if isinstance(value, list) else [value]
            assert set(values) <= set(choices), f"{name}: {value!r} not in {choices}"


def _role_imports(node: Any) -> Iterator[dict[str, Any]]:
    """Every import_role and include_role in a play or task list, blocks and handlers included."""
    if isinstance(node, list):
        for item in node:
            yield from _role_imports(item)
    elif isinstance(node, dict):
        for key, value in node.items():
            if key.removeprefix("ansible.builtin.") in ("import_role", "include_role"):
                if isinstance(value, dict):
                    yield value
            else:
                yield from _role_imports(value)


def test_every_entry_point_a_playbook_or_role_uses_is_declared() -> None:
    files = sorted(ROLES.parent.glob("playbooks/*.yml")) + sorted(ROLES.glob("*/tasks/*.yml"))
    used = {
        (str(imported["name"]), str(imported.get("tasks_from", "main")).removesuffix(".yml"))
        for file in files
        for imported in _role_imports(load(file))
    }
    assert ("nvidia_driver", "finish") in used
    missing = sorted(
        f"{role}:{entry}"
        for role, entry in used
        if (ROLES / role / "meta" / "argument_specs.yml").exists()
        and entry not in (load(ROLES / role / "meta" / "argument_specs.yml")["argument_specs"])
    )
    assert not missing, f"entry points without an argument spec: {missing}"


PLAYBOOKS = ROLES.parent / "playbooks"


def unchecked_entry_points() -> Iterator[tuple[str, str, str]]:
    """(playbook, role, entry point) for every role import that skips its argument check."""
    for playbook in sorted(PLAYBOOKS.glob("*.yml")):
        for play in load(playbook) or []:
            for task in play.get("tasks") or []:
                imported = task.get("ansible.builtin.import_role") or {}
                if imported.get("rolespec_validate") is False:
                    yield playbook.name, imported["name"], imported.get("tasks_from", "main")


def test_an_entry_point_imported_unchecked_shares_the_spec_that_was_checked() -> None:
    """nodes.yml imports the node roles' ``finish`` without its argument check, because
    ``prepare`` checked the same variables earlier in the play; a spec of ``finish`` that grew a
    variable of its own would then go unchecked."""
    skipped = list(unchecked_entry_points())
    assert skipped, "no playbook skips an argument check: drop this test"
    for playbook, role, entry in skipped:
        specs = load(ROLES / role / "meta" / "argument_specs.yml")["argument_specs"]
        assert specs[entry].get("options") == specs["prepare"].get("options"), (
            f"{playbook}: {role}'s {entry} is imported with rolespec_validate: false, but its "
            "options differ from prepare's, which the play checked"
        )

"""Write a Triton model's settings into the stack or site file that declares it.

The file is edited round-trip (ruamel.yaml): comments, key order and every other setting stay
as they were, so the change reads as a small diff in review. The edited model is validated
before anything is written.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq

from gpuinfra.addons.triton import TritonModel, TritonSettings
from gpuinfra.errors import ConfigError, Problem, UsageError
from gpuinfra.loading import display_path, validate


@dataclass(frozen=True)
class TritonFile:
    """Where a list of Triton's settings (its models, its serving groups) is declared: the
    file, and the list's key path in it."""

    path: Path
    keys: tuple[str, ...]
    camel: bool

    @classmethod
    def stack(cls, path: Path, setting: str) -> TritonFile:
        """``setting`` (snake_case, ``serving_groups``) in a stack file."""
        keys = ("config", "gpuinfra:addons", "triton", _key(setting, camel=True))
        return cls(path, keys, camel=True)

    @classmethod
    def site(cls, path: Path, setting: str, within: tuple[str, ...] = ()) -> TritonFile:
        """``setting`` (snake_case) in a site's variables file, or ``within`` a mapping of it
        (``all``'s ``vars`` in the inventory file)."""
        return cls(path, (*within, site_key(setting)), camel=False)


def site_key(setting: str) -> str:
    """The site variable that holds a Triton setting."""
    return f"triton_{setting}"


def _yaml() -> YAML:
    yaml = YAML()
    yaml.preserve_quotes = True
    yaml.width = 100
    yaml.indent(mapping=2, sequence=4, offset=2)
    return yaml


def _key(name: str, camel: bool) -> str:
    if not camel:
        return name
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


def _declared(document: Any, where: TritonFile) -> list[Any]:
    node = document
    for key in where.keys:
        if not isinstance(node, dict) or key not in node:
            raise UsageError(f"{display_path(where.path)}: no {'.'.join(where.keys)} to edit")
        node = node[key]
    if not isinstance(node, list):
        raise UsageError(f"{display_path(where.path)}: {'.'.join(where.keys)} is not a list")
    return node


def _named(entries: list[Any], name: str, where: TritonFile, what: str, plural: str) -> Any:
    """The entry called ``name``; else one line naming the entries there are."""
    found = [e for e in entries if isinstance(e, dict) and e.get("name") == name]
    if not found:
        names = ", ".join(str(e.get("name")) for e in entries if isinstance(e, dict))
        raise UsageError(
            f"{display_path(where.path)}: no {what} {name!r} in {'.'.join(where.keys)} "
            f"({plural}: {names or 'none'})"
        )
    return found[0]


def _set(target: Any, values: dict[str, Any], camel: bool) -> None:
    for name, value in values.items():
        key = _key(name, camel)
        if isinstance(value, dict):
            if not isinstance(target.get(key), dict):
                target[key] = CommentedMap()
            _set(target[key], value, camel)
        elif value is None:
            target.pop(key, None)
        elif isinstance(value, list):
            # A short list of numbers, written on one line as the files write them.
            items = CommentedSeq(value)
            items.fa.set_flow_style()
            target[key] = items
        else:
            target[key] = value


def edit(where: TritonFile, model: str, values: dict[str, Any]) -> tuple[str, str]:
    """The file's text before and after setting ``values`` (snake_case, nested) on ``model``.

    Nothing is written: the caller writes the new text once it has shown the change.
    """
    before = where.path.read_text("utf-8")
    yaml = _yaml()
    document = yaml.load(before)
    models = _declared(document, where)
    target = _named(models, model, where, "model", "models")
    _set(target, values, where.camel)
    index = models.index(target)
    validate(TritonModel, dict(target), display_path(where.path), f"{where.keys[-1]}[{index}]")
    buffer = io.StringIO()
    yaml.dump(document, buffer)
    return before, buffer.getvalue()


def canary_weight(
    where: TritonFile, settings: TritonSettings, group: str, weight: int | None
) -> tuple[str, str]:
    """The file's text before and after giving ``group``'s canary ``weight`` percent of the
    traffic (a canary is added where there is none), or removing the canary (``None``).

    The settings as edited are validated whole (a canary needs a gateway) before anything is
    returned; nothing is written.
    """
    shown = display_path(where.path)
    if weight is not None and not 0 <= weight <= 100:
        raise UsageError(f"WEIGHT: {weight} is not a percentage (allowed: 0 to 100)")
    before = where.path.read_text("utf-8")
    yaml = _yaml()
    document = yaml.load(before)
    groups = _declared(document, where)
    target = _named(groups, group, where, "serving group", "groups")
    if weight is None:
        if "canary" not in target:
            raise UsageError(f"{shown}: serving group {group!r} has no canary to remove")
        del target["canary"]
    else:
        if not isinstance(target.get("canary"), dict):
            target["canary"] = CommentedMap()
        target["canary"]["weight"] = weight
    edited = settings.model_dump(by_alias=True, exclude={"serving_groups"})
    edited["servingGroups"] = [_plain(g) for g in groups]
    try:
        validate(TritonSettings, edited, shown, ".".join(where.keys[:-1]))
    except ConfigError as refused:
        # Name the key as the file spells it (a site's triton_serving_groups).
        raise ConfigError(
            Problem(p.file, p.path.replace("servingGroups", where.keys[-1], 1), p.message)
            for p in refused.problems
        ) from None
    buffer = io.StringIO()
    yaml.dump(document, buffer)
    return before, buffer.getvalue()


def _plain(node: Any) -> Any:
    """ruamel's round-trip nodes as plain data, for validation."""
    if isinstance(node, dict):
        return {str(k): _plain(v) for k, v in node.items()}
    if isinstance(node, list):
        return [_plain(v) for v in node]
    return node

"""Write a Triton model's settings into the stack or site file that declares it.

The file is edited round-trip (ruamel.yaml): comments, key order and every other setting stay
as they were, so the change reads as a small diff in review. The edited model is validated
before anything is written.
"""

from __future__ import annotations

import io
from collections import Counter
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


def _named(entries: list[Any], name: str, where: TritonFile, what: str, plural: str) -> int:
    """The index of the entry called ``name``; else one line naming the entries there are."""
    found = [i for i, e in enumerate(entries) if isinstance(e, dict) and e.get("name") == name]
    if not found:
        names = ", ".join(str(e.get("name")) for e in entries if isinstance(e, dict))
        raise UsageError(
            f"{display_path(where.path)}: no {what} {name!r} in {'.'.join(where.keys)} "
            f"({plural}: {names or 'none'})"
        )
    return found[0]


def _reached(document: Any) -> Counter[int]:
    """How many times each mapping and list of a loaded document is reached: from its own place,
    from each alias of its anchor, and through each merge key (``<<``), whose mapping reaches
    the merged values a second time."""
    reached: Counter[int] = Counter()

    def walk(node: Any) -> None:
        if not isinstance(node, dict | list):
            return
        reached[id(node)] += 1
        if reached[id(node)] > 1:
            return
        if isinstance(node, CommentedMap):
            for merged in node.merge:
                walk(merged)
        for child in node.values() if isinstance(node, dict) else node:
            walk(child)

    walk(document)
    return reached


@dataclass(frozen=True)
class _Edit:
    """Changes to one loaded file, made only where no other place in the file reads the node
    changed: through an anchor the change would apply in every place while the diff shows one."""

    where: TritonFile
    reached: Counter[int]

    def shared(self, path: str) -> UsageError:
        return UsageError(
            f"{display_path(self.where.path)}: {path} is shared through a YAML anchor (alias or "
            "<< merge key), so the edit would change every place using it; write it out in full "
            "there first"
        )

    def set(self, target: Any, values: dict[str, Any], path: str) -> None:
        """Set ``values`` (snake_case, nested) on the mapping ``target`` at key path ``path``;
        a value None removes its key. Every node to change is checked before the first change."""
        self.check(target, values, path)
        self._apply(target, values)

    def check(self, target: Any, values: dict[str, Any], path: str) -> None:
        """Refuse where setting ``values`` on ``target`` changes a shared node. Which nodes
        change depends on the keys of ``values`` and on the file, not on the values set."""
        merged = list(target.merge) if isinstance(target, CommentedMap) else []
        for name, value in values.items():
            key = _key(name, self.where.camel)
            within = target.get(key)
            if isinstance(value, dict) and isinstance(within, dict):
                if self.reached[id(within)] > 1:
                    raise self.shared(f"{path}.{key}")
                self.check(within, value, f"{path}.{key}")
                continue
            if self.reached[id(target)] > 1:
                raise self.shared(path)
            if any(key in m for m in merged):
                # Written here, the merged value would still stand elsewhere; removed, it would
                # come back through the merge.
                raise self.shared(f"{path}.{key}")

    def _apply(self, target: Any, values: dict[str, Any]) -> None:
        for name, value in values.items():
            key = _key(name, self.where.camel)
            if isinstance(value, dict):
                if not isinstance(target.get(key), dict):
                    target[key] = CommentedMap()
                self._apply(target[key], value)
            elif value is None:
                target.pop(key, None)
            elif isinstance(value, list):
                # A short list of numbers, written on one line as the files write them.
                items = CommentedSeq(value)
                items.fa.set_flow_style()
                target[key] = items
            else:
                target[key] = value


def _path(where: TritonFile, index: int) -> str:
    return f"{'.'.join(where.keys)}[{index}]"


def check_shared(where: TritonFile, model: str, values: dict[str, Any]) -> None:
    """Refuse, as ``edit`` would, where setting ``values`` on ``model`` changes a node the file
    shares through an anchor. Only the keys of ``values`` count, so this can run before the
    values to write are known."""
    document = _yaml().load(where.path.read_text("utf-8"))
    models = _declared(document, where)
    index = _named(models, model, where, "model", "models")
    _Edit(where, _reached(document)).check(models[index], values, _path(where, index))


def edit(where: TritonFile, model: str, values: dict[str, Any]) -> tuple[str, str]:
    """The file's text before and after setting ``values`` (snake_case, nested) on ``model``.

    Nothing is written: the caller writes the new text once it has shown the change. A value
    the file shares through an anchor is refused, whatever ``values`` set it to.
    """
    before = where.path.read_text("utf-8")
    yaml = _yaml()
    document = yaml.load(before)
    models = _declared(document, where)
    index = _named(models, model, where, "model", "models")
    _Edit(where, _reached(document)).set(models[index], values, _path(where, index))
    validate(
        TritonModel, dict(models[index]), display_path(where.path), f"{where.keys[-1]}[{index}]"
    )
    buffer = io.StringIO()
    yaml.dump(document, buffer)
    return before, buffer.getvalue()


def canary_weight(
    where: TritonFile, settings: TritonSettings, group: str, weight: int | None
) -> tuple[str, str]:
    """The file's text before and after giving ``group``'s canary ``weight`` percent of the
    traffic (a canary is added where there is none), or removing the canary (``None``).

    The settings as edited are validated whole (a canary needs a gateway) before anything is
    returned; nothing is written. A canary or group the file shares through an anchor is
    refused.
    """
    shown = display_path(where.path)
    if weight is not None and not 0 <= weight <= 100:
        raise UsageError(f"WEIGHT: {weight} is not a percentage (allowed: 0 to 100)")
    before = where.path.read_text("utf-8")
    yaml = _yaml()
    document = yaml.load(before)
    groups = _declared(document, where)
    index = _named(groups, group, where, "serving group", "groups")
    target = groups[index]
    if weight is None and "canary" not in target:
        raise UsageError(f"{shown}: serving group {group!r} has no canary to remove")
    change = {"canary": None if weight is None else {"weight": weight}}
    _Edit(where, _reached(document)).set(target, change, _path(where, index))
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

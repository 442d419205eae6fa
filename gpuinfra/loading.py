"""Load YAML files and validate them into typed models, turning every mistake into ``Problem``s.

This is the one place where pydantic's errors become the project's error contract: the file,
the key path (``nodePools[0].instanceType``) and what is allowed, with a suggestion for
misspelled keys and choices.
"""

from __future__ import annotations

import contextlib
import types
import typing
from enum import Enum
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from gpuinfra.errors import ConfigError, Problem, UsageError
from gpuinfra.paths import repo_root
from gpuinfra.suggest import allowed, did_you_mean

M = TypeVar("M", bound=BaseModel)


def display_path(path: Path) -> str:
    """A path as the user reads it: relative to the repository (or the working directory)."""
    resolved = path.resolve()
    bases: list[Path] = []
    # Outside a repository (or in a deleted directory) the path shows as it was given.
    with contextlib.suppress(UsageError):
        bases.append(repo_root())
    with contextlib.suppress(OSError):
        bases.append(Path.cwd().resolve())
    for base in bases:
        try:
            return str(resolved.relative_to(base))
        except ValueError:
            continue
    return str(path)


class Vaulted(str):
    """A value encrypted with Ansible Vault (``!vault |``), as gpuinfra shows it.

    gpuinfra reads inventories without the vault password: it checks the rest of the file and
    shows the value as ``<vaulted>`` wherever it would show the value (plan, diff, messages).
    Ansible decrypts it when it runs the playbooks.
    """

    SHOWN = "<vaulted>"

    def __new__(cls, ciphertext: str = "") -> Vaulted:
        del ciphertext  # never kept: nothing gpuinfra prints can carry it
        return super().__new__(cls, cls.SHOWN)


class _Loader(yaml.SafeLoader):
    """YAML's safe loader, with Ansible Vault's tag."""


def _vaulted(loader: yaml.SafeLoader, node: yaml.Node) -> Vaulted:
    return Vaulted(str(loader.construct_scalar(node)))  # type: ignore[arg-type]


_Loader.add_constructor("!vault", _vaulted)


def load_yaml(path: Path) -> Any:
    """Parse one YAML file; a missing file or a syntax error is a ConfigError, not a traceback."""
    shown = display_path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError([Problem(shown, "", "file not found")]) from None
    except OSError as exc:
        raise ConfigError([Problem(shown, "", f"cannot read: {exc.strerror}")]) from None
    try:
        # A SafeLoader with one more tag: no arbitrary objects.
        return yaml.load(text, Loader=_Loader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        reason = getattr(exc, "problem", None) or str(exc)
        raise ConfigError([Problem(shown, where, f"not valid YAML: {reason}")]) from None


def join_path(parts: typing.Iterable[str | int]) -> str:
    out = ""
    for part in parts:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


def validate(model: type[M], data: Any, file: str, prefix: str = "") -> M:
    """Validate ``data`` into ``model`` or raise ConfigError listing every problem."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(problems_from(exc, model, file, prefix)) from None


def problems_from(
    exc: ValidationError, model: type[BaseModel], file: str, prefix: str = ""
) -> list[Problem]:
    return [
        Problem(file, join_path([prefix, *loc] if prefix else loc), message)
        for loc, message in located_messages(exc, model)
    ]


def located_messages(
    exc: ValidationError, model: type[BaseModel]
) -> list[tuple[tuple[str | int, ...], str]]:
    """Each error of ``exc`` as (key path, what is wrong), in the words the stack files get."""
    located: list[tuple[tuple[str | int, ...], str]] = []
    # A misspelled key also makes the real key "missing": report the spelling first.
    errors = sorted(exc.errors(include_url=False), key=lambda e: e["type"] != "extra_forbidden")
    for err in errors:
        loc = [p for p in err["loc"] if not _is_union_tag(p)]
        located.append((tuple(loc), _message(err, model, loc)))
    return located


def _is_union_tag(part: Any) -> bool:
    # pydantic adds the tried member type to the location of union errors ("function-after[...]").
    return isinstance(part, str) and ("[" in part or part in {"str", "int", "float", "bool"})


def _message(err: Any, model: type[BaseModel], loc: list[Any]) -> str:
    kind = err["type"]
    ctx = err.get("ctx") or {}
    value = err.get("input")
    if kind == "extra_forbidden":
        name = str(loc[-1])
        known = _field_names(model, loc[:-1])
        hint = did_you_mean(name, known)
        return f"unknown key '{name}'{hint}" + (f" (allowed: {allowed(known)})" if not hint else "")
    if kind == "missing":
        return "required key is missing"
    if kind in {"literal_error", "enum"}:
        choices = _choices(model, loc)
        hint = did_you_mean(str(value), choices) if choices else ""
        expected = allowed(choices) if choices else ctx.get("expected", "")
        return f"{value!r} is not allowed{hint} (allowed: {expected})"
    if kind.startswith("value_error") or kind == "assertion_error":
        msg = str(err["msg"])
        for lead in ("Value error, ", "Assertion failed, "):
            msg = msg.removeprefix(lead)
        return msg
    msg = str(err["msg"])
    if kind.endswith("_type") or kind.endswith("_parsing"):
        return f"{msg[0].lower()}{msg[1:]}, got {value!r}"
    return f"{msg[0].lower()}{msg[1:]}"


def _resolve(model: type[BaseModel], loc: list[Any]) -> Any:
    """Follow ``loc`` through the model's annotations; returns the annotation at that place."""
    current: Any = model
    for part in loc:
        current = _unwrap(current)
        if isinstance(current, type) and issubclass(current, BaseModel):
            field = _field_by_key(current, str(part))
            if field is None:
                return None
            current = field
            continue
        origin = typing.get_origin(current)
        args = typing.get_args(current)
        if origin in (list, tuple, set, frozenset) and args:
            current = args[0]
        elif origin is dict and len(args) == 2:
            current = args[1]
        else:
            return None
    return _unwrap(current)


def _unwrap(annotation: Any) -> Any:
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _unwrap(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType):
        members = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(members) == 1:
            return _unwrap(members[0])
    return annotation


def _field_by_key(model: type[BaseModel], key: str) -> Any:
    for name, field in model.model_fields.items():
        if key in (name, field.alias):
            return field.annotation
    return None


def _field_names(model: type[BaseModel], loc: list[Any]) -> list[str]:
    target = _resolve(model, loc)
    if isinstance(target, type) and issubclass(target, BaseModel):
        return [field.alias or name for name, field in target.model_fields.items()]
    return []


def _choices(model: type[BaseModel], loc: list[Any]) -> list[str]:
    target = _resolve(model, loc)
    if typing.get_origin(target) is typing.Literal:
        return [str(a) for a in typing.get_args(target)]
    if isinstance(target, type) and issubclass(target, Enum):
        return [str(m.value) for m in target]
    return []

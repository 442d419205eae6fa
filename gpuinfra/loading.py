"""Read the files a user edits and validate them into typed models, as ``Problem``s.

Every file a user edits (versions.yaml, stack files, a site's hosts.yml and vars files, add-on
settings) is read here, by one bounded reader: no duplicate keys, no alias that expands beyond
``MAX_NODES``, no nesting deeper than ``MAX_DEPTH``, no file over ``MAX_BYTES``, UTF-8 text only,
and every filesystem error as one line naming the file. Values keep their YAML types: the
models are validated in pydantic's strict JSON mode, so ``on`` is a boolean and never a 1.

This is also the one place where pydantic's errors become the project's error contract: the
file, the key path (``nodePools[0].instanceType``) and what is allowed, with a suggestion for
misspelled keys and choices.
"""

from __future__ import annotations

import contextlib
import datetime
import errno
import json
import os
import re
import stat
import types
import typing
from enum import Enum
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError
from pydantic_core import PydanticCustomError
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from gpuinfra.errors import ConfigError, Problem, UsageError, excerpt, shortened
from gpuinfra.paths import repo_root
from gpuinfra.suggest import allowed, closest, did_you_mean

M = TypeVar("M", bound=BaseModel)

# Bounds on what a user-edited file may hold (the README's "Configuration errors" lists them).
# A site of a few thousand hosts is well inside each; an alias bomb or a runaway generator is not.
MAX_BYTES = 1024 * 1024
MAX_DEPTH = 64
MAX_NODES = 100_000


def display_path(path: Path) -> str:
    """A path as the user reads it: relative to the repository (or the working directory)."""
    try:
        resolved = Path(os.path.abspath(path))
    except (OSError, ValueError):
        return excerpt(str(path), 120)
    bases: list[Path] = []
    # Outside a repository (or in a deleted directory) the path shows as it was given.
    with contextlib.suppress(UsageError, OSError, RuntimeError):
        bases.append(repo_root())
    with contextlib.suppress(OSError, RuntimeError):
        bases.append(Path.cwd().resolve())
    shown = str(path)
    for base in bases:
        try:
            shown = str(resolved.relative_to(base))
            break
        except ValueError:
            continue
    return excerpt(shown, 120)


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


def _vaulted(loader: yaml.SafeLoader, node: yaml.Node) -> Vaulted:
    return Vaulted(str(loader.construct_scalar(node)))  # type: ignore[arg-type]


_ERRNO_WORDS = {
    errno.ENOENT: "file not found",
    errno.EACCES: "permission denied: cannot read it",
    errno.EPERM: "permission denied: cannot read it",
    errno.EISDIR: "is a directory, not a file",
    errno.ELOOP: "a symlink loop: the link never reaches a file",
    errno.ENAMETOOLONG: "name too long (each part of a path takes at most 255 bytes)",
    errno.ENOTDIR: "a part of the path is not a directory",
}


def fs_problem(path: Path, exc: OSError | RuntimeError, path_in_file: str = "") -> Problem:
    """One line for a filesystem error on ``path``: missing, unreadable, a loop, too long."""
    if isinstance(exc, RuntimeError):  # pathlib's own "Symlink loop" (Python 3.11)
        words = _ERRNO_WORDS[errno.ELOOP]
    elif exc.errno == errno.ENOENT and path.is_symlink():
        words = f"a symlink to '{excerpt(os.readlink(path), 80)}', which does not exist"
    else:
        words = _ERRNO_WORDS.get(exc.errno or 0, f"cannot read: {exc.strerror or exc}")
    return Problem(display_path(path), path_in_file, words)


def is_dir(path: Path) -> bool:
    """Whether ``path`` is a directory; a path the system cannot even look at is an error."""
    try:
        return stat.S_ISDIR(path.stat().st_mode)
    except FileNotFoundError:
        return False
    except (OSError, RuntimeError) as exc:
        if isinstance(exc, OSError) and exc.errno == errno.ENOTDIR:
            return False
        raise ConfigError([fs_problem(path, exc)]) from None


def is_file(path: Path) -> bool:
    """Whether something exists at ``path`` that is not a directory (read_text says what)."""
    try:
        path.stat()
    except FileNotFoundError:
        return False
    except (OSError, RuntimeError) as exc:
        if isinstance(exc, OSError) and exc.errno == errno.ENOTDIR:
            return False
        raise ConfigError([fs_problem(path, exc)]) from None
    return not is_dir(path)


def list_dir(path: Path) -> list[Path]:
    """The entries of a directory, sorted; an unreadable one is a ConfigError naming it."""
    try:
        return sorted(path.iterdir())
    except (OSError, RuntimeError) as exc:
        raise ConfigError([fs_problem(path, exc)]) from None


def read_text(path: Path) -> str:
    """A user-edited file's text: a regular file of at most MAX_BYTES, in UTF-8."""
    shown = display_path(path)
    try:
        info = path.stat()
        if stat.S_ISDIR(info.st_mode):
            raise IsADirectoryError(errno.EISDIR, "is a directory")
        if not stat.S_ISREG(info.st_mode):
            raise ConfigError([Problem(shown, "", "not a regular file (allowed: a plain file)")])
        if info.st_size > MAX_BYTES:
            raise ConfigError([_too_large(shown, info.st_size)])
        with path.open("rb") as handle:
            data = handle.read(MAX_BYTES + 1)
    except (OSError, RuntimeError) as exc:
        raise ConfigError([fs_problem(path, exc)]) from None
    if len(data) > MAX_BYTES:
        raise ConfigError([_too_large(shown, len(data))])
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise ConfigError(
            [
                Problem(
                    shown,
                    f"line {line}",
                    f"byte 0x{data[exc.start]:02x} at offset {exc.start} is not UTF-8 text "
                    "(allowed: UTF-8; save the file as UTF-8)",
                )
            ]
        ) from None


def _too_large(shown: str, size: int) -> Problem:
    return Problem(shown, "", f"{size} bytes is over the {MAX_BYTES} bytes a file may hold")


class _Refused(yaml.MarkedYAMLError):
    """A YAML document this reader refuses although YAML allows it."""


def _mark(node: Node) -> Any:
    return node.start_mark


class _Loader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing duplicate keys and nesting deeper than MAX_DEPTH."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent: Node | None, index: Any) -> Node | None:
        # PyYAML composes recursively: bound the depth before Python's own stack runs out.
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                raise _Refused(
                    problem=f"nested deeper than {MAX_DEPTH} levels (allowed: at most {MAX_DEPTH})",
                    problem_mark=self.peek_event().start_mark,  # type: ignore[no-untyped-call]
                )
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_mapping(self, node: MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=True)
            with contextlib.suppress(TypeError):  # an unhashable key: PyYAML reports it
                if key in seen:
                    raise _Refused(
                        problem=f"duplicate key {excerpt(repr(key), 60)} (first at line "
                        f"{seen[key] + 1}; allowed: each key once, or the last would silently win)",
                        problem_mark=_mark(key_node),
                    )
                seen[key] = key_node.start_mark.line
        return super().construct_mapping(node, deep)


# Ansible Vault's tag: the value is read as <vaulted>, never decrypted.
_Loader.add_constructor("!vault", _vaulted)


def _expanded_size(root: Node) -> int:
    """How many nodes the document holds once every alias is expanded (memoized per node)."""
    sizes: dict[int, int] = {}
    active: set[int] = set()

    def size(node: Node) -> int:
        key = id(node)
        if key in sizes:
            return sizes[key]
        if key in active:
            raise _Refused(problem="an alias refers to its own anchor", problem_mark=_mark(node))
        active.add(key)
        total = 1
        if isinstance(node, SequenceNode):
            total += sum(size(child) for child in node.value)
        elif isinstance(node, MappingNode):
            total += sum(size(k) + size(v) for k, v in node.value)
        active.discard(key)
        sizes[key] = min(total, MAX_NODES + 1)
        return sizes[key]

    stack: list[Node] = [root]
    # Size the deepest nodes first so that the recursion above stays shallow.
    order: list[Node] = []
    seen: set[int] = set()
    while stack:
        node = stack.pop()
        if id(node) in seen or isinstance(node, ScalarNode):
            continue
        seen.add(id(node))
        order.append(node)
        children = node.value if isinstance(node, SequenceNode) else []
        if isinstance(node, MappingNode):
            children = [n for pair in node.value for n in pair]
        stack.extend(children)
    for node in reversed(order):
        size(node)
    return size(root)


def parse_yaml(text: str, shown: str) -> Any:
    """The one YAML document in ``text`` (of the file shown as ``shown``), bounded."""
    try:
        # The reader refuses control characters as it is made, before any parsing.
        loader = _Loader(text)
    except yaml.reader.ReaderError as exc:
        before = text[: exc.position]
        where = f"line {before.count(chr(10)) + 1}, column {exc.position - before.rfind(chr(10))}"
        raise ConfigError(
            [
                Problem(
                    shown,
                    where,
                    f"not valid YAML: control character {exc.character:#06x} "
                    "(allowed: printable characters, tabs and line breaks)",
                )
            ]
        ) from None
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        nodes = _expanded_size(node)
        if nodes > MAX_NODES:
            raise ConfigError(
                [
                    Problem(
                        shown,
                        "",
                        f"expands to over {MAX_NODES} values once its aliases are expanded "
                        f"(allowed: at most {MAX_NODES})",
                    )
                ]
            )
        return loader.construct_document(node)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        reason = getattr(exc, "problem", None) or str(exc)
        lead = "" if isinstance(exc, _Refused) else "not valid YAML: "
        raise ConfigError([Problem(shown, where, f"{lead}{excerpt(str(reason), 160)}")]) from None
    finally:
        loader.dispose()


def load_yaml(path: Path) -> Any:
    """Read and parse one user-edited YAML (or JSON) file; every mistake is a ConfigError."""
    return parse_yaml(read_text(path), display_path(path))


def plain_problems(data: Any, file: str, path: tuple[str | int, ...] = ()) -> list[Problem]:
    """Values YAML reads as something a setting never is: a non-string key, a date."""
    found: list[Problem] = []
    if isinstance(data, dict):
        for key, value in data.items():
            if not isinstance(key, str):
                found.append(
                    Problem(
                        file,
                        join_path(path) or "(top level)",
                        f"key {excerpt(repr(key), 40)} is read as a {type(key).__name__}; "
                        "quote it (allowed: string keys)",
                    )
                )
                continue
            found += plain_problems(value, file, (*path, key))
    elif isinstance(data, list):
        for i, value in enumerate(data):
            found += plain_problems(value, file, (*path, i))
    elif isinstance(data, datetime.date):
        found.append(
            Problem(file, join_path(path), f"{data} is read as a date; quote it to keep a string")
        )
    return found


def join_path(parts: typing.Iterable[str | int]) -> str:
    out = ""
    for part in parts:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


def validate(
    model: type[M],
    data: Any,
    file: str,
    prefix: str = "",
    *,
    strict: bool = False,
    by_field: bool = False,
) -> M:
    """Validate ``data`` into ``model`` or raise ConfigError listing every problem.

    ``strict`` is for data read from a file: each value keeps its YAML type (pydantic's strict
    JSON mode: a list fills a tuple and a string an enum, but no boolean becomes a number and
    no number a string). ``by_field``: see ``located_messages``.
    """
    try:
        if not strict:
            return model.model_validate(data)
        odd = plain_problems(data, file)
        if odd:
            raise ConfigError(odd)
        return model.model_validate_json(json.dumps(data), strict=True)
    except ValidationError as exc:
        raise ConfigError(problems_from(exc, model, file, prefix, by_field=by_field)) from None


def problems_from(
    exc: ValidationError,
    model: type[BaseModel],
    file: str,
    prefix: str = "",
    *,
    by_field: bool = False,
) -> list[Problem]:
    return [
        Problem(file, join_path([prefix, *loc] if prefix else loc), message)
        for loc, message in located_messages(exc, model, by_field=by_field)
    ]


# What a check across a model's fields tells besides its message (cross_field_error).
_FIELD = "field"
_ALLOWED = "allowed"


def cross_field_error(message: str, *field: str | int, allowed: str = "") -> PydanticCustomError:
    """The error a model's check across its fields raises.

    It stays where the model is, as a stack file's key names it (``addons.triton``), and
    carries ``field``, the path below the model (field names and list indexes) of the value it
    is about, and ``allowed``, what would be accepted there, for readers that name each field
    on its own: a site's role variables (``triton_min_replicas``).
    """
    context: dict[str, Any] = {_FIELD: field}
    if allowed:
        context[_ALLOWED] = allowed
    # pydantic fills the template from the context, key by key in order: the message goes in
    # last, so that no "{...}" in it (a user's value) is taken for a key.
    context["message"] = message
    return PydanticCustomError("value_error", "{message}", context)


def refuse_duplicates(names: list[str], what: str, field: str, *key: str, allowed: str) -> None:
    """A cross_field_error at the first entry of the list ``field`` whose name (``names``, in
    the list's order; at ``key`` within the entry) came before: "duplicate <what>: a, b"."""
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        again = next(i for i, n in enumerate(names) if n in names[:i])
        raise cross_field_error(
            f"duplicate {what}: {', '.join(dupes)}", field, again, *key, allowed=allowed
        )


def located_messages(
    exc: ValidationError, model: type[BaseModel], *, by_field: bool = False
) -> list[tuple[tuple[str | int, ...], str]]:
    """Each error of ``exc`` as (key path, what is wrong), in the words the stack files get.

    ``by_field``: a check across fields (cross_field_error) is located at the field it names,
    with what is allowed there, as role variables name each setting; otherwise at its model.
    """
    located: list[tuple[tuple[str | int, ...], str]] = []
    # A misspelled key also makes the real key "missing": report the spelling first.
    errors = sorted(exc.errors(include_url=False), key=lambda e: e["type"] != "extra_forbidden")
    meant: set[tuple[str | int, ...]] = set()
    for err in errors:
        loc = [p for p in err["loc"] if not _is_union_tag(p)]
        message = _message(err, model, loc)
        ctx = err.get("ctx") or {}
        if by_field and _FIELD in ctx:
            loc += ctx[_FIELD]
            if _ALLOWED in ctx:
                message += f" (allowed: {ctx[_ALLOWED]})"
        if err["type"] == "missing" and tuple(loc) in meant:
            # The misspelling's line already names this key: one mistake, one line.
            continue
        if err["type"] == "extra_forbidden" and (
            hint := closest(str(loc[-1]), _field_names(model, loc[:-1]))
        ):
            meant.add((*loc[:-1], hint))
        located.append((tuple(loc), message))
    return located


_UNION_TAG = re.compile(r"^[a-z][a-z-]*\[.*\]$")


def _is_union_tag(part: Any) -> bool:
    # pydantic adds the tried member type to the location of union errors
    # ("function-after[...]", "list[str]"), and "[key]" after a mapping's key that failed its
    # own check; a user's key such as "[bold]x" is none of these.
    return isinstance(part, str) and (
        bool(_UNION_TAG.match(part)) or part in {"str", "int", "float", "bool", "[key]"}
    )


def _message(err: Any, model: type[BaseModel], loc: list[Any]) -> str:
    kind = err["type"]
    ctx = err.get("ctx") or {}
    value = err.get("input")
    if kind == "extra_forbidden":
        key = str(loc[-1])
        name = excerpt(key, 40)
        known = _field_names(model, loc[:-1])
        hint = did_you_mean(key, known)
        if not known:
            # A member of a union pydantic tried: it says the key is extra, not which member.
            return f"unknown key '{name}'"
        return f"unknown key '{name}'{hint}" + (f" (allowed: {allowed(known)})" if not hint else "")
    if kind == "missing":
        return "required key is missing"
    if kind == "string_type" and isinstance(value, int | float) and not isinstance(value, bool):
        # YAML read 12.20 as the number 12.2: the text as written is gone, so say how to keep it.
        return (
            f"input should be a valid string, got the number {excerpt(repr(value))}; quote the "
            "value to keep it as written"
        )
    if kind == "union_tag_invalid":
        # A tagged union (an alert receiver's type): the tag names which model applies.
        tags = re.findall(r"'([^']*)'", str(ctx.get("expected_tags", "")))
        key = str(ctx.get("discriminator", "")).strip("'") or "the tag"
        hint = did_you_mean(str(ctx.get("tag", value)), tags)
        return (
            f"{key} {excerpt(repr(ctx.get('tag', value)))} is not allowed{hint} "
            f"(allowed: {allowed(tags)})"
        )
    if kind in {"literal_error", "enum"}:
        choices = _choices(model, loc)
        hint = did_you_mean(str(value), choices) if choices else ""
        expected = allowed(choices) if choices else ctx.get("expected", "")
        return f"{excerpt(repr(value))} is not allowed{hint} (allowed: {expected})"
    if kind.startswith("value_error") or kind == "assertion_error":
        msg = str(err["msg"])
        for lead in ("Value error, ", "Assertion failed, "):
            msg = msg.removeprefix(lead)
        return excerpt(shortened(msg, 240), 240)
    # Strict validation runs in pydantic's JSON mode; a YAML file has lists and mappings.
    msg = str(err["msg"]).replace("a valid array", "a list").replace("a valid tuple", "a list")
    msg = msg.replace("an object", "a mapping").replace("a valid dictionary", "a mapping")
    if kind.endswith("_type") or kind.endswith("_parsing"):
        return f"{msg[0].lower()}{msg[1:]}, got {excerpt(repr(value))}"
    if kind in _BOUND_KINDS:
        return f"{msg[0].lower()}{msg[1:]}, got {excerpt(repr(value))}"
    return f"{msg[0].lower()}{msg[1:]}"


# Range and length errors: pydantic says what is allowed; the value is added.
_BOUND_KINDS = {
    "greater_than",
    "greater_than_equal",
    "less_than",
    "less_than_equal",
    "too_short",
    "too_long",
    "string_too_short",
    "string_too_long",
    "string_pattern_mismatch",
}


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

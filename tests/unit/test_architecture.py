"""The wings and their arrows (docs/decisions/0009-wings.md): imports only go down.

Every module's imports are read with ``ast``, wherever they sit: at the top, inside a function,
under ``TYPE_CHECKING``. Each module belongs to one wing; an import from a wing to one it may not
use fails with the file, the line and the module imported.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import ROOT

# What each wing may import besides itself. The stack program is run by the review wing's stack
# runner (runpy, not an import) and composes components; components build on the core only.
ALLOWED: dict[str, frozenset[str]] = {
    "core": frozenset(),
    "components": frozenset({"core"}),
    "stacks": frozenset({"components", "core"}),
    "review": frozenset({"stacks", "components", "core"}),
    "lab": frozenset({"core"}),
    "ops": frozenset({"core"}),
    "cli": frozenset({"review", "lab", "ops", "core"}),
    "policies": frozenset({"review", "core"}),
    "ansible": frozenset({"core"}),
}

# Where the code of each wing lives, and so which imports are the project's own; benchmarks and
# tests use the wings and belong to none.
SOURCES = ("gpuinfra", "components", "stacks", "policies", "plugins", "roles")


def wing(module: str) -> str:
    """The wing a module belongs to, by its dotted name."""
    parts = module.split(".")
    if parts[0] == "gpuinfra":
        if len(parts) > 1 and parts[1] in {"review", "lab", "ops", "cli"}:
            return parts[1]
        # ``python -m gpuinfra`` is the CLI's entry point, kept at the top so the name is short.
        if len(parts) > 1 and parts[1] == "__main__":
            return "cli"
        return "core"
    if parts[0] in {"plugins", "roles"}:
        return "ansible"
    return parts[0]


@dataclass(frozen=True)
class Import:
    source: str
    path: Path
    line: int
    target: str

    def __str__(self) -> str:
        where = f"{self.path.relative_to(ROOT)}:{self.line}"
        return f"{where} → {self.target} ({wing(self.source)} → {wing(self.target)})"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _source_files() -> Iterator[Path]:
    for top in SOURCES:
        for path in sorted((ROOT / top).rglob("*.py")):
            relative = path.relative_to(ROOT).parts
            if "tests" in relative or "__pycache__" in relative:
                continue
            yield path


def _is_module(name: str) -> bool:
    base = ROOT.joinpath(*name.split("."))
    return base.with_suffix(".py").is_file() or (base / "__init__.py").is_file()


def _targets(node: ast.Import | ast.ImportFrom, module: str, is_package: bool) -> Iterable[str]:
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if node.level:
        package = module.split(".") if is_package else module.split(".")[:-1]
        base = ".".join(package[: len(package) - node.level + 1])
        imported = f"{base}.{node.module}" if node.module else base
    else:
        imported = node.module or ""
    # ``from a import b``: the module a.b where b is one, else a itself (b is a name in it).
    found = [f"{imported}.{a.name}" for a in node.names if _is_module(f"{imported}.{a.name}")]
    return found if len(found) == len(node.names) else [imported, *found]


def module_imports(module: str, path: Path, text: str) -> list[Import]:
    """Every import of the project's own modules in one module's source."""
    found = []
    for node in ast.walk(ast.parse(text, filename=str(path))):
        if isinstance(node, ast.Import | ast.ImportFrom):
            for target in _targets(node, module, path.name == "__init__.py"):
                if target.split(".")[0] in SOURCES:
                    found.append(Import(module, path, node.lineno, target))
    return found


def imports(paths: Iterable[Path]) -> list[Import]:
    return [
        i for p in paths for i in module_imports(_module_name(p), p, p.read_text(encoding="utf-8"))
    ]


def wrong_way(found: Iterable[Import]) -> list[str]:
    return [
        str(i)
        for i in found
        if wing(i.target) != wing(i.source) and wing(i.target) not in ALLOWED[wing(i.source)]
    ]


def _reaches(graph: dict[str, set[str]], start: str, goal: str) -> bool:
    seen, todo = set(), [start]
    while todo:
        node = todo.pop()
        if node == goal:
            return True
        if node not in seen:
            seen.add(node)
            todo.extend(graph.get(node, ()))
    return False


def cycles_across_wings(found: Iterable[Import]) -> list[str]:
    """Imports that come back: between modules of different wings, or between wings."""
    found = list(found)
    modules: dict[str, set[str]] = {}
    crossing: dict[tuple[str, str], Import] = {}
    for i in found:
        modules.setdefault(i.source, set()).add(i.target)
        if wing(i.source) != wing(i.target):
            crossing.setdefault((wing(i.source), wing(i.target)), i)
    wings: dict[str, set[str]] = {}
    for source, target in crossing:
        wings.setdefault(source, set()).add(target)
    bad = [
        f"{i}, and {i.target} leads back to {i.source}"
        for i in found
        if wing(i.source) != wing(i.target) and _reaches(modules, i.target, i.source)
    ]
    bad += [
        f"{example}, and wing {target} leads back to wing {source}"
        for (source, target), example in sorted(crossing.items())
        if _reaches(wings, target, source)
    ]
    return bad


@pytest.fixture(scope="module")
def project_imports() -> list[Import]:
    return imports(_source_files())


def test_every_module_belongs_to_a_known_wing(project_imports: list[Import]) -> None:
    modules = {_module_name(p) for p in _source_files()}
    assert {wing(m) for m in modules} <= ALLOWED.keys()
    # A scan that found nothing would pass everything: it sees the CLI's lazy import of the plan.
    assert any(
        (i.source, i.target) == ("gpuinfra.cli.review", "gpuinfra.review.plan")
        for i in project_imports
    )


def test_imports_only_go_down(project_imports: list[Import]) -> None:
    offenders = wrong_way(project_imports)
    assert not offenders, "imports against the arrows:\n" + "\n".join(offenders)


def test_no_cycle_between_wings_or_their_modules(project_imports: list[Import]) -> None:
    offenders = cycles_across_wings(project_imports)
    assert not offenders, "import cycles across wings:\n" + "\n".join(offenders)


def test_an_import_inside_a_function_or_under_type_checking_counts() -> None:
    """The scan reads nested imports too, and names a wrong one with its file and line."""
    source = (
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n"
        "    from gpuinfra.review import plan\n"
        "def f() -> None:\n"
        "    from gpuinfra.cli import console\n"
        "    from gpuinfra import errors, lab\n"
    )
    found = module_imports("gpuinfra.config", ROOT / "gpuinfra" / "config.py", source)
    assert wrong_way(found) == [
        "gpuinfra/config.py:3 → gpuinfra.review.plan (core → review)",
        "gpuinfra/config.py:5 → gpuinfra.cli.console (core → cli)",
        "gpuinfra/config.py:6 → gpuinfra.lab (core → lab)",
    ]

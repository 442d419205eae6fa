"""The project's own documents hold together: each decision record has a number of its own, and
every relative link in a markdown file names a file that exists."""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path

from tests.conftest import ROOT

DECISIONS = ROOT / "docs" / "decisions"
LINK = re.compile(r"\]\(([^)\s]+)\)")


def markdown_files() -> list[Path]:
    """Every markdown file of the checkout, not those under hidden folders (.venv, .lab, .git)."""
    return sorted(
        path
        for path in ROOT.rglob("*.md")
        if not any(part.startswith(".") for part in path.relative_to(ROOT).parts)
    )


def test_each_decision_record_has_a_number_of_its_own() -> None:
    by_number: defaultdict[str, list[str]] = defaultdict(list)
    for record in DECISIONS.glob("*.md"):
        number = re.match(r"(\d{4})-", record.name)
        assert number, f"{record.name}: a decision record is named NNNN-title.md"
        by_number[number.group(1)].append(record.name)
    shared = {number: names for number, names in by_number.items() if len(names) > 1}
    assert not shared, f"decision numbers used twice: {shared}"


def test_each_record_opens_with_its_own_number() -> None:
    for record in sorted(DECISIONS.glob("*.md")):
        title = record.read_text(encoding="utf-8").splitlines()[0]
        number = re.match(r"# (\d+)[.:] ", title)
        assert number and int(number.group(1)) == int(record.name[:4]), f"{record.name}: {title!r}"


def test_relative_links_in_markdown_name_files_that_exist() -> None:
    files = markdown_files()
    assert len(files) > 10, files  # the README, benchmarks/README.md and the decisions at least
    broken = [
        f"{path.relative_to(ROOT)}: {target}"
        for path in files
        for target in LINK.findall(path.read_text(encoding="utf-8"))
        if not re.match(r"^[a-z][a-z0-9+.-]*:", target)
        and not target.startswith("#")
        and not (path.parent / target.split("#")[0]).exists()
    ]
    assert not broken, "\n".join(broken)

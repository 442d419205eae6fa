"""'Did you mean' suggestions for misspelled keys and names."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


def closest(word: str, choices: Iterable[str]) -> str | None:
    """The choice ``word`` most likely misspells, or None when none is close."""
    candidates = sorted(set(choices))
    match = difflib.get_close_matches(word, candidates, n=1, cutoff=0.6)
    if not match:
        # Case-only and separator-only differences (instanceType vs instance_type) are common.
        folded = {c.lower().replace("_", "").replace("-", ""): c for c in candidates}
        key = word.lower().replace("_", "").replace("-", "")
        if key in folded:
            match = [folded[key]]
    return match[0] if match else None


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """Return ``"; did you mean 'x'?"`` for the closest choice, or ``""`` when none is close."""
    match = closest(word, choices)
    return f"; did you mean '{match}'?" if match else ""


def allowed(choices: Iterable[str], limit: int = 12) -> str:
    """A short human list of allowed values: ``'a', 'b' or 'c'``."""
    items = [f"'{c}'" for c in sorted(set(choices))]
    if len(items) > limit:
        items = [*items[:limit], f"... ({len(items) - limit} more)"]
    if len(items) <= 1:
        return items[0] if items else "nothing"
    return ", ".join(items[:-1]) + " or " + items[-1]

"""Non-neural completers for one masked line, so the model's scores have a floor to beat.

- `previous_line`: repeat the nearest non-blank line above the hole.
- `similar_line`: the line of the file whose surroundings best match the hole's: every non-blank
  line L of the prefix and suffix is scored by the token-Jaccard similarity of the line above L
  with the line above the hole, plus that of the line below L with the line below the hole; the
  best-scoring L (ties: nearest to the hole) is the answer. It wins on repetitive code (parallel
  branches, repeated assertions, mirrored assignments).
- `blank`: always the empty line (a lower bound: what passes with the line deleted).

Invariants: pure functions of (prefix, suffix, path); deterministic; never raise on any text.
"""

from __future__ import annotations

import re

_TOKEN = re.compile(r"\w+|[^\w\s]")


def blank(prefix: str, suffix: str, path: str) -> str:
    return ""


def previous_line(prefix: str, suffix: str, path: str) -> str:
    above = [line for line in prefix.splitlines() if line.strip()]
    return above[-1] if above else ""


def similar_line(prefix: str, suffix: str, path: str) -> str:
    before = prefix.splitlines()
    partial = "" if prefix.endswith("\n") or not before else before.pop()
    after = suffix.splitlines()[1:]  # the first entry is the rest of the hole's own line
    lines = before + [None] + after  # None marks the hole
    hole = len(before)
    want_above = _tokens(_neighbour(lines, hole, -1))
    want_below = _tokens(_neighbour(lines, hole, +1))
    best, best_key = "", None
    for i, line in enumerate(lines):
        if line is None or not line.strip() or (partial and not line.startswith(partial)):
            continue
        score = _jaccard(_tokens(_neighbour(lines, i, -1)), want_above) + _jaccard(
            _tokens(_neighbour(lines, i, +1)), want_below
        )
        key = (score, -abs(i - hole))
        if best_key is None or key > best_key:
            best, best_key = line, key
    return best[len(partial):] if partial else best


def _neighbour(lines: list[str | None], i: int, step: int) -> str:
    """The nearest non-blank line from `i` in direction `step`; "" past the hole (unknown text)."""
    j = i + step
    while 0 <= j < len(lines):
        line = lines[j]
        if line is None:
            return ""
        if line.strip():
            return line
        j += step
    return ""


def _tokens(line: str) -> frozenset[str]:
    return frozenset(_TOKEN.findall(line))


def _jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    return len(a & b) / len(a | b) if a or b else 0.0


BASELINES = {"blank": blank, "previous-line": previous_line, "similar-line": similar_line}

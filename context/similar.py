"""Copilot-style similar windows: the spans of other files that look most like the code before
the cursor, by Jaccard similarity of identifier sets.

Role: one source of cross-file context (`crossfile.py`, reason "similar-window").

Invariants: pure; every window of `window_lines` lines is scored (stride 1) in time linear in the
file's tokens; per-line token sets of a text are memoised by the text itself, so re-scoring the same
open documents on the next keystroke costs little.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from functools import lru_cache

_TOKEN = re.compile(r"[A-Za-z_$][\w$]*")
_EOL = re.compile(r"\r\n|\r|\n")


@dataclass(frozen=True, slots=True)
class Window:
    first_line: int
    last_line: int  # inclusive
    score: float


@lru_cache(maxsize=64)
def line_tokens(text: str) -> tuple[frozenset[str], ...]:
    """The identifier tokens of each line of `text`."""
    return tuple(map(_tokens_of_line, _EOL.split(text)))


@lru_cache(maxsize=65536)
def _tokens_of_line(line: str) -> frozenset[str]:
    return frozenset(_TOKEN.findall(line))


def tokens_before(text: str, line: int, line_prefix: str, window_lines: int) -> frozenset[str]:
    """Tokens of the `window_lines` lines ending at the cursor: the lines above it, and the cursor
    line up to the cursor (`line_prefix`) without the word being typed there (a partial word is
    noise, and leaving it out keeps the reference, hence `best_window`'s memo, unchanged while
    typing a word)."""
    lines = line_tokens(text)
    first = max(0, line - window_lines + 1)
    head = _TOKEN.findall(line_prefix)
    if head and (line_prefix[-1].isalnum() or line_prefix[-1] in "_$"):
        head.pop()
    return frozenset(set(head).union(*lines[first:line]))


@lru_cache(maxsize=256)
def best_window(reference: frozenset[str], text: str, window_lines: int) -> Window | None:
    """The window of `text` with the highest Jaccard similarity to `reference` (None if no overlap)."""
    lines = line_tokens(text)
    if not reference or not lines:
        return None
    size = min(window_lines, len(lines))
    counts: Counter[str] = Counter()
    shared = 0
    best: Window | None = None
    for index, tokens in enumerate(lines):
        for token in tokens:
            counts[token] += 1
            if counts[token] == 1 and token in reference:
                shared += 1
        if index >= size:
            for token in lines[index - size]:
                counts[token] -= 1
                if counts[token] == 0:
                    del counts[token]
                    if token in reference:
                        shared -= 1
        if index >= size - 1 and shared:
            score = shared / (len(reference) + len(counts) - shared)
            if best is None or score > best.score:
                best = Window(index - size + 1, index, score)
    return best

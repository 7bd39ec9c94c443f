"""Single-line holes and the completer interface shared by every evaluation.

Role: a `Hole` is one masked line of a file; a `Completer` is any callable
`(prefix, suffix, path) -> str` (the model adapter, or a non-neural baseline). This module also
draws the held-out holes: random non-blank lines of held-out corpus files, for a fixed seed.

Invariants:
- A hole's prefix ends at the start of its line and its suffix starts with that line's newline;
  the target is the whole line without its newline.
- A completion is judged on its first line only (completers are asked for one line; anything
  after the first newline is dropped before scoring).
- Pure Python, no torch.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass

Completer = Callable[[str, str, str], str]


@dataclass(frozen=True, slots=True)
class Hole:
    path: str
    prefix: str
    suffix: str
    target: str
    task_id: str = ""


def first_line(text: str) -> str:
    return text.split("\n", 1)[0].rstrip("\r")


def complete_all(completer: Completer, holes: Sequence[Hole]) -> list[str]:
    """First lines of the completer's answers; a completer with a `complete_many(holes)` method
    (the model adapter, which batches) gets all holes at once."""
    many = getattr(completer, "complete_many", None)
    raw = many(list(holes)) if many is not None else [completer(h.prefix, h.suffix, h.path) for h in holes]
    return [first_line(r) for r in raw]


def line_holes(path: str, text: str, rng: random.Random, per_file: int) -> list[Hole]:
    """Up to `per_file` holes at distinct random non-blank lines of `text`."""
    starts, offset = [], 0
    for line in text.splitlines(keepends=True):
        body = line.rstrip("\r\n")
        if body.strip():
            starts.append((offset, offset + len(body)))
        offset += len(line)
    chosen = sorted(rng.sample(starts, min(per_file, len(starts))))
    return [Hole(path, text[:a], text[b:], text[a:b]) for a, b in chosen]


def exact_match(completions: Sequence[str], holes: Sequence[Hole]) -> float:
    """Share of completions equal to their target (trailing whitespace ignored)."""
    hits = sum(c.rstrip() == h.target.rstrip() for c, h in zip(completions, holes, strict=True))
    return hits / max(1, len(holes))

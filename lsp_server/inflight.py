"""Generations in flight, which can outlive the request that started them.

Role: a completion's generation runs as an `InFlight`, owned by the server rather than by the
request handler. When the user types exactly the text it has streamed so far, the next
request *follows* it (shows its text minus what was typed) instead of aborting it and
prefilling a new prompt; when it finishes, its text goes into the type-through cache.

Invariants:
- At most one flight per (document uri, channel).
- A flight is aborted as soon as the document stops being "the flight's document plus a prefix
  of its text typed at its cursor" (`typed_into` returns None), unless it already finished.
- `done` always resolves: with the final post-processed text, or with an exception.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field

from model_runtime.api import GenerationResult

from .pipeline import Prepared

WINDOW = 512  # characters compared on each side of the cursor


@dataclass(eq=False)
class InFlight:
    uri: str
    channel: str
    version: int
    text: str  # the document text the prompt was built from
    offset: int  # the cursor in `text`
    prepared: Prepared
    request_id: str  # the engine request
    done: asyncio.Future[GenerationResult]
    streamed: str = ""  # post-processed text so far
    listeners: list[Callable[[str], None]] = field(default_factory=list)
    generate_s: float = 0.0  # the engine's generation (prefill and decode), as the server waited for it
    settle_s: float = 0.0  # scoring the candidates and deciding (0 when nothing was scored)

    def publish(self, text: str) -> None:
        self.streamed = text
        for listener in list(self.listeners):
            listener(text)


def typed_into(flight: InFlight | None, text: str, offset: int) -> str | None:
    """The text typed at the flight's cursor if `text`/`offset` is the flight's document with a
    prefix of its streamed completion typed in; else None."""
    if flight is None:
        return None
    typed_len = offset - flight.offset
    if typed_len <= 0 or len(text) != len(flight.text) + typed_len:
        return None
    start = flight.offset
    if text[max(0, start - WINDOW) : start] != flight.text[max(0, start - WINDOW) : start]:
        return None
    if text[offset : offset + WINDOW] != flight.text[start : start + WINDOW]:
        return None
    typed = text[start:offset]
    return typed if flight.streamed.startswith(typed) else None


def remainder(text: str, typed: str) -> str:
    """What is left of a completion once `typed` was typed through it ("" if it diverged)."""
    return text[len(typed) :] if text.startswith(typed) else ""

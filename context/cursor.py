"""The last known cursor position of each open document.

Role: the server records positions from completion requests and `glm5/didChangeCursor`
notifications; context building (e.g. which edits are "near the user") and telemetry read them.

Invariants: thread-safe; positions are plain `Position`s in UTF-16 units, never validated against
the text (they clamp when used); forgetting an unknown document is a no-op.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from context.positions import Position


@dataclass(frozen=True, slots=True)
class CursorState:
    position: Position
    version: int | None
    time: float


class CursorTracker:
    """uri → last cursor position (with the document version it was seen at, if known)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._states: dict[str, CursorState] = {}

    def update(self, uri: str, position: Position, version: int | None = None) -> None:
        with self._lock:
            self._states[uri] = CursorState(position, version, self._clock())

    def get(self, uri: str) -> Position | None:
        state = self.state(uri)
        return state.position if state else None

    def state(self, uri: str) -> CursorState | None:
        with self._lock:
            return self._states.get(uri)

    def forget(self, uri: str) -> None:
        with self._lock:
            self._states.pop(uri, None)

    def most_recent(self) -> str | None:
        """The document whose cursor moved last (the one the user is in)."""
        with self._lock:
            return max(self._states, key=lambda uri: self._states[uri].time, default=None)

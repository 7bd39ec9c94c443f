"""Repeated engine failures, told apart from one failed request, for `glm5/status`.

Role: the engine thread survives an exception by failing the requests in flight and going on
(`EngineStats.engine_restarts` counts these recoveries). One recovery is a failed completion;
`limit` recoveries within `window_s` seconds mean the engine keeps failing, and the user should
see it: `on_change(False, message)` once, naming the count and the last error. The next
generation that ends well reports `on_change(True, message)` once.

Invariants: called on the event loop only; each transition is reported once; a failure that is
not an engine recovery (the restart count did not move) never counts.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable

FAILURES = 3
WINDOW_S = 60.0

HealthChange = Callable[[bool, str], None]


class EngineHealth:
    def __init__(
        self, on_change: HealthChange | None = None, limit: int = FAILURES, window_s: float = WINDOW_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if limit < 1:
            raise ValueError(f"limit must be >= 1, got {limit}")
        self.on_change = on_change
        self.limit = limit
        self.window_s = window_s
        self._clock = clock
        self._restarts_seen = 0
        self._failures: deque[float] = deque()
        self.failing = False

    def failed(self, restarts: int, error: str) -> None:
        """A generation ended with an error; `restarts` is the engine's recovery count now."""
        new = restarts - self._restarts_seen
        self._restarts_seen = max(restarts, self._restarts_seen)
        if new <= 0:
            return
        now = self._clock()
        self._failures.extend([now] * new)
        while self._failures and now - self._failures[0] > self.window_s:
            self._failures.popleft()
        if len(self._failures) >= self.limit and not self.failing:
            self.failing = True
            self._report(False, f"the engine failed {len(self._failures)} times in {self.window_s:g} s (last: {error})")

    def succeeded(self) -> None:
        """A generation ended well."""
        if self.failing:
            self.failing = False
            self._failures.clear()
            self._report(True, "the engine is answering again")

    def _report(self, ok: bool, message: str) -> None:
        if self.on_change is not None:
            self.on_change(ok, message)

"""A background thread's Python gives way to the engines' steps (the compile beside decoding).

Role: `CompiledDecode` compiles in a thread of the server's own process while the engine thread
decodes eagerly. Both run Python under one interpreter lock, and an eager step releases that
lock at every operator (a few thousand times a step): each time the compile thread may take it
and keep it for the interpreter's switch interval (5 ms). Measured through the server (embedded
model, typing while the compile ran): final p50 82-92 ms but p95 3.4-5.0 s. `GiveWay` is a trace
function installed in the compiling thread only (`sys.settrace`): at a Python call, while any
registered engine serves a user's request, that thread sleeps (without the lock) until the
engines are idle.

Invariants:
- Only the thread that installed it is slowed; the engines never wait for it.
- Bounded: a pause lasts at most `PAUSE_MAX_S`; then the thread runs `RUN_S` without pausing,
  so a lock the paused thread holds (an import, one of torch's) delays an engine by at most
  `PAUSE_MAX_S` at a time and never deadlocks it.
- The engines count as busy for `QUIET_S` after a user's request was last seen, so the thread
  also keeps out of the way of the server's work between one keystroke's request and the next.
- Its cost: a thread that traces runs its Python slower whether or not it pauses (the embedded
  model's compile with a warm Inductor cache, in process, nothing else running: 24.3-31.2 s
  against 14.5-16.3 s without it; a trace function that does nothing costs as much).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

PAUSE_MAX_S = 0.25  # the longest one pause lasts
RUN_S = 0.02  # after a pause that timed out, the thread runs this long before pausing again
SLEEP_S = 0.005  # how often a paused thread looks again
QUIET_S = 0.5  # the engines count as busy this long after a user's request was last seen
CHECK_EVERY = 64  # calls between two looks at the engines


class GiveWay:
    def __init__(self, clock: Callable[[], float] = time.perf_counter, sleep: Callable[[float], None] = time.sleep) -> None:
        self._busy: tuple[Callable[[], bool], ...] = ()
        self._clock, self._sleep = clock, sleep
        self._calls = 0
        self._free_until = float("-inf")
        self._seen_busy = float("-inf")
        self.paused_s = 0.0  # total time the thread spent paused
        self.pauses = 0

    def add(self, busy: Callable[[], bool]) -> None:
        """Give way while `busy()` is true (an engine serving a user); any thread may add."""
        self._busy = (*self._busy, busy)

    def engines_busy(self) -> bool:
        """An engine serves a user, or did less than `QUIET_S` ago (the user is typing)."""
        now = self._clock()
        if any(busy() for busy in self._busy):
            self._seen_busy = now
        return now - self._seen_busy < QUIET_S

    @contextmanager
    def installed(self) -> Iterator[None]:
        """Give way in the calling thread for the duration."""
        previous = sys.gettrace()
        sys.settrace(self.on_call)
        try:
            yield
        finally:
            sys.settrace(previous)

    def on_call(self, frame, event: str, arg) -> None:
        """The trace function: every `CHECK_EVERY`-th call, pause while the engines are busy."""
        self._calls += 1
        if self._calls % CHECK_EVERY == 0 and self._busy and self.engines_busy():
            self._pause()
        return None

    def _pause(self) -> None:
        start = self._clock()
        if start < self._free_until:
            return
        self.pauses += 1
        while self.engines_busy():
            if self._clock() - start >= PAUSE_MAX_S:
                self._free_until = self._clock() + RUN_S
                break
            self._sleep(SLEEP_S)
        self.paused_s += self._clock() - start

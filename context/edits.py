"""Recent edits of the workspace, for the "recent-edit" snippets of cross-file context.

Role: a bounded ring of what the user changed, newest last, at whole-line granularity. As in Zed's
edit history, a change within `merge_window_s` of the previous change of the same file and
touching the same lines (or the lines next to them) extends that edit instead of adding one, so
typing a line is one edit, not one per keystroke.

Invariants:
- Each stored edit knows the lines it covers *now*: later changes above it in the same file shift
  it. `before` is the text those lines had before the edit, `after` the text they have now.
- An edit whose lines end up unchanged (typed, then deleted) disappears.
- At most `max_edits` edits are kept; the oldest go first. Thread-safe.
- A change over `MAX_EDIT_CHARS` (a pasted or replaced 1 MB file) is no snippet a prompt could
  hold: it only shifts the file's other edits and drops those it overlaps, without splitting
  or comparing its text.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from context.document import TextChange
from context.positions import Position, Range, utf16_length

_EOL = re.compile(r"\r\n|\r|\n")
MAX_EDIT_CHARS = 50_000  # before + after of one change


@dataclass(frozen=True, slots=True)
class Edit:
    """Lines [range.start.line, range.end.line] of `path` became `after`; they were `before`."""

    path: str
    range: Range
    before: str
    after: str
    time: float


@dataclass(slots=True)
class _Entry:
    path: str
    start: int
    before: list[str]
    after: list[str]
    time: float

    @property
    def end(self) -> int:
        return self.start + len(self.after) - 1

    def freeze(self) -> Edit:
        last = self.after[-1] if self.after else ""
        span = Range(Position(self.start, 0), Position(self.end, utf16_length(last)))
        return Edit(self.path, span, "\n".join(self.before), "\n".join(self.after), self.time)


class RecentEdits:
    """The workspace's recent edits (see the module docstring)."""

    def __init__(
        self, max_edits: int = 32, merge_window_s: float = 1.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        if max_edits < 1:
            raise ValueError(f"max_edits must be >= 1, got {max_edits}")
        self.max_edits = max_edits
        self.merge_window_s = merge_window_s
        self._clock = clock
        self._lock = threading.Lock()
        self._entries: list[_Entry] = []

    def record(self, path: str, change: TextChange) -> None:
        """Note one document change (as returned by `Document.apply_change`)."""
        if len(change.before) + len(change.after) > MAX_EDIT_CHARS:
            self._record_huge(path, change)
            return
        before, after = _EOL.split(change.before), _EOL.split(change.after)
        now = self._clock()
        with self._lock:
            latest = self._latest(path)
            if latest is not None and self._mergeable(latest, change, now):
                self._merge(latest, change, before, after, now)
                self._shift(path, change, skip=latest)
                if latest.before == latest.after:
                    self._entries.remove(latest)
            elif before != after:
                self._shift(path, change, skip=None)
                self._entries.append(_Entry(path, change.start_line, before, after, now))
                del self._entries[: max(0, len(self._entries) - self.max_edits)]
            else:
                self._shift(path, change, skip=None)

    def _record_huge(self, path: str, change: TextChange) -> None:
        with self._lock:
            self._entries = [
                e for e in self._entries if e.path != path or not (e.start <= change.old_end_line and e.end >= change.start_line)
            ]
            self._shift(path, change, skip=None)

    def recent(self, limit: int | None = None, path: str | None = None) -> list[Edit]:
        """Edits newest first, optionally only those of `path`."""
        with self._lock:
            entries = [e for e in reversed(self._entries) if path is None or e.path == path]
            return [e.freeze() for e in entries[:limit]]

    def forget(self, path: str) -> None:
        """Drop the edits of `path` (a file deleted or renamed)."""
        with self._lock:
            self._entries = [e for e in self._entries if e.path != path]

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()

    def _latest(self, path: str) -> _Entry | None:
        return next((e for e in reversed(self._entries) if e.path == path), None)

    def _mergeable(self, entry: _Entry, change: TextChange, now: float) -> bool:
        near = change.start_line <= entry.end + 1 and change.old_end_line >= entry.start - 1
        return near and now - entry.time <= self.merge_window_s

    @staticmethod
    def _merge(entry: _Entry, change: TextChange, before: list[str], after: list[str], now: float) -> None:
        """Fold `change` (in the coordinates of the text after `entry`) into `entry`."""
        c0, c1, e0, e1 = change.start_line, change.old_end_line, entry.start, entry.end
        head_before = before[: e0 - c0] if c0 < e0 else []
        tail_before = before[e1 + 1 - c0 :] if c1 > e1 else []
        head_after = entry.after[: c0 - e0] if e0 < c0 else []
        tail_after = entry.after[c1 + 1 - e0 :] if e1 > c1 else []
        entry.before = head_before + entry.before + tail_before
        entry.after = head_after + after + tail_after
        entry.start = min(c0, e0)
        entry.time = now

    def _shift(self, path: str, change: TextChange, skip: _Entry | None) -> None:
        """Move the file's other edits that lie below the change by the lines it added or removed."""
        delta = change.new_end_line - change.old_end_line
        if delta == 0:
            return
        for entry in self._entries:
            if entry is not skip and entry.path == path and entry.start > change.old_end_line:
                entry.start += delta

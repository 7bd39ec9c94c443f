"""Recent edits (Zed-style merging, line shifting) and the cursor tracker."""

from __future__ import annotations

from context.cursor import CursorTracker
from context.document import Document
from context.edits import RecentEdits
from context.positions import Position, Range


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def typing(document: Document, edits: RecentEdits, position: Position, text: str) -> None:
    for char in text:
        edits.record(document.path, document.apply_change(Range(position, position), char, document.version + 1))
        position = Position(position.line, position.character + 1) if char != "\n" else Position(position.line + 1, 0)


def make(text: str) -> tuple[Document, RecentEdits, Clock]:
    clock = Clock()
    return Document("file:///w/a.py", "python", 1, text), RecentEdits(clock=clock), clock


def test_typing_a_line_is_one_edit() -> None:
    document, edits, _ = make("def f():\n    pass\n")
    typing(document, edits, Position(1, 8), "\n    return 1")
    [edit] = edits.recent()
    assert (edit.before, edit.after) == ("    pass", "    pass\n    return 1")
    assert edit.range == Range(Position(1, 0), Position(2, 12))


def test_edits_after_the_window_or_far_away_are_separate() -> None:
    document, edits, clock = make("a = 1\nb = 2\nc = 3\nd = 4\n")
    typing(document, edits, Position(0, 5), "0")
    clock.now += 5
    typing(document, edits, Position(0, 6), "0")  # same line, but later: a new edit
    typing(document, edits, Position(3, 5), "9")  # same time, far away: a new edit
    assert [(e.range.start.line, e.before, e.after) for e in edits.recent()] == [
        (3, "d = 4", "d = 49"),
        (0, "a = 10", "a = 100"),
        (0, "a = 1", "a = 10"),
    ]


def test_typed_then_deleted_disappears() -> None:
    document, edits, _ = make("x = 1\n")
    typing(document, edits, Position(0, 5), "23")
    edits.record(document.path, document.apply_change(Range(Position(0, 5), Position(0, 7)), "", 9))
    assert edits.recent() == []


def test_lines_added_above_shift_older_edits() -> None:
    document, edits, clock = make("a\nb\nc\n")
    typing(document, edits, Position(2, 1), "!")
    clock.now += 5
    typing(document, edits, Position(0, 1), "\nnew")
    older = edits.recent()[1]
    assert (older.range.start.line, older.after) == (3, "c!")
    assert document.snapshot().line(3) == "c!"


def test_merging_a_change_that_spans_beyond_the_edit() -> None:
    document, edits, _ = make("one\ntwo\nthree\nfour\n")
    typing(document, edits, Position(1, 3), "X")
    change = document.apply_change(Range(Position(0, 1), Position(2, 2)), "Y", 5)  # joins lines 0..2
    edits.record(document.path, change)
    [edit] = edits.recent()
    assert (edit.before, edit.after, edit.range.start.line) == ("one\ntwo\nthree", "oYree", 0)


def test_capacity_and_filters() -> None:
    clock = Clock()
    edits = RecentEdits(max_edits=3, clock=clock)
    for i in range(5):
        clock.now += 10
        document = Document(f"file:///w/f{i}.py", "python", 1, "x\n")
        edits.record(document.path, document.apply_change(Range(Position(0, 1), Position(0, 1)), "y", 2))
    assert [e.path for e in edits.recent()] == ["/w/f4.py", "/w/f3.py", "/w/f2.py"]
    assert [e.path for e in edits.recent(path="/w/f3.py")] == ["/w/f3.py"]
    assert len(edits.recent(limit=1)) == 1
    edits.forget("/w/f4.py")
    assert [e.path for e in edits.recent()] == ["/w/f3.py", "/w/f2.py"]


def test_cursor_tracker() -> None:
    clock = Clock()
    cursors = CursorTracker(clock=clock)
    assert cursors.get("file:///a") is None and cursors.most_recent() is None
    cursors.update("file:///a", Position(1, 2), version=3)
    clock.now += 1
    cursors.update("file:///b", Position(0, 0))
    assert cursors.get("file:///a") == Position(1, 2) and cursors.state("file:///a").version == 3
    assert cursors.most_recent() == "file:///b"
    cursors.forget("file:///b")
    cursors.forget("file:///never")
    assert cursors.most_recent() == "file:///a"


def test_a_huge_change_shifts_the_other_edits_and_replaces_the_ones_it_overlaps() -> None:
    document, edits, clock = make("a = 1\nb = 2\nc = 3\nd = 4\n")
    typing(document, edits, Position(3, 5), "0")  # d = 40 (line 3)
    clock.now += 10
    typing(document, edits, Position(1, 5), "0")  # b = 20 (line 1)
    clock.now += 10
    pasted = "\nx = 0" * 20_000  # 120,000 characters pasted at the end of line 0
    edits.record(document.path, document.apply_change(Range(Position(0, 5), Position(0, 5)), pasted, document.version + 1))
    assert [(e.after, e.range.start.line) for e in edits.recent()] == [("b = 20", 20_001), ("d = 40", 20_003)]
    whole = document.apply_change(None, "y = 2\n" * 20_000, document.version + 1)  # a full replacement overlaps them all
    edits.record(document.path, whole)
    assert edits.recent() == []
    assert document.text.startswith("y = 2\n")

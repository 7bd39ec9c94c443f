"""The fixer's pure steps: which lines a fix replaces, how model text is shaped, the verdict;
and the pipeline's early stop when post-processing has already cut the block."""

from __future__ import annotations

import pytest

from context.document import Document
from context.positions import Position, Range
from lsp_server.fixer import _evaluate, _Task, _whole_lines
from lsp_server.pipeline import block_finished

SOURCE = "def f(x):\n    return x * * 2\n\nprint(f(1))\n"


def snapshot(text: str = SOURCE):
    return Document("file:///w/a.py", "python", 3, text).snapshot()


@pytest.mark.parametrize(
    ("where", "span"),
    [
        (Range(Position(1, 15), Position(1, 16)), "    return x * * 2\n"),
        (Range(Position(0, 0), Position(2, 0)), "def f(x):\n    return x * * 2\n"),  # ends at column 0: line 2 excluded
        (Range(Position(3, 0), Position(3, 4)), "print(f(1))\n"),
        (Range(Position(9, 0), Position(9, 1)), ""),  # past the end clamps to the end
    ],
)
def test_a_fix_replaces_the_whole_lines_of_the_range(where, span):
    snap = snapshot()
    start, end = _whole_lines(snap, where)
    assert snap.text[start:end] == span


def fix_task(**overrides):
    snap = snapshot()
    start, end = _whole_lines(snap, Range(Position(1, 0), Position(1, 1)))
    fields = dict(snapshot=snap, start=start, end=end, lead="", goal="fix: invalid syntax", single_line=False)
    return _Task(**{**fields, **overrides})


@pytest.mark.parametrize(
    ("raw", "middle", "verdict"),
    [
        ("    return x * 2\n", "    return x * 2\n", None),
        ("    return x * 2\n\nprint(f(1))\n", "    return x * 2\n", None),  # re-typed following lines dropped
        ("    return (x *\n", "    return (x *\n", "SyntaxError"),
        ("    return y * 2\n", "    return y * 2\n", "undefined name 'y'"),
        ("    return x * * 2\n", "    return x * * 2\n", "changed nothing"),
        ("   \n", "\n", "empty"),
    ],
)
def test_candidates_are_shaped_then_judged(raw, middle, verdict):
    got_middle, got_verdict = _evaluate(fix_task(), raw)
    assert got_middle == middle
    assert got_verdict is None if verdict is None else verdict in got_verdict


def test_a_declaration_must_actually_declare_the_name():
    snap = snapshot("def area(r):\n    return PI * r * r\n")
    offset = snap.offset_at(Position(1, 0))
    task = _Task(snap, offset, offset, "    PI = ", "declare `PI`", single_line=True, name="PI")
    assert _evaluate(task, "3.14159\nmore text\n") == ("    PI = 3.14159\n", None)
    other = _Task(snap, offset, offset, "    TAU = ", "declare `PI`", single_line=True, name="PI")
    assert "`PI` is still not declared" in _evaluate(other, "6.28\n")[1]


@pytest.mark.parametrize(
    ("raw", "final", "finished"),
    [
        ("foo(1)\nbar", "foo(1)", True),  # the model went on past the cut
        ("foo(1)\n", "foo(1)", False),  # nothing written after the cut yet
        ("foo(1)\n   \n", "foo(1)", False),
        ("foo(1)\n    more", "foo(1)\n    more", False),  # not cut
        ("", "", False),
    ],
)
def test_generation_stops_early_only_once_the_block_is_done(raw, final, finished):
    assert block_finished(raw, final) is finished

"""Completion kind at the cursor (context.classify); `┃` marks the cursor."""

from __future__ import annotations

import pytest

from context.classify import CompletionKind, classify
from context.document import Document
from context.positions import Position
from ctx_support import with_cursor

E, S, M = CompletionKind.EMPTY, CompletionKind.SINGLE_LINE, CompletionKind.MULTI_LINE

CASES = [
    # middle of a word, or a word followed by more code: nothing to complete
    ("python", "value = compu┃ted + 1\n", E),
    ("python", "x = ┃value\n", E),
    ("python", "call(a┃, b)\n", E),
    ("javascript", "const total = pri┃ce * qty;\n", E),
    # end of a word, or only closers after it: the rest of the line
    ("python", "print(val┃)\n", S),
    ("python", "return resu┃\n", S),
    ("javascript", "foo(bar┃);\n", S),
    ("go", "x := compute(┃)\n", S),
    ("python", "x = 1 + ┃\n", S),
    # comments and strings: single line, even on an otherwise empty line of a docstring
    ("python", "# explain the ┃\nx = 1\n", S),
    ("python", 'msg = "hello ┃"\n', S),
    ("python", 'def f():\n    """Doc.\n\n    ┃\n    """\n', S),
    ("rust", "// TODO: handle ┃\nfn main() {}\n", S),
    ("javascript", "const s = `total: ┃`;\n", S),
    # empty lines and block openers: a block
    ("python", "def f(x):\n    ┃\n", M),
    ("python", "def f(x):┃\n", M),
    ("python", "class A:\n    def m(self):\n        ┃\n\n    def n(self): pass\n", M),
    ("python", "┃", M),
    ("python", "items = [┃\n", M),
    ("javascript", "function f() {┃\n}\n", M),
    ("javascript", "if (ok) {\n  ┃\n}\n", M),
    ("typescript", "const f = (x: number) =>┃\n", M),
    ("go", "func main() {\n\t┃\n}\n", M),
    ("rust", "impl Point {┃\n}\n", M),
    ("python", "x = 1\n┃\n", M),
    # after a string's closing quote we are back in code
    ("python", 'x = "done"┃\n', S),
]


@pytest.mark.parametrize(("language", "marked", "expected"), CASES)
def test_classify(language: str, marked: str, expected: CompletionKind) -> None:
    snap, position = with_cursor(marked, language)
    assert classify(snap, position) is expected


def test_classify_without_a_tree_uses_text() -> None:
    snap = Document("untitled:1", "plaintext", 1, "hello wor\n\n").snapshot()
    assert classify(snap, Position(0, 9)) is S
    assert classify(snap, Position(1, 0)) is M
    assert classify(snap, Position(0, 3)) is E

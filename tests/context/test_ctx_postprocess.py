"""Post-processing filters, each with its own table (context.postprocess); `┃` marks the cursor."""

from __future__ import annotations

import pytest

from context.classify import CompletionKind, classify
from context.postprocess import (
    FILTERS,
    PostContext,
    continue_typed_line,
    cut_to_single_line,
    drop_duplicate_suffix_lines,
    drop_empty,
    drop_line_suffix_overlap,
    drop_repetitive_lines,
    drop_unmatched_closers,
    limit_to_block,
    postprocess,
    strip_special_tokens,
    trim_trailing_whitespace,
)
from ctx_support import with_cursor

S, M = CompletionKind.SINGLE_LINE, CompletionKind.MULTI_LINE


def ctx(marked: str, language: str = "python", kind: CompletionKind | None = None) -> PostContext:
    snap, position = with_cursor(marked, language)
    return PostContext.of(snap, position, kind or classify(snap, position))


def check(step, marked: str, raw: str, expected: str, language: str = "python", kind: CompletionKind | None = None) -> None:
    assert step(raw, ctx(marked, language, kind)) == expected


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("return x<|endoftext|>garbage", "return x"),
        ("a = 1\n<|code_suffix|>b", "a = 1\n"),
        ("x[gMASK]<sop>", "x"),
        ("<|user|>hi", ""),
        ("plain <text> stays", "plain <text> stays"),
    ],
)
def test_strip_special_tokens(raw: str, expected: str) -> None:
    check(strip_special_tokens, "x = ┃\n", raw, expected)


@pytest.mark.parametrize(
    ("marked", "raw", "expected"),
    [
        # a fresh line written after typed code: its indentation goes, and what it re-types too
        ("def f(v):\n    for x in v:\n        s += ┃\n", "            s += 1", "1"),
        ("def f(d):\n    key = ┃\n", "        key = 0", "0"),
        ("def f(d):\n    key = ┃\n", "        d[0]", "d[0]"),
        ("def f(d):\n    key = ┃\n", "    ", "    "),  # nothing but spaces: left to drop_empty
        ("total = f(a,┃)\n", "      b", " b"),  # after code, one space at most
        ("total = f(a,┃)\n", " b", " b"),
        ("return ┃\n", "return_value", "return_value"),  # a longer word, not a re-typed line
        ("ret┃\n", "    return x", " return x"),  # the typed word is not the whole line: only spaces shrink
        ("┃\n", "    x = 1", "    x = 1"),  # nothing typed: a whole line, indentation and all
        ("if x:┃\n", "\n    y = 1", "\n    y = 1"),  # a block after the line: untouched
    ],
)
def test_continue_typed_line(marked: str, raw: str, expected: str) -> None:
    check(continue_typed_line, marked, raw, expected)


@pytest.mark.parametrize(
    ("marked", "raw", "expected"),
    [
        ("x = ┃\n", "compute(1)\ny = 2", "compute(1)"),
        ("x = ┃\n", "\nnext_line()", ""),
        ("def f():\n    ┃\n", "a = 1\nb = 2", "a = 1\nb = 2"),  # multi-line request: untouched
    ],
)
def test_cut_to_single_line(marked: str, raw: str, expected: str) -> None:
    check(cut_to_single_line, marked, raw, expected)


@pytest.mark.parametrize(
    ("language", "marked", "raw", "expected"),
    [
        # Python, by indentation
        ("python", "def f(x):┃\n", "\n    y = x + 1\n    return y\n\ndef g():\n    pass", "\n    y = x + 1\n    return y\n"),
        ("python", "def f(x):\n    ┃\n", "y = x + 1\n    if y:\n        y += 1\n    return y\nprint(f(1))", "y = x + 1\n    if y:\n        y += 1\n    return y"),
        ("python", "def f(x):\n┃\n", "    return x\n\nclass A:\n    pass", "    return x\n"),
        ("python", "class A:\n    def m(self):\n        ┃\n", "return 1\n\n    def n(self):\n        pass", "return 1\n"),
        ("python", "items = [┃\n", "\n    1,\n    2,\n]\nprint(items)", "\n    1,\n    2,\n]"),
        # brace languages, by bracket depth: the document already has the closing brace
        ("javascript", "function f() {\n  ┃\n}\n", "return 1;\n}\n\nfunction g() {}", "return 1;"),
        ("javascript", "function f() {┃\n}\n", "\n  const a = {k: 1};\n  return a;\n}", "\n  const a = {k: 1};\n  return a;"),
        ("go", "func f() int {\n\t┃\n}\n", "x := \"}\" // }\n\treturn len(x)\n}", "x := \"}\" // }\n\treturn len(x)"),
        ("rust", "fn f<'a>(s: &'a str) -> usize {\n    ┃\n}\n", "s.len()\n}\nfn g() {}", "s.len()"),
        # ... and when the document lacks it, the completion may close it, then stops
        ("javascript", "function f() {┃", "\n  return 1;\n}\n\nfunction g() {}", "\n  return 1;\n}"),
        ("typescript", "if (ok) {\n  ┃\n}\n", "run(); }", "run();"),
        # a second block cut off by the token limit is dropped
        ("javascript", "const x = 1;\n┃\n", "function a() {\n  return 1;\n}\n\nfunction b() {\n  ret", "function a() {\n  return 1;\n}\n"),
        ("javascript", "┃\n", "const o = {\n  a: 1,", "const o = {\n  a: 1,"),  # nothing balanced to go back to
    ],
)
def test_limit_to_block(language: str, marked: str, raw: str, expected: str) -> None:
    check(limit_to_block, marked, raw, expected, language, M)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("x += 1\nx += 1\nx += 1\nx += 1", "x += 1"),
        ("a()\nb()\na()\nb()\na()\nb()\na()", "a()\nb()"),
        ("start()\nlog(1)\nlog(1)\nlog(1)", "start()\nlog(1)"),
        ("a = 1\na = 1\nb = 2", "a = 1\na = 1\nb = 2"),  # twice is fine
        ("\n\n\n\nx = 1", "\n\n\n\nx = 1"),  # blank lines are not a loop
    ],
)
def test_drop_repetitive_lines(raw: str, expected: str) -> None:
    check(drop_repetitive_lines, "def f():\n    ┃\n", raw, expected, kind=M)


@pytest.mark.parametrize(
    ("marked", "raw", "expected"),
    [
        ("def f(xs):\n    ┃\n    return total\n", "total = sum(xs)\n    return total", "total = sum(xs)"),
        ("def f(xs):\n    ┃\n\n    log(xs)\n    return total\n", "total = sum(xs)\n    log(xs)\n    return total", "total = sum(xs)"),
        ("def f(xs):\n    ┃\n    return total\n", "total = 0\n    return total\n\ndef g():", "total = 0"),
        ("def f(xs):\n    ┃\n    return total\n", "total = 0\n    done = 1", "total = 0\n    done = 1"),
        ("def f(xs):\n    ┃\n    x = 1\n", "y = 2", "y = 2"),  # one line: nothing to drop
    ],
)
def test_drop_duplicate_suffix_lines(marked: str, raw: str, expected: str) -> None:
    check(drop_duplicate_suffix_lines, marked, raw, expected, kind=M)


@pytest.mark.parametrize(
    ("language", "marked", "raw", "expected"),
    [
        ("python", "print(┃)\n", '"hi")', '"hi"'),
        ("python", "print(┃)\n", "f(x))", "f(x)"),
        ("python", "print(┃)\n", "f(x)", "f(x)"),  # closes only what it opened: keep
        ("python", "if x┃:\n", " > 0:", " > 0"),
        ("javascript", "const a = ┃;\n", "compute(1);", "compute(1)"),
        ("javascript", "if (┃) {\n", "ok) {", "ok"),
        ("python", "x = ┃\n", "1", "1"),
    ],
)
def test_drop_line_suffix_overlap(language: str, marked: str, raw: str, expected: str) -> None:
    check(drop_line_suffix_overlap, marked, raw, expected, language)


@pytest.mark.parametrize(
    ("marked", "raw", "expected"),
    [
        ("print(f(┃))\n", "x))", "x"),
        ("print(f(┃))\n", "x)", "x"),
        ("print(f(┃))\n", "g(x))", "g(x)"),
        ("items = [f(┃)]\n", "a, b)]", "a, b"),
        ('x = "hel┃"\n', 'lo"', "lo"),
        ('x = "┃"\n', 'a" + "b"', 'a" + "b'),
        ("print(┃)\n", "x + 1", "x + 1"),
        ("f(┃) + 1\n", "a], b)", "a], b"),  # a mismatched closer is not the suffix's
    ],
)
def test_drop_unmatched_closers(marked: str, raw: str, expected: str) -> None:
    check(drop_unmatched_closers, marked, raw, expected)


@pytest.mark.parametrize(("raw", "expected"), [("a = 1  \n  b = 2\t\n\n", "a = 1\n  b = 2"), ("  x", "  x")])
def test_trim_trailing_whitespace(raw: str, expected: str) -> None:
    check(trim_trailing_whitespace, "x = ┃\n", raw, expected)


@pytest.mark.parametrize(("raw", "expected"), [(" \n\t", ""), ("", ""), ("x", "x")])
def test_drop_empty(raw: str, expected: str) -> None:
    check(drop_empty, "x = ┃\n", raw, expected)


@pytest.mark.parametrize(
    ("language", "marked", "raw", "expected"),
    [
        ("python", "result = compute(┃)\n", "a, b)\nprint(result)<|endoftext|>", "a, b"),
        ("python", "def area(r):\n    ┃\n    return a\n", "a = 3.14 * r * r\n    return a\n\n\ndef other():<|endoftext|>", "a = 3.14 * r * r"),
        ("javascript", "function f() {\n  ┃\n}\n", "return 1;   \n}\n<|endoftext|>", "return 1;"),
        ("python", "x = ┃\n", "<|endoftext|>", ""),
        ("python", "x = ┃\n", "1\r\ny = 2", "1"),
    ],
)
def test_pipeline(language: str, marked: str, raw: str, expected: str) -> None:
    assert postprocess(raw, ctx(marked, language)) == expected


def test_filters_never_grow_the_text() -> None:
    context = ctx("def f(x):\n    ┃\n    return x\n", kind=M)
    samples = ["", "\n", ")", "x))]}", "\"'`", "a\nb\na\nb\na\nb", "    return x\n}", "<|endoftext|>x"]
    for step in FILTERS:
        for raw in samples:
            assert len(step(raw, context)) <= len(raw)

"""Typed items of the quality benchmark: where the cursor goes, what the file keeps, what counts as right."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.bench_quality import WORKSPACE_CEILING, after_typed, baseline_answers, summarise
from bench.quality_sets import Item, _blanked, _typed_column


@pytest.mark.parametrize(
    ("line", "typed"),
    [
        ("    x = foo(a)", "    x = "),
        ("    return bar(x)", "    return "),
        ("    self.a, b = parse(s)", "    self.a, b = "),
        ("    total += count(x)", "    total += "),
        ("    elif isinstance(x, int):", "    elif "),
        ("    foo(bar)", "    foo("),
        ("    d['k'] = v(1)", "    d['k'] = "),
    ],
)
def test_the_cursor_goes_after_an_assignment_a_keyword_or_a_calls_paren(line: str, typed: str) -> None:
    assert line[: _typed_column(line)] == typed


@pytest.mark.parametrize("line", ["    x == y", "    return", "    a = ", "    pass", "x: int = f()"])
def test_lines_with_nothing_typed_to_continue_are_not_typed_items(line: str) -> None:
    assert _typed_column(line) is None


def test_a_typed_item_keeps_the_typed_part_and_expects_the_rest(tmp_path: Path) -> None:
    lines = ["def f(a):", "    x = foo(a)", "    return x"]
    item = _blanked("repo-typed", tmp_path, tmp_path / "m.py", lines, 1, _typed_column(lines[1]) or 0)
    assert item.text == "def f(a):\n    x = \n    return x"
    assert (item.typed, item.expected) == ("    x = ", "foo(a)")
    assert item.typed + item.expected == item.target


def test_answers_are_insertions_at_the_cursor_for_every_metric(tmp_path: Path) -> None:
    """A typed item is right when the answer completes the typed part to the line; a line-start
    item when the answer is the line."""
    typed = Item("repo-typed", tmp_path, tmp_path / "m.py", "", 1, "    x = foo(a)", column=8)
    blank = Item("repo", tmp_path, tmp_path / "m.py", "", 1, "    x = foo(a)")
    table = summarise([typed, blank], {"row": ["foo(a)", "    x = foo(a)"], "wrong": ["    x = foo(a)", "foo(a)"]}, {}, {}, 1)
    assert table["row"]["exact"] == 1.0 and table["row"]["first_ident"] == 1.0
    assert table["wrong"]["exact"] == 0.0


def test_a_baseline_line_is_placed_after_the_typed_part() -> None:
    assert after_typed("        x = foo(a)", "    x = ") == "foo(a)"
    assert after_typed("    y = foo(a)", "    x = ") == ""
    assert after_typed("    y = foo(a)", "") == "    y = foo(a)"
    assert after_typed("    y = foo(a)", "    ") == "y = foo(a)"


def _hole(root: Path, name: str, lines: list[str], line: int, column: int = 0) -> Item:
    """A hole whose file on disk still holds the line, as the benchmark's baselines find it."""
    path = root / name
    path.write_text("\n".join(lines), encoding="utf-8")
    return _blanked("repo", root, path, lines, line, column)


def test_the_workspace_ceiling_finds_the_line_only_where_another_line_has_it(tmp_path: Path) -> None:
    """Right where the blanked line is on another line of a workspace file (indentation aside),
    nothing where the only copy is the blanked line itself (still in its file on disk)."""
    (tmp_path / "other.py").write_text("def g(p):\n        return scale(p, 2)\n", encoding="utf-8")
    copied = _hole(tmp_path, "m.py", ["def f(p):", "    return scale(p, 2)", ""], 1)
    alone = _hole(tmp_path, "n.py", ["def h(q):", "    return shift(q, 3)", ""], 1)
    typed = _hole(tmp_path, "t.py", ["def k(p):", "    return scale(p, 2)", ""], 1, 11)
    indexes: dict = {}
    assert baseline_answers(copied, indexes)[WORKSPACE_CEILING] == "    return scale(p, 2)"
    assert baseline_answers(alone, indexes)[WORKSPACE_CEILING] == ""
    assert baseline_answers(typed, indexes)[WORKSPACE_CEILING] == "scale(p, 2)"

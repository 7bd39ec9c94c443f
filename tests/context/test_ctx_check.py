"""Static checks of candidate fixes (context.check)."""

from __future__ import annotations

import pytest

from context.check import apply_edit, check_code, new_problems
from context.positions import Position, Range


def summary(language: str, text: str) -> list[tuple[str, str, int, int]]:
    return [(p.source, p.severity, p.range.start.line, p.range.start.character) for p in check_code(language, text)]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("def f(x):\n    return x\n", []),
        ("def f(:\n    pass\n", [("compile", "error", 0, 6)]),
        ("s = '😀' +\n", [("compile", "error", 0, 10)]),  # UTF-16 column after the emoji
        ("return 1\n", [("compile", "error", 0, 0)]),  # a compiler check, not the parser
        ("import os\nprint(missing)\n", [("pyflakes", "warning", 0, 0), ("pyflakes", "error", 1, 6)]),
        ("x = 1\0\n", [("compile", "error", 0, 0)]),
    ],
)
def test_python_problems(text: str, expected: list[tuple[str, str, int, int]]) -> None:
    assert summary("python", text) == expected


def test_python_messages_name_the_problem() -> None:
    [problem] = check_code("python", "print(missing)\n")
    assert "missing" in problem.message and problem.range == Range(Position(0, 6), Position(0, 13))
    [syntax] = check_code("python", "x = (1,\n")
    assert "never closed" in syntax.message


@pytest.mark.parametrize(
    ("language", "text", "messages"),
    [
        ("javascript", "function f() { return 1; }\n", []),
        ("go", "package main\n\nfunc main() {\n\tx := 1\n", ["syntax error: missing `}`"]),
        ("rust", "fn main() { let x = 1 }\n", ["syntax error: missing `;`"]),
        ("typescriptreact", "const a = <div>;\n", None),
    ],
)
def test_tree_sitter_problems(language: str, text: str, messages: list[str] | None) -> None:
    found = check_code(language, text)
    if messages is None:
        assert found and all(p.source == "tree-sitter" for p in found)
    else:
        assert [p.message for p in found] == messages


def test_tree_sitter_error_ranges() -> None:
    [problem] = check_code("typescript", "const ok = 1;\nconst x: number = ;\n")
    assert problem.message.startswith("syntax error: unexpected") and problem.range.start.line == 1


def test_unknown_language_has_no_checks() -> None:
    assert check_code("plaintext", "anything (") == []


def test_new_problems_ignores_existing_ones() -> None:
    before = "import os\nprint(undefined_a)\n"
    fixed = "import os\nprint(1)\n"
    worse = "import os\nprint(nope)\n"
    assert new_problems("python", before, fixed) == []  # the unused import was already there
    assert [p.message for p in new_problems("python", before, worse)] == ["undefined name 'nope'"]


def test_warnings_hidden_by_a_syntax_error_are_new_unless_errors_only() -> None:
    broken, fixed = "import os\nx = (\n", "import os\nx = (1, 2)\n"
    assert [p.severity for p in new_problems("python", broken, fixed)] == ["warning"]
    assert new_problems("python", broken, fixed, errors_only=True) == []


def test_apply_edit_uses_utf16_positions_and_clamps() -> None:
    text = "a = '😀'\nb = 2\n"
    assert apply_edit(text, Range(Position(0, 7), Position(0, 8)), '"') == "a = '😀\"\nb = 2\n"
    assert apply_edit(text, Range(Position(1, 4), Position(9, 0)), "3\n") == "a = '😀'\nb = 3\n"

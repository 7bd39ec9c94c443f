"""Static checks of code, for "Fix with model": is a candidate fix at least valid code?

Role: `check_code` lists the problems of a text — Python: `compile()` errors (syntax and the
compiler's own checks, nothing is executed), then pyflakes messages; other languages: tree-sitter
ERROR and MISSING nodes. `new_problems` compares a fix with the original (a fix may keep old
warnings but must not add problems), and `apply_edit` applies an LSP-style text edit.

Invariants: never raises on any text; ranges are LSP ranges (UTF-16); results are in document order.
"""

from __future__ import annotations

import ast
import re
from collections import Counter
from dataclasses import dataclass
from functools import cache

import tree_sitter as ts
from pyflakes import checker, messages

from context.languages import Language, language_for
from context.positions import Position, Range, TextIndex, decode_prefix, encode_text, utf16_length

_WORD = re.compile(r"\w+")
_ERRORS = (messages.UndefinedName, messages.UndefinedLocal, messages.UndefinedExport)
_BAD_NODES = "(ERROR) @error (MISSING) @missing"


@dataclass(frozen=True, slots=True)
class Problem:
    message: str
    range: Range
    source: str  # "compile", "pyflakes" or "tree-sitter"
    severity: str = "error"  # "error" or "warning"


def check_code(language: str | Language | None, text: str) -> list[Problem]:
    """Problems of `text` in `language` (a Language, a name, or an LSP languageId)."""
    if isinstance(language, str):
        language = language_for(language, None)
    if language is None:
        return []
    if language.name == "python":
        return _python(text)
    return _tree_sitter(language, text)


def new_problems(
    language: str | Language | None, before: str, after: str, errors_only: bool = False
) -> list[Problem]:
    """Problems of `after` that `before` did not have (matched by message, so moved code is fine).
    Warnings that a syntax error in `before` hid count as new; `errors_only` ignores warnings."""
    old = Counter(p.message for p in check_code(language, before))
    fresh = []
    for problem in check_code(language, after):
        if errors_only and problem.severity != "error":
            continue
        if old[problem.message]:
            old[problem.message] -= 1
        else:
            fresh.append(problem)
    return fresh


def apply_edit(text: str, range: Range, new_text: str) -> str:
    """`text` with `range` (clamped, UTF-16 positions) replaced by `new_text`."""
    lines = TextIndex(text)
    start, end = sorted((lines.offset_at(range.start), lines.offset_at(range.end)))
    return text[:start] + new_text + text[end:]


def _python(text: str) -> list[Problem]:
    lines = TextIndex(text)
    try:
        compile(text, "<fix>", "exec", dont_inherit=True)
        tree = ast.parse(text)
    except SyntaxError as exc:
        return [Problem(f"{type(exc).__name__}: {exc.msg}", _syntax_range(lines, exc), "compile")]
    except ValueError as exc:
        return [Problem(str(exc), Range(Position(0, 0), Position(0, 0)), "compile")]
    found = []
    for message in checker.Checker(tree, filename="<fix>").messages:
        severity = "error" if isinstance(message, _ERRORS) else "warning"
        text_of = message.message % message.message_args
        found.append(Problem(text_of, _pyflakes_range(lines, message.lineno - 1, message.col), "pyflakes", severity))
    return sorted(found, key=lambda p: p.range.start)


def _syntax_range(lines: TextIndex, exc: SyntaxError) -> Range:
    line = max((exc.lineno or 1) - 1, 0)
    start = max((exc.offset or 1) - 1, 0)
    end_line = max((exc.end_lineno or exc.lineno or 1) - 1, line)
    end = max((exc.end_offset or 0) - 1, 0)
    if (end_line, end) <= (line, start):
        end_line, end = line, start + 1
    first, last = lines.line(line), lines.line(end_line)
    return Range(
        Position(line, utf16_length(first[: min(start, len(first))])),
        Position(end_line, utf16_length(last[: min(end, len(last))])),
    )


def _pyflakes_range(lines: TextIndex, line: int, byte_column: int) -> Range:
    text = lines.line(line)
    column = len(decode_prefix(encode_text(text)[:byte_column]))
    word = _WORD.match(text, column)
    end = word.end() if word else min(column + 1, len(text))
    return Range(Position(line, utf16_length(text[:column])), Position(line, utf16_length(text[:end])))


def _tree_sitter(language: Language, text: str) -> list[Problem]:
    lines = TextIndex(text)
    tree = language.parse(lines.data)
    if not tree.root_node.has_error:
        return []
    captures = ts.QueryCursor(_bad_nodes_query(language)).captures(tree.root_node)
    found = []
    for node in captures.get("error", []):
        snippet = (node.text or b"").decode("utf-8", "replace").strip().splitlines()
        shown = snippet[0][:30] if snippet else ""
        message = f"syntax error: unexpected `{shown}`" if shown else "syntax error"
        found.append(Problem(message, _node_range(lines, node), "tree-sitter"))
    for node in captures.get("missing", []):
        found.append(Problem(f"syntax error: missing `{node.type}`", _node_range(lines, node), "tree-sitter"))
    return sorted(found, key=lambda p: (p.range.start, p.message))


@cache
def _bad_nodes_query(language: Language) -> ts.Query:
    return ts.Query(language.ts_language, _BAD_NODES)


def _node_range(lines: TextIndex, node: ts.Node) -> Range:
    return Range(lines.position_of_byte(node.start_byte), lines.position_of_byte(node.end_byte))

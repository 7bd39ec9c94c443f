"""Brackets left open at the end of a text, read as its language reads strings and comments.

Role: `open_brackets(text, language)` gives the brackets open before the cursor, innermost last
(`constraints.Site.open_brackets`, which the decode-time monitor lets the output close).
Brackets inside strings and comments are text:
- Python: `#` comments, '...' / "..." (to the line's end) and triple-quoted strings;
- JavaScript/TypeScript: `//` and `/* */` comments, '...' / "..." (to the line's end), template
  literals `...${expr}...` (a `${` counts as an open `{` until its `}`), and regular expressions
  where a `/` cannot divide (`/[(]/` after `=`, `(`, `return`...);
- Go: comments, "..." and '...' (to the line's end), raw `...` strings (no escapes, spanning lines);
- Rust: comments (block comments nest), "..." spanning lines, raw strings r"..." / r#"..."#,
  character literals ('(' , '\\'') but not lifetimes or labels (`&'a str`, `break 'outer`).
Any other language: `//` comments and the three quotes, as before languages were told apart.

Invariants: pure, linear in the text, never raises. A closer that does not match the innermost
open bracket means the scan began inside something (the text may start mid-file): it starts over.
"""

from __future__ import annotations

import re

_OPEN = {"(": ")", "[": "]", "{": "}"}
_WORD = re.compile(r"[A-Za-z0-9_$\u0080-\U0010ffff]+")
# words after which a `/` starts a regular expression rather than a division
_EXPRESSION_WORDS = frozenset("return typeof instanceof in of new delete void throw case do else yield await".split())
_TEMPLATE_TEXT = re.compile(r"(?:\\[\s\S]|\$(?!\{)|[^`\\$])*")
_REGEX = re.compile(r"/(?:\\.|\[(?:\\.|[^\]\\\n])*\]?|[^/\\\n\[])*/?")
_RUST_CHAR = re.compile(r"'(?:\\(?:u\{[0-9a-fA-F_]*\}|x..|.)|[^\\'\n])'")
_RUST_RAW = re.compile(r"(?:b|c)?r(#*)\"")
_BRACE_LANGUAGES = frozenset({"javascript", "typescript", "tsx", "go", "rust"})


def open_brackets(text: str, language: str) -> str:
    """Brackets left open at the end of `text`, innermost last (see the module docstring)."""
    if language in _BRACE_LANGUAGES:
        return _brace_brackets(text, language)
    return _simple_brackets(text, language)


def _brace_brackets(text: str, language: str) -> str:
    js, rust = language in ("javascript", "typescript", "tsx"), language == "rust"
    stack: list[str] = []  # "(", "[", "{" or "${" (a template's expression)
    i, n, operand = 0, len(text), False
    while i < n:
        c = text[i]
        if c in " \t\r\n":
            i += 1
        elif text.startswith("//", i):
            end = text.find("\n", i)
            i = n if end < 0 else end
        elif text.startswith("/*", i):
            i = _block_comment_end(text, i, nested=rust)
        elif c == "`" and js:
            i = _template_end(text, i + 1, stack)
            operand = True
        elif c == "/" and js and not operand:
            i = _REGEX.match(text, i).end()
            operand = True
        elif c == "'" and rust:
            literal = _RUST_CHAR.match(text, i)
            i = literal.end() if literal else i + 1  # a lifetime or label: its name is a word
            operand = literal is not None
        elif c in "\"'`":
            i = _string_end(text, i, multiline=rust or c == "`", escapes=c != "`")
            operand = True
        elif rust and (raw := _RUST_RAW.match(text, i)) and not _WORD.match(text[i - 1 : i] or " "):
            end = text.find('"' + raw.group(1), raw.end())
            i, operand = (n if end < 0 else end + 1 + len(raw.group(1))), True
        elif word := _WORD.match(text, i):
            i, operand = word.end(), word.group() not in _EXPRESSION_WORDS
        else:
            i, operand = i + 1, c in ")]}"
            if c in _OPEN:
                stack.append(c)
            elif c in ")]}":
                top = stack.pop() if stack else ""
                if top == "${" and c == "}":
                    i = _template_end(text, i, stack)
                elif not top or _OPEN[top] != c:
                    stack.clear()
    return "".join("{" if b == "${" else b for b in stack)


def _template_end(text: str, i: int, stack: list[str]) -> int:
    """From inside a template literal's text at `i`: past its closing backquote, or past a `${`
    (pushed on `stack`), or the end of the text."""
    i = _TEMPLATE_TEXT.match(text, i).end()
    if text.startswith("${", i):
        stack.append("${")
        return i + 2
    return min(len(text), i + 1)


def _block_comment_end(text: str, i: int, nested: bool) -> int:
    depth, i = 1, i + 2
    while depth:
        end = text.find("*/", i)
        if end < 0:
            return len(text)
        inner = text.find("/*", i, end) if nested else -1
        depth, i = (depth + 1, inner + 2) if inner >= 0 else (depth - 1, end + 2)
    return i


def _string_end(text: str, i: int, multiline: bool, escapes: bool) -> int:
    """Index just past the string opened at `i` (or the end of its line, or of the text)."""
    quote, j, n = text[i], i + 1, len(text)
    while j < n:
        c = text[j]
        if c == "\\" and escapes:
            j += 2
            continue
        if c == quote:
            return j + 1
        if c == "\n" and not multiline:
            return j
        j += 1
    return n


def _simple_brackets(text: str, language: str) -> str:
    """Python's rules (and, for a language not told apart, `//` comments and three quotes)."""
    stack: list[str] = []
    comment = "#" if language == "python" else "//"
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith(comment, i):
            end = text.find("\n", i)
            i = n if end < 0 else end
            continue
        if c in "\"'`":
            i = _python_string_end(text, i) if language == "python" else _string_end(text, i, c == "`", escapes=True)
            continue
        if c in _OPEN:
            stack.append(c)
        elif c in ")]}" and stack and _OPEN[stack[-1]] == c:
            stack.pop()
        elif c in ")]}":
            stack.clear()  # unbalanced: the scan started inside something; start over
        i += 1
    return "".join(stack)


def _python_string_end(text: str, i: int) -> int:
    quote = text[i]
    if text.startswith(quote * 3, i):
        end = text.find(quote * 3, i + 3)
        return len(text) if end < 0 else end + 3
    return _string_end(text, i, multiline=quote == "`", escapes=True)

"""Character-level rules for the brace languages (JavaScript, TypeScript, Go, Rust), and the
plain rules for any other language: what the monitor can check without knowing names.

Role: the other languages' counterpart of `lexer.PyRules`, with the same interface (`step`,
`settle`, `can_end`, `single_line`), so `monitor.Compiled` drives either. Rules:
- "heal": the output must begin with the heal prefix;
- "bracket": a closer must match the innermost open bracket (those open before the cursor may
  close), outside strings, comments and regular expressions;
- "line": single-line mode ends at the first newline; the output may not end inside a string,
  character literal, regular expression or block comment it opened, nor with brackets of its
  own open unless it opened one last (`items.forEach((x) => {`, `foo(`: a block, argument list
  or literal continued on the lines below, as formatted code in these languages does).
There are no identifier or member rules: the IDE state knows defined names and members for
Python only (`context/constraints.py`).

The lexical facts of each dialect:
- all: `//` line comments and `/* */` block comments (nested in Rust);
- JavaScript/TypeScript: '...' and "..." end at the line; template literals `...${expr}...`
  span lines and nest; a `/` where no operand stands before it opens a regular expression
  (`/[(]/`), whose brackets are text;
- Go: "..." and '...' (runes) end at the line; `...` is raw (no escapes) and spans lines;
- Rust: "..." spans lines; r"...", r#"..."# (and b/br/c/cr prefixes) are raw; `'x'` and
  `'\\n'` are character literals while `'a` in `&'a str` or `break 'outer` is a lifetime or label.
The plain rules (a language with none of these) know no strings or comments, so they check no
brackets: only the heal prefix and the single line.

Invariants: torch-free and pure; a state is an immutable, hashable tuple (memoised by the
monitor); lenient where the text is not the language (an unterminated string ends at its line
when it is not the output's own). Whatever the rules open (brackets, strings, comments) is
marked the output's own; `monitor.Compiled` clears the marks of what the text before the
cursor opened, as it does for `PyRules`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import NamedTuple

from model_runtime.constraint.lexer import Frame

OPENERS, CLOSERS = "([{", ")]}"
CODE, STRING, LINE_COMMENT, BLOCK_COMMENT, SLASH, REGEX, QUOTE, RAW_OPEN, DONE = range(9)
# words after which a `/` starts a regular expression rather than a division
_EXPRESSION_WORDS = frozenset(
    "return typeof instanceof in of new delete void throw case do else yield await".split()
)
_RAW_PREFIXES = frozenset({"r", "br", "cr"})
WORD_KEEP = 12  # the end of the word being written that a rule reads (longer than any word it looks for)


@dataclass(frozen=True, slots=True)
class Dialect:
    """What a language's strings and comments look like (see the module docstring)."""

    name: str
    line_quotes: str = ""  # open a string with escapes that ends at its line
    multiline_quotes: str = ""  # open a string with escapes that spans lines
    raw_quotes: str = ""  # open a raw string (no escapes) that spans lines
    template: bool = False  # ` opens a template literal with ${...}
    regex: bool = False
    nested_comments: bool = False
    rust_quotes: bool = False  # ' is a character literal or a lifetime; r"..." / r#"..."# are raw
    comments: bool = True
    brackets: bool = True


_JS = dict(line_quotes="'\"", template=True, regex=True)
DIALECTS: dict[str, Dialect] = {
    "javascript": Dialect("javascript", **_JS),
    "typescript": Dialect("typescript", **_JS),
    "tsx": Dialect("tsx", **_JS),
    "go": Dialect("go", line_quotes="'\"", raw_quotes="`"),
    "rust": Dialect("rust", multiline_quotes='"', nested_comments=True, rust_quotes=True),
}
PLAIN = Dialect("plain", comments=False, brackets=False)


def dialect_for(language: str) -> Dialect:
    """The dialect of `language` (an LSP languageId or `context.languages` name); `PLAIN` if none."""
    name = {"javascriptreact": "javascript", "jsx": "javascript", "typescriptreact": "tsx"}.get(language, language)
    return DIALECTS.get(name, PLAIN)


class BraceState(NamedTuple):
    mode: int = CODE
    close: str = ""  # what ends the open string ('"', "'", '`', '"##')
    escapes: bool = True  # backslash escapes in the open string
    multiline: bool = True  # the open string may span lines
    escape: bool = False
    matched: int = 0  # raw string: characters of `close` matched; raw opener: its `#`s; regex: in a [class]
    depth: int = 0  # block comment nesting
    last: str = ""  # the previous character inside a comment (for `*/`, `/*`) or a template (`${`)
    own_string: bool = False  # the open string, literal or comment was opened by the output
    stack: tuple[Frame, ...] = ()
    word: str = ""  # the end of the identifier being written
    operand: bool = False  # the last significant token was an operand (a `/` after it divides)
    opened: bool = False  # the last significant character opened a bracket of the output's own
    pending: str = ""  # Rust: the character after a `'`, until a lifetime or a literal is told
    heal: str = ""  # heal characters still to produce


# runs of characters that change nothing but the word and operand marks (code), or nothing at all
_CODE_RUN = re.compile(r"[^'\"`/()\[\]{}#]+")
_LINE_COMMENT_RUN = re.compile(r"[^\n]+")
_BLOCK_COMMENT_RUN = re.compile(r"[^*/]+")
_TRAILING_WORD = re.compile(r"[\w$]*$")


def _ident(ch: str) -> bool:
    return ch.isalnum() or ch in "_$"


class BraceRules:
    """The per-request rules of a brace language (or the plain ones)."""

    def __init__(self, dialect: Dialect, single_line: bool) -> None:
        self.dialect = dialect
        self.single_line = single_line

    # ---- the public transition --------------------------------------------------------------
    def step(self, s: BraceState, ch: str, check: bool = True) -> tuple[BraceState | None, str]:
        """The state after `ch`, or (None, rule) when a rule refuses it (`check=False`: facts)."""
        if s.heal:
            if ch != s.heal[0]:
                return None, "heal"
            return self._char(s._replace(heal=s.heal[1:]), ch, False)
        return self._char(s, ch, check)

    def facts(self, text: str) -> BraceState:
        """The state after `text` read as facts (the text before the cursor): `step` with no checks,
        but runs of characters that change no mode or bracket are taken whole (~20x faster)."""
        single, self.single_line = self.single_line, False
        s, i, n = BraceState(), 0, len(text)
        try:
            while i < n:
                run = _run(s, text, i) if self.dialect.brackets else None
                if run is not None and run.end() > i:
                    s, i = _after_run(s, run.group()), run.end()
                    continue
                s = self.step(s, text[i], False)[0] or s
                i += 1
        finally:
            self.single_line = single
        return s

    def settle(self, s: BraceState) -> BraceState:
        """Typed characters are facts; no rule here depends on a word being completed."""
        return s

    def can_end(self, s: BraceState) -> str:
        """"" when the output may end here, else the rule that forbids it."""
        if s.heal:
            return "heal"
        if s.mode == DONE or not self.dialect.brackets:
            return ""
        if s.mode == QUOTE and s.pending and _ident(s.pending):
            return ""  # `'a` at the end: a lifetime or label
        if s.mode in (STRING, BLOCK_COMMENT, REGEX, QUOTE, RAW_OPEN) and s.own_string:
            return "line"
        if any(f.own for f in s.stack) and not s.opened:
            return "line"
        return ""

    # ---- characters -------------------------------------------------------------------------
    def _char(self, s: BraceState, ch: str, check: bool) -> tuple[BraceState | None, str]:
        mode = s.mode
        if mode == DONE:
            return s, ""
        if mode == CODE:
            return self._code(s, ch, check)
        if mode == STRING:
            return self._string(s, ch, check)
        if mode == LINE_COMMENT:
            return (self._newline(s._replace(mode=CODE, own_string=False), check) if ch == "\n" else (s, ""))
        if mode == BLOCK_COMMENT:
            return self._block_comment(s, ch, check)
        if mode == SLASH:
            return self._after_slash(s, ch, check)
        if mode == REGEX:
            return self._regex(s, ch, check)
        if mode == QUOTE:
            return self._quote(s, ch, check)
        return self._raw_open(s, ch, check)

    def _code(self, s: BraceState, ch: str, check: bool) -> tuple[BraceState | None, str]:
        d = self.dialect
        if _ident(ch):
            word = (s.word + ch)[-WORD_KEEP:]
            return s._replace(word=word, operand=word not in _EXPRESSION_WORDS, opened=False), ""
        word, s = s.word, s._replace(word="")
        if ch == "\n":
            return self._newline(s, check)
        if ch in " \t\r":
            return s, ""
        if not d.brackets:
            return s._replace(opened=False), ""
        if d.rust_quotes and word in _RAW_PREFIXES and ch in '"#':
            if ch == '"':
                return self._open_string(s, '"', escapes=False, multiline=True), ""
            return s._replace(mode=RAW_OPEN, matched=1, own_string=True, opened=False), ""
        if ch in d.line_quotes:
            return self._open_string(s, ch, escapes=True, multiline=False), ""
        if ch in d.multiline_quotes:
            return self._open_string(s, ch, escapes=True, multiline=True), ""
        if ch in d.raw_quotes:
            return self._open_string(s, ch, escapes=False, multiline=True), ""
        if ch == "`" and d.template:
            return self._open_string(s, ch, escapes=True, multiline=True), ""
        if ch == "'" and d.rust_quotes:
            return s._replace(mode=QUOTE, pending="", own_string=True, opened=False), ""
        if ch == "/" and d.comments:
            return s._replace(mode=SLASH, own_string=True), ""
        if ch in OPENERS:
            return s._replace(stack=s.stack + (Frame(ch, "bracket", True),), operand=False, opened=True), ""
        if ch in CLOSERS:
            return self._close(s, ch, check)
        return s._replace(operand=False, opened=False), ""

    def _open_string(self, s: BraceState, quote: str, escapes: bool, multiline: bool) -> BraceState:
        return s._replace(mode=STRING, close=quote, escapes=escapes, multiline=multiline, escape=False, matched=0,
                          last="", own_string=True, opened=False)

    def _close(self, s: BraceState, ch: str, check: bool) -> tuple[BraceState | None, str]:
        if not s.stack:
            return (None, "bracket") if check else (s._replace(operand=True, opened=False), "")
        top = s.stack[-1]
        if OPENERS[CLOSERS.index(ch)] != top.char:
            if check:
                return None, "bracket"
            return s._replace(stack=s.stack[:-1], operand=True, opened=False), ""
        s = s._replace(stack=s.stack[:-1], operand=True, opened=False)
        if top.role in ("template", "own-template"):  # `}` ends a template's `${...}`: back in its text
            own = top.own and top.role == "own-template"  # the text is the output's if it opened the literal
            return s._replace(mode=STRING, close="`", escapes=True, multiline=True, last="", own_string=own), ""
        return s, ""

    def _newline(self, s: BraceState, check: bool) -> tuple[BraceState | None, str]:
        if self.single_line:
            why = self.can_end(s)
            if check and why:
                return None, why
            return s._replace(mode=DONE), ""
        return s, ""

    def _string(self, s: BraceState, ch: str, check: bool) -> tuple[BraceState | None, str]:
        if s.escape:
            return s._replace(escape=False, last=""), ""
        if ch == "\\" and s.escapes:
            return s._replace(escape=True, last=""), ""
        if ch == "\n" and not s.multiline:
            if check and s.own_string:
                return None, "line"
            return self._newline(s._replace(mode=CODE, close="", own_string=False), check)
        if ch == "\n" and self.single_line:
            return (None, "line") if check and s.own_string else (s._replace(mode=DONE), "")
        if len(s.close) > 1:  # a raw string closes on `"` and its `#`s
            matched = s.matched + 1 if ch == s.close[s.matched] else int(ch == s.close[0])
            if matched == len(s.close):
                return self._end_string(s), ""
            return s._replace(matched=matched), ""
        if ch == s.close:
            return self._end_string(s), ""
        if s.close == "`" and self.dialect.template:
            if ch == "{" and s.last == "$":
                role = "own-template" if s.own_string else "template"
                return s._replace(mode=CODE, stack=s.stack + (Frame("{", role, True),), last="", own_string=False,
                                  operand=False, opened=True), ""
            return s._replace(last=ch if ch == "$" else ""), ""
        return s, ""

    def _end_string(self, s: BraceState) -> BraceState:
        return s._replace(mode=CODE, close="", matched=0, last="", own_string=False, operand=True, opened=False)

    def _block_comment(self, s: BraceState, ch: str, check: bool) -> tuple[BraceState | None, str]:
        if ch == "/" and s.last == "*":
            if s.depth > 1:
                return s._replace(depth=s.depth - 1, last=""), ""
            return s._replace(mode=CODE, depth=0, last="", own_string=False), ""
        if ch == "*" and s.last == "/" and self.dialect.nested_comments:
            return s._replace(depth=s.depth + 1, last=""), ""
        if ch == "\n" and self.single_line:
            return (None, "line") if check and s.own_string else (s._replace(mode=DONE), "")
        return s._replace(last=ch if ch in "*/" else ""), ""

    def _after_slash(self, s: BraceState, ch: str, check: bool) -> tuple[BraceState | None, str]:
        """The character after a `/`: a comment, a regular expression or a division."""
        own = s.own_string
        if ch == "/":
            return s._replace(mode=LINE_COMMENT, own_string=False), ""
        if ch == "*":
            return s._replace(mode=BLOCK_COMMENT, depth=1, last="", own_string=own), ""
        if self.dialect.regex and not s.operand:
            return self._regex(s._replace(mode=REGEX, matched=0, escape=False, own_string=own), ch, check)
        return self._code(s._replace(mode=CODE, own_string=False, operand=False, opened=False), ch, check)

    def _regex(self, s: BraceState, ch: str, check: bool) -> tuple[BraceState | None, str]:
        if ch == "\n":  # not a regular expression after all (a regex never spans lines)
            if check and s.own_string:
                return None, "line"
            return self._newline(s._replace(mode=CODE, own_string=False), check)
        if s.escape:
            return s._replace(escape=False), ""
        if ch == "\\":
            return s._replace(escape=True), ""
        if ch == "[" or ch == "]":
            return s._replace(matched=int(ch == "[")), ""
        if ch == "/" and not s.matched:
            return s._replace(mode=CODE, own_string=False, operand=True, opened=False), ""
        return s, ""

    def _quote(self, s: BraceState, ch: str, check: bool) -> tuple[BraceState | None, str]:
        """Rust after `'`: `'x'` and `'\\n'` are character literals, `'a` a lifetime or label."""
        if not s.pending:
            if ch == "\\":
                return s._replace(mode=STRING, close="'", escapes=True, multiline=False, escape=True), ""
            if ch == "\n":
                return self._code(s._replace(mode=CODE, own_string=False), ch, check)
            return s._replace(pending=ch), ""
        pending, s = s.pending, s._replace(mode=CODE, pending="", own_string=False)
        if ch == "'":
            return s._replace(operand=True, opened=False), ""
        if _ident(pending):  # a lifetime or label: `pending` began its name
            return self._code(s._replace(word=pending), ch, check)
        nxt, why = self._code(s, pending, check)
        return (self._code(nxt, ch, check) if nxt is not None else (None, why))

    def _raw_open(self, s: BraceState, ch: str, check: bool) -> tuple[BraceState | None, str]:
        """Rust after `r#`: more `#`s, then `"` opens a raw string; else a raw identifier (`r#type`)."""
        if ch == "#":
            return s._replace(matched=s.matched + 1), ""
        if ch == '"':
            close = '"' + "#" * s.matched
            return s._replace(mode=STRING, close=close, escapes=False, multiline=True, matched=0, escape=False), ""
        return self._code(s._replace(mode=CODE, matched=0, own_string=False), ch, check)



def _run(s: BraceState, text: str, i: int) -> re.Match[str] | None:
    """The run at `i` that `_after_run` can take whole, if the mode has one."""
    if s.mode == CODE:
        return _CODE_RUN.match(text, i)
    if s.mode == LINE_COMMENT:
        return _LINE_COMMENT_RUN.match(text, i)
    if s.mode == BLOCK_COMMENT:
        return _BLOCK_COMMENT_RUN.match(text, i)
    return None


def _after_run(s: BraceState, chunk: str) -> BraceState:
    """The state after a run of `_run` (what `BraceRules.step` would give char by char)."""
    if s.mode == LINE_COMMENT:
        return s
    if s.mode == BLOCK_COMMENT:
        return s._replace(last="")
    body = chunk.rstrip(" \t\r\n")
    if not body:
        return s._replace(word="")
    if not _ident(body[-1]):
        return s._replace(word="", operand=False, opened=False)
    word = _TRAILING_WORD.search((s.word if _ident(chunk[0]) else "") + body).group()[-WORD_KEEP:]
    return s._replace(word=word if body == chunk else "", operand=word not in _EXPRESSION_WORDS, opened=False)

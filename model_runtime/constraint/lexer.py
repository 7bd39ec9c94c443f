"""A character-level Python lexer that says, char by char, whether the output stays legal.

Role: the state machine behind the decode-time monitor (`model_runtime.constraint.monitor`).
`PyRules.step(state, ch)` returns the next `LexState`, or None and the rule that refuses `ch`:
- "heal": the output must begin with the heal prefix;
- "member": after `qualifier.` (a `MemberScope`), only its members;
- "undefined": an identifier in a *use* position must be a defined name, an expression keyword
  or a name the output bound itself; right after an operand only a keyword such as `if`/`in`/`and`
  may follow; outside strings and comments only Python's punctuation; new bindings (def/class/for/as/lambda/import/global names, parameters,
  assignment targets, keyword-argument names) are free;
- "bracket": a closer must match the innermost open bracket (those open before the cursor may close);
- "line": the line (single-line mode) or the output may not end with its own brackets or string
  open, nor right after an operator or keyword that needs an operand (`x = `, `a +`, `not`).

Invariants:
- Torch-free and pure: a state is an immutable, hashable tuple, so transitions can be memoised.
- Identifiers at a statement start or at a call argument's start are *pending*: whether they are
  a target (`x = ...`, `f(key=...)`) or a use is settled by the next significant character.
- Known gaps (lenient, never over-strict): names inside `[...]`/`{...}` are not checked
  (comprehension variables are used before their `for`); f-string fields are string text.
"""

from __future__ import annotations

import keyword
from bisect import bisect_left
from typing import NamedTuple

KEYWORDS = frozenset(keyword.kwlist)  # soft keywords (`match`, `case`, `_`, `type`) are names, but see SOFT_STATEMENTS
SOFT_STATEMENTS = frozenset({"match", "case"})  # keywords when they start a statement and a space follows
STRING_PREFIXES = frozenset({"r", "u", "b", "f", "br", "rb", "fr", "rf"})
EXPR_KEYWORDS = frozenset({"None", "True", "False", "not", "lambda", "await", "yield"})  # may start an expression
CONT_KEYWORDS = frozenset({"if", "else", "for", "in", "not", "and", "or", "is", "as", "from", "import", "async"})
OPENERS, CLOSERS = "([{", ")]}"
PUNCTUATION = frozenset("+-*/%&|^~<>=!.,:;@")
OPERATORS = frozenset("+-*/%&|^~<>=!@")  # need a right operand
FOLLOWERS = {"not": "in", "yield": "from"}
NEEDS_OPERAND = frozenset({"and", "or", "not", "in", "is", "if", "else", "lambda", "await", "assert", "del", "elif", "while", "with"})
CODE, STRING, COMMENT, DONE = range(4)
# the kind of the word being written
NONE, NUMBER, USE, MEMBER, FREE, BIND, PENDING, CONT = range(8)  # CONT: a word right after an operand
# context for the next identifier
C_USE, C_STMT, C_BIND, C_DEFNAME, C_DEFPAREN, C_TARGETS, C_EXEMPT, C_LAMBDA, C_KWARG = range(9)


class Frame(NamedTuple):
    char: str  # the opener
    role: str  # call | params | default | group | sub | list | dict
    own: bool  # opened by the output (False: open before the cursor)


class LexState(NamedTuple):
    mode: int = CODE
    quote: str = ""  # the open string's quote ("'", '"', "'''", '"""')
    escape: bool = False
    run: int = 0  # quote characters in a row inside a triple-quoted string
    own_string: bool = False
    body: bool = False  # the open single-quoted string has characters
    empty_quote: str = ""  # a quote just closed an empty string: a third one opens a triple quote
    stack: tuple[Frame, ...] = ()
    word: str = ""
    kind: int = NONE
    scope: int = -1  # member scope index for MEMBER words
    pend: str = ""  # a finished pending identifier waiting for the next significant char
    pend_kwarg: bool = False
    ctx: int = C_STMT
    exempt: bool = False  # import/global statement: every name is free
    dot: bool = False  # the last significant char was `.`
    last: str | None = None  # the dotted name chain of the last operand, if it was one
    operand: bool = False  # the last significant thing was an operand (for call/subscript)
    dangling: bool = False  # the last significant thing was an operator or keyword that needs an operand
    after: str = ""  # the last word, if a keyword that another may follow (`not in`, `yield from`)
    heal: str = ""  # heal characters still to produce
    own: frozenset[str] = frozenset()  # names the output bound


def _has_prefix(names: tuple[str, ...], prefix: str) -> bool:
    i = bisect_left(names, prefix)
    return i < len(names) and names[i].startswith(prefix)


def _contains(names: tuple[str, ...], name: str) -> bool:
    i = bisect_left(names, name)
    return i < len(names) and names[i] == name


def _is_ident_char(ch: str) -> bool:
    return ch.isalnum() or ch == "_"


class PyRules:
    """The per-request rules: defined names, member scopes, single-line mode."""

    def __init__(self, defined: tuple[str, ...] | None, scopes: dict[str, tuple[str, ...]], single_line: bool) -> None:
        self.check_names = defined is not None
        defined = set(defined or ()) - frozenset(keyword.kwlist)  # a hard keyword is never a name
        self.names = tuple(sorted(defined | EXPR_KEYWORDS | STRING_PREFIXES))
        self.defined = frozenset(defined) | EXPR_KEYWORDS
        self.cont = tuple(sorted(CONT_KEYWORDS))
        self.scope_names = list(scopes)
        self.scope_members = [tuple(sorted(set(scopes[q]))) for q in self.scope_names]
        self.single_line = single_line

    # ---- the public transition --------------------------------------------------------------
    def step(self, s: LexState, ch: str, check: bool = True) -> tuple[LexState | None, str]:
        """The state after `ch`, or (None, rule) when a rule refuses it (`check=False`: facts, no rule but heal)."""
        if s.heal:
            if ch != s.heal[0]:
                return None, "heal"
            nxt, why = self._char(s._replace(heal=s.heal[1:]), ch, False)
            if nxt is not None and not nxt.heal:
                nxt = self.settle(nxt)
            return nxt, why
        return self._char(s, ch, check)

    def settle(self, s: LexState) -> LexState:
        """Typed characters are facts: a word the rules cannot complete becomes free."""
        if s.word and s.kind in (USE, MEMBER, CONT) and not self._word_ok(s, s.word, partial=True):
            return s._replace(kind=FREE)
        return s

    def can_end(self, s: LexState) -> str:
        """"" when the output may end here, else the rule that forbids it."""
        if s.heal:
            return "heal"
        if s.mode == DONE:
            return ""
        if (s.mode == STRING and s.own_string) or any(f.own for f in s.stack):
            return "line"
        if s.word:
            s, why = self._end_word(s, " ", True)
            if s is None:
                return why
        if s.pend and self.check_names:
            return "undefined"
        if s.dot:
            return "member" if s.last in self.scope_names else "undefined"
        return "line" if s.dangling else ""

    # ---- characters -------------------------------------------------------------------------
    def _char(self, s: LexState, ch: str, check: bool) -> tuple[LexState | None, str]:
        if s.mode == DONE:
            return s, ""
        if s.mode == COMMENT:
            return (self._newline(s._replace(mode=CODE), check) if ch == "\n" else (s, ""))
        if s.mode == STRING:
            return self._string(s, ch, check)
        if _is_ident_char(ch) or (ch == "." and s.kind == NUMBER):
            return self._word_char(s, ch, check)
        if ch == "\ufffd":  # part of a multi-byte character outside a string
            return (None, "undefined") if check else (s, "")
        if s.word:
            s, why = self._end_word(s, ch, check)
            if s is None:
                return None, why
        if s.pend and ch not in " \t\\":
            s, why = self._resolve(s, ch, check)
            if s is None:
                return None, why
        return self._code(s, ch, check)

    def _string(self, s: LexState, ch: str, check: bool) -> tuple[LexState | None, str]:
        if s.escape:
            return s._replace(escape=False, run=0, body=True), ""
        if ch == "\\":
            return s._replace(escape=True, run=0, body=True), ""
        if len(s.quote) == 1:
            if ch == s.quote:
                return self._close_string(s, not s.body), ""
            if ch == "\n":
                if check and s.own_string:
                    return None, "line"
                return self._newline(s._replace(mode=CODE, quote="", own_string=False), check)
            return (s if s.body else s._replace(body=True)), ""
        if ch == s.quote[0]:
            return (self._close_string(s, False), "") if s.run == 2 else (s._replace(run=s.run + 1), "")
        return s._replace(run=0), ""

    def _close_string(self, s: LexState, empty: bool) -> LexState:
        return s._replace(mode=CODE, empty_quote=s.quote if empty else "", quote="", run=0, body=False,
                          own_string=False, operand=True, dangling=False, last=None, dot=False)

    def _word_char(self, s: LexState, ch: str, check: bool) -> tuple[LexState | None, str]:
        if s.pend:
            s, why = self._resolve(s, ch, check)
            if s is None:
                return None, why
        if not s.word:
            if check and s.dot and ch.isdigit():
                return None, "member" if s.last in self.scope_names else "undefined"
            s = self._start_word(s, ch)
        word = s.word + ch
        if check and s.kind in (USE, MEMBER, CONT) and not self._word_ok(s, word, partial=True):
            return None, "member" if s.kind == MEMBER else "undefined"
        return s._replace(word=word, empty_quote=""), ""

    def _start_word(self, s: LexState, ch: str) -> LexState:
        if s.dot:
            scope = self.scope_names.index(s.last) if s.last in self.scope_names else -1
            return s._replace(kind=MEMBER if scope >= 0 else FREE, scope=scope)
        if ch.isdigit() or ch == ".":
            return s._replace(kind=NUMBER)
        if s.operand and not s.exempt and self.check_names:
            return s._replace(kind=CONT)
        top = s.stack[-1].role if s.stack else ""
        if s.exempt or s.ctx in (C_BIND, C_DEFNAME, C_TARGETS, C_LAMBDA) or top == "params":
            kind = BIND
        elif top in ("list", "dict"):
            kind = FREE
        elif s.ctx in (C_STMT, C_KWARG):
            kind = PENDING
        else:
            kind = USE
        return s._replace(kind=kind if self.check_names or kind in (BIND, PENDING) else FREE)

    def _word_ok(self, s: LexState, word: str, partial: bool) -> bool:
        if s.kind == MEMBER:
            members = self.scope_members[s.scope]
            return _has_prefix(members, word) if partial else _contains(members, word)
        if s.kind == CONT:
            return (_has_prefix(self.cont, word) or word.lower() in STRING_PREFIXES) if partial else word in CONT_KEYWORDS
        if partial:
            return _has_prefix(self.names, word) or any(n.startswith(word) for n in s.own) or FOLLOWERS.get(s.after, " ").startswith(word)
        return word in self.defined or word in s.own or FOLLOWERS.get(s.after) == word

    def _end_word(self, s: LexState, ch: str, check: bool) -> tuple[LexState | None, str]:
        word, kind = s.word, s.kind
        if kind == NUMBER:
            return s._replace(word="", kind=NONE, operand=True, dangling=False, last=None, dot=False), ""
        if ch in "'\"" and word.lower() in STRING_PREFIXES and not s.dot:  # `math.f"` opens no string
            return s._replace(word="", kind=NONE, operand=False, last=None, dot=False), ""
        expression = word in EXPR_KEYWORDS or FOLLOWERS.get(s.after) == word
        keyword = kind in (PENDING, BIND, FREE) or (kind == USE and expression) or (kind == CONT and word in CONT_KEYWORDS)
        if word in KEYWORDS and keyword and not s.dot:
            return self._keyword(s._replace(word="", kind=NONE), word), ""
        if kind == PENDING and word in SOFT_STATEMENTS and ch in " \t":  # `match x:` / `case <pattern>:`
            return s._replace(word="", kind=NONE, operand=False, last=None, ctx=C_USE, exempt=word == "case"), ""
        if check and kind in (USE, MEMBER, CONT) and not self._word_ok(s, word, False):
            return None, "member" if kind == MEMBER else "undefined"
        s = s._replace(word="", kind=NONE, scope=-1)
        chain = (s.last + "." + word) if s.dot and s.last is not None else (None if s.dot else word)
        s = s._replace(operand=True, dangling=False, last=chain, dot=False)
        if kind == BIND:
            s = s._replace(own=s.own | {word}, ctx=C_DEFPAREN if s.ctx == C_DEFNAME else s.ctx)
            return s._replace(ctx=C_USE) if s.ctx == C_BIND else s, ""
        if kind == PENDING and word not in self.defined and word not in s.own:
            return s._replace(pend=word, pend_kwarg=s.ctx == C_KWARG, ctx=C_USE), ""
        return s._replace(ctx=C_USE) if s.ctx in (C_STMT, C_KWARG) else s, ""

    def _keyword(self, s: LexState, word: str) -> LexState:
        s = s._replace(operand=word in ("None", "True", "False"), dangling=word in NEEDS_OPERAND, last=None, dot=False,
                       after=word if word in FOLLOWERS else "")
        if word == "async":  # `async def` / `async for` / `async with`: the next keyword decides
            return s._replace(dangling=False)
        if word in ("def", "class"):
            return s._replace(ctx=C_DEFNAME if word == "def" else C_BIND)
        if word in ("as", "global", "nonlocal"):
            return s._replace(ctx=C_BIND, exempt=s.exempt or word != "as")
        if word in ("import", "from"):
            return s._replace(exempt=True)
        if word == "for":
            return s._replace(ctx=C_TARGETS)
        if word == "lambda":
            return s._replace(ctx=C_LAMBDA)
        return s._replace(ctx=C_USE)

    def _resolve(self, s: LexState, ch: str, check: bool) -> tuple[LexState | None, str]:
        """Settle a pending identifier by the significant char after it."""
        name, kwarg = s.pend, s.pend_kwarg
        s = s._replace(pend="", pend_kwarg=False)
        target = ch == "=" if kwarg else (ch in "=,:" or ch in "+-*/%&|^<>@")
        if target:
            return s._replace(own=s.own | {name}, ctx=C_STMT if ch == "," and not kwarg else s.ctx), ""
        if check and self.check_names:
            return None, "undefined"
        return s, ""

    # ---- code punctuation -------------------------------------------------------------------
    def _code(self, s: LexState, ch: str, check: bool) -> tuple[LexState | None, str]:
        empty, s = s.empty_quote, s._replace(empty_quote="")
        if s.after and ch not in " \t\\\r":
            s = s._replace(after="")
        if check and s.dot:  # only a member name may follow `name.`
            return None, "member" if s.last in self.scope_names else "undefined"
        if ch in " \t\\\r":
            return s, ""
        if ch == "\n":
            return self._newline(s, check)
        if ch in "'\"":
            if empty == ch:
                return s._replace(mode=STRING, quote=ch * 3, own_string=True, operand=False, body=False), ""
            return s._replace(mode=STRING, quote=ch, own_string=True, operand=False, body=False), ""
        if ch == "#":
            if check and s.dangling and not s.stack:  # `x = # ...`: the line would end without its operand
                return None, "line"
            return s._replace(mode=COMMENT), ""
        if ch in OPENERS:
            return self._open(s, ch), ""
        if ch in CLOSERS:
            return self._close(s, ch, check)
        if check and ch not in PUNCTUATION:  # not Python outside strings and comments
            return None, "undefined"
        return self._punct(s, ch), ""

    def _newline(self, s: LexState, check: bool) -> tuple[LexState | None, str]:
        if s.pend:
            s, why = self._resolve(s, "\n", check)
            if s is None:
                return None, why
        if self.single_line:
            why = self.can_end(s)
            if check and why:
                return None, why
            return s._replace(mode=DONE), ""
        if s.stack:
            return s, ""
        if check and s.dangling:
            return None, "line"
        return s._replace(ctx=C_STMT, exempt=False, dot=False, last=None, operand=False), ""

    def _open(self, s: LexState, ch: str) -> LexState:
        if ch == "(":
            role = "params" if s.ctx == C_DEFPAREN else ("call" if s.operand else "group")
        elif ch == "[":
            role = "sub" if s.operand else "list"
        else:
            role = "dict"
        ctx = C_KWARG if role == "call" else C_USE
        return s._replace(stack=s.stack + (Frame(ch, role, True),), ctx=ctx, operand=False, dangling=False, last=None, dot=False)

    def _close(self, s: LexState, ch: str, check: bool) -> tuple[LexState | None, str]:
        if not s.stack:
            return (None, "bracket") if check else (s, "")
        if check and OPENERS[CLOSERS.index(ch)] != s.stack[-1].char:
            return None, "bracket"
        return s._replace(stack=s.stack[:-1], ctx=C_USE, operand=True, dangling=False, last=None, dot=False), ""

    def _punct(self, s: LexState, ch: str) -> LexState:
        top = s.stack[-1] if s.stack else None
        if ch == ".":
            return s._replace(dot=s.operand, operand=False, last=s.last if s.operand else None)
        s = s._replace(operand=False, dot=False, last=None, dangling=ch in OPERATORS and not s.exempt)
        if ch == ",":
            if top is not None and top.role in ("call", "default"):
                role = "params" if top.role == "default" else "call"
                s = s._replace(stack=s.stack[:-1] + (top._replace(role=role),))
                return s._replace(ctx=C_KWARG if role == "call" else C_USE)
            return s if s.ctx in (C_TARGETS, C_LAMBDA, C_STMT) else s._replace(ctx=C_USE)
        if ch == ":" and s.ctx == C_LAMBDA:
            return s._replace(ctx=C_USE)
        if ch in "=:" and top is not None and top.role == "params":
            return s._replace(stack=s.stack[:-1] + (top._replace(role="default"),), ctx=C_USE)
        if ch in ":;" and not s.stack:
            return s._replace(ctx=C_STMT, exempt=False)
        if ch == "*" and (s.ctx in (C_TARGETS, C_LAMBDA) or (top is not None and top.role == "params")):
            return s
        if ch == "@" and s.ctx == C_STMT:
            return s
        return s._replace(ctx=C_USE)

"""The monitor's Python lexer, character by character: which texts stay legal, and which rule stops the rest."""

from __future__ import annotations

import builtins
import keyword
import re
import sysconfig
from pathlib import Path

import pytest

from model_runtime.constraint.lexer import LexState, PyRules

NAMES = ("print", "points", "centroid", "len", "math", "range", "self", "open", "ValueError")
RULES = PyRules(NAMES, {"math": ("pi", "sqrt"), "self": ("x", "y")}, single_line=False)


def first_refusal(text: str) -> tuple[int, str] | None:
    state = LexState()
    for i, ch in enumerate(text):
        state, why = RULES.step(state, ch)
        if state is None:
            return i, why
    return None


@pytest.mark.parametrize("text", [
    "x = centroid(points)\n",
    "y = math.sqrt(2) + math.pi\n",
    "def f(a, b=points, *args, **kw):\n    return a + b\n",
    "z = [q * 2 for q in points if q]\n",
    "print(points, sep=1, end='')\n",
    "for i in range(3): print(i)\n",
    "s = 'it''s' + \"\" + '''x\n'''\n",
    "a, b = 1, 2\nprint(a, b)\n",
    "import os\nfrom os import path as p\nprint(os, p)\n",
    "self.x = 1\n",
    "f = lambda k: k + 1\n",
    "x = 1 if points else None\n",
    "with open(points) as fh:\n    print(fh)\n",
    "try:\n    pass\nexcept ValueError as e:\n    print(e)\n",
    "total = 1e5 + 0x1f + 3.5  # any words here\n",
    "w = f'{undefined}' + rb'\\x00'\n",
    "x = (1 +  # inside brackets the line goes on\n     2)\n",
])
def test_legal_python_passes(text):
    assert first_refusal(text) is None


@pytest.mark.parametrize("text, at, rule", [
    ("x = centroi(points)", 11, "undefined"),  # a name that is no defined name
    ("x = undefined_name", 5, "undefined"),  # "u" may still open a u"..." string; no name starts with "un"
    ("foo(1)", 3, "undefined"),  # a statement-start name used as a call
    ("print(key=1, other)", 18, "undefined"),  # not a keyword argument, so a use
    ("y = math.cos", 9, "member"),
    ("self.z", 5, "member"),
    ("x = math.\n", 9, "member"),
    ("x = (1, 2]", 9, "bracket"),
    ("x = 1)", 5, "bracket"),
    ("x = points points", 11, "undefined"),  # a name right after an operand
    ("c = elif", 4, "undefined"),  # a statement keyword in an expression
    ("x = $", 4, "undefined"),
    ("x = # the operand is missing", 4, "line"),  # a comment cannot follow a dangling operator
])
def test_illegal_python_is_refused_at_the_first_bad_character(text, at, rule):
    assert first_refusal(text) == (at, rule)


def test_the_output_may_not_end_inside_its_own_brackets_or_string():
    state = LexState()
    for ch in "x = centroid(points":
        state, _ = RULES.step(state, ch)
    assert RULES.can_end(state) == "line"
    state, _ = RULES.step(state, ")")
    assert RULES.can_end(state) == ""


def test_without_defined_names_identifiers_are_free_but_members_are_not():
    rules = PyRules(None, {"math": ("pi",)}, single_line=False)
    state = LexState()
    for ch in "x = anything(at_all) + math.":
        state, why = rules.step(state, ch)
        assert state is not None, why
    assert rules.step(state, "c") == (None, "member")


def test_a_member_that_starts_like_a_string_prefix_opens_no_string():
    rules = PyRules(NAMES, {"math": ("floor", "sqrt")}, single_line=False)
    state = LexState()
    for ch in "x = math.f":
        state, why = rules.step(state, ch)
        assert state is not None, why
    assert rules.step(state, '"') == (None, "member")  # `math.f"..."` is no member access
    assert rules.step(state, "l")[0] is not None


@pytest.mark.parametrize("text, can_end", [
    ("x = ", "line"), ("x = points +", "line"), ("x = not", "line"), ("x = points", ""),
    ("from os import *", ""), ("return", ""), ("if points:", ""),
])
def test_the_output_may_not_end_on_a_dangling_operator(text, can_end):
    state = LexState()
    for ch in text:
        state, why = RULES.step(state, ch)
        assert state is not None, why
    assert RULES.can_end(state) == can_end


def test_keywords_given_as_defined_names_stay_keywords():
    rules = PyRules(NAMES + ("in", "elif"), {}, single_line=False)
    state = LexState()
    for ch in "x = ":
        state, _ = rules.step(state, ch)
    assert rules.step(state, "e") == (None, "undefined")  # no name but `elif` starts with "e"


def _python_files() -> list[Path]:
    root = Path(__file__).resolve().parents[2]
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    return sorted([*(root / "context").glob("*.py"), *(root / "model_runtime").glob("*.py"),
                   *(stdlib / "json").glob("*.py"), *(stdlib / "email").glob("*.py")])


@pytest.mark.parametrize("path", _python_files(), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_real_python_files_pass_when_their_names_are_defined(path):
    """The monitor must never refuse real code: every file passes, char by char, when its own
    identifiers (and the builtins) are the defined names."""
    text = path.read_text()
    names = (set(re.findall(r"[A-Za-z_]\w*", text)) | set(dir(builtins))) - set(keyword.kwlist)
    rules, state = PyRules(tuple(names), {}, single_line=False), LexState()
    for i, ch in enumerate(text):
        state, why = rules.step(state, ch)
        assert state is not None, f"line {text.count(chr(10), 0, i) + 1}: {why} at {ch!r}"

"""The IDE state at a cursor and the constraint built from it, on a small fixture workspace."""

from __future__ import annotations

from pathlib import Path

import pytest

from context.classify import CompletionKind
from context.constraints import build_site, constraint_spec, open_brackets
from context.document import Document
from context.index import WorkspaceIndex
from context.positions import TextIndex
from context.scopes import MODULE_DUNDERS

CURSOR = "┃"
OBJECT = set(dir(object))

SHAPES = '''\
import math

UNIT = 1.0


class Shape:
    sides = 0

    def area(self):
        return 0.0


class Circle(Shape):
    def __init__(self, radius):
        self.radius = radius
        self._cache = None

    def area(self):
        return math.pi * self.radius ** 2

    def scaled(self, k):
        return Circle(self.radius * k)


def unit_circle():
    return Circle(UNIT)
'''

MAIN = '''\
import shapes
from shapes import Circle, unit_circle
import os


def report(values, factor=2):
    c = Circle(3)
    total = 0
    for v in values:
        total += v
    {cursor}


def other():
    hidden = 1
    return hidden
'''


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    (tmp_path / "shapes.py").write_text(SHAPES)
    (tmp_path / "main.py").write_text(MAIN.format(cursor=""))
    return tmp_path


def site_at(workspace: Path, line_text: str, kind: CompletionKind = CompletionKind.SINGLE_LINE):
    marked = MAIN.format(cursor=line_text)
    offset = marked.index(CURSOR)
    text = marked.replace(CURSOR, "")
    path = workspace / "main.py"
    snapshot = Document(path.as_uri(), "python", 1, text).snapshot()
    index = WorkspaceIndex([workspace])
    index.build()
    return build_site(snapshot, TextIndex(text).position_at(offset), kind, index)


def test_members_of_module_class_instance_and_import(workspace: Path) -> None:
    site = site_at(workspace, f"x = shapes.{CURSOR}")
    assert site.qualifier == "shapes" and site.typed == ""
    assert set(site.members["shapes"]) == {"math", "UNIT", "Shape", "Circle", "unit_circle"} | set(MODULE_DUNDERS)
    circle = {"radius", "_cache", "__init__", "area", "scaled", "sides"} | OBJECT
    assert set(site.members["Circle"]) == circle  # a class imported from the workspace, with its base's members
    assert set(site.members["c"]) == circle  # an instance assigned from a class call
    assert "os" not in site.members  # the standard library is not the workspace: no member list
    assert "values" not in site.members and "total" not in site.members


def test_defined_names_are_the_scopes_at_the_cursor(workspace: Path) -> None:
    site = site_at(workspace, f"total += {CURSOR}")
    assert site.defined is not None
    local = {"values", "factor", "c", "total", "v", "report", "other", "shapes", "Circle", "unit_circle", "os"}
    assert local <= site.defined
    assert {"len", "print", "ValueError"} <= site.defined  # builtins
    assert "hidden" not in site.defined  # another function's local
    assert "radius" not in site.defined and "math" not in site.defined  # names of the other file, not imported here
    assert "for" not in site.defined  # keywords are not names


def test_partial_word_and_qualifier_feed_token_healing(workspace: Path) -> None:
    site = site_at(workspace, f"total = c.ar{CURSOR}")
    assert site.typed == "ar" and site.qualifier == "c"
    spec = constraint_spec(site)
    assert spec.single_line is True
    assert spec.heal_prefix == ""  # the server fills it after backing the prompt off
    scopes = {s.qualifier: set(s.members) for s in spec.member_scopes}
    assert "area" in scopes["c"] and "scaled" in scopes["c"]
    assert spec.defined_names is not None and "total" in spec.defined_names


def test_self_resolves_to_the_enclosing_class(tmp_path: Path) -> None:
    (tmp_path / "shapes.py").write_text(SHAPES)
    text = SHAPES.replace("        return Circle(self.radius * k)", "        return self.")
    path = tmp_path / "shapes.py"
    snapshot = Document(path.as_uri(), "python", 1, text).snapshot()
    index = WorkspaceIndex([tmp_path])
    index.build()
    lines = TextIndex(text)
    line = text.split("\n").index("        return self.")
    site = build_site(snapshot, lines.position_at(lines.line_end(line)), CompletionKind.SINGLE_LINE, index)
    assert site.qualifier == "self"
    assert set(site.members["self"]) == {"radius", "_cache", "__init__", "area", "scaled", "sides"} | OBJECT


def test_star_import_turns_the_identifier_check_off(tmp_path: Path) -> None:
    text = "from os.path import *\n\nx = \n"
    snapshot = Document((tmp_path / "m.py").as_uri(), "python", 1, text).snapshot()
    site = build_site(snapshot, TextIndex(text).position_at(text.index("x = ") + 4), CompletionKind.SINGLE_LINE)
    assert site.defined is None
    assert constraint_spec(site).defined_names is None


def test_unresolvable_base_class_gives_no_member_list(tmp_path: Path) -> None:
    text = "from somewhere_else import Base\n\n\nclass Mine(Base):\n    pass\n\n\nm = Mine()\nm.\n"
    (tmp_path / "m.py").write_text(text)
    snapshot = Document((tmp_path / "m.py").as_uri(), "python", 1, text).snapshot()
    index = WorkspaceIndex([tmp_path])
    index.build()
    site = build_site(snapshot, TextIndex(text).position_at(len(text) - 1), CompletionKind.SINGLE_LINE, index)
    assert site.qualifier == "m"
    assert "m" not in site.members and "Mine" not in site.members


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("x = f(a, [b, ", "(["),
        ("x = f(a)\ny = {", "{"),
        ("s = '(' + g(\"[\", ", "("),
        ("# (\nx = (1,\n  2", "("),
        ('d = """ ( [ """\nz = [', "["),
        ("x = (1))\ny = (", "("),
    ],
)
def test_open_brackets_skip_strings_and_comments(text: str, expected: str) -> None:
    assert open_brackets(text, "python") == expected


@pytest.mark.parametrize(
    ("language", "text", "expected"),
    [
        ("javascript", "const a = `x (${ f(1", "{("),  # a template's ${ is open until its }
        ("javascript", "const a = `x (${ f(1) } [`; g(", "("),
        ("javascript", "x = /[(]/.test(s) && h(", "("),  # a regular expression's brackets are text
        ("javascript", "x = a / b; y = (c / d", "("),  # divisions are no regular expressions
        ("javascript", "/* ( */ // [\nfoo({", "({"),
        ("typescript", "function f(a: string) {\n  const s = `(\n[`;\n  return ", "{"),
        ("go", "s := `raw ( \\` + \"q(\\\"\" + string('(')\nfunc f() {\n\treturn ", "{"),
        ("rust", "fn f<'a>(x: &'a str, y: &'a [u8]) -> u32 {\n  let c = '('; let s = r#\"(\"#;\n  ", "{"),
        ("rust", "/* /* ( */ [ */ f(", "("),  # Rust's block comments nest
        ("go", "/* /* ( */ f(", "("),  # Go's do not
        ("rust", "let s = \"multi\n(line\"; g(", "("),
    ],
)
def test_open_brackets_read_each_languages_strings_and_comments(language: str, text: str, expected: str) -> None:
    assert open_brackets(text, language) == expected


def test_multi_line_kind_is_not_single_line(workspace: Path) -> None:
    site = site_at(workspace, CURSOR, CompletionKind.MULTI_LINE)
    assert constraint_spec(site).single_line is False
    assert site.open_brackets == ""

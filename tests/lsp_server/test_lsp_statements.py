"""Where "Declare `x`" puts the declaration, per language."""

from __future__ import annotations

import pytest

from context.document import Document
from context.positions import Position
from lsp_server.statements import declaration_site


def site(language: str, text: str, name: str):
    document = Document(f"file:///w/a.{language}", language, 1, text)
    snapshot = document.snapshot()
    offset = text.index(name, text.index("USE") if "USE" in text else 0)
    return declaration_site(snapshot, snapshot.position_at(offset), name)


@pytest.mark.parametrize(
    ("language", "text", "line", "indent", "head"),
    [
        ("python", "import os\n\nprint(total)\n", 2, "", "total = "),
        ("python", "def f():\n    if True:\n        g(\n            1,\n            total,\n        )\n", 2, "        ", "total = "),
        ("python", "def f(a=total):\n    pass\n", 0, "", "total = "),
        ("javascript", "function f() {\n  return total + 1;\n}\n", 1, "  ", "const total = "),
        ("typescript", "const y: number = total * 2;\n", 0, "", "const total = "),
        ("go", "package main\n\nfunc main() {\n\tfmt.Println(total)\n}\n", 3, "\t", "total := "),
        ("go", "package main\n\nvar y = total\n", 2, "", "var total = "),
        ("rust", "fn main() {\n    println!(\"{}\", total);\n}\n", 1, "    ", "let total = "),
    ],
)
def test_declaration_goes_above_the_statement_using_the_name(language, text, line, indent, head):
    found = site(language, text, "total")
    assert (found.line, found.indent, found.head) == (line, indent, head)


def test_without_a_tree_the_line_of_the_use_is_used():
    document = Document("file:///w/notes.txt", "plaintext", 1, "a\n    b total\n")
    snapshot = document.snapshot()
    found = declaration_site(snapshot, Position(1, 6), "total")
    assert (found.line, found.indent, found.head) == (1, "    ", "total = ")

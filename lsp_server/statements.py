"""Where to declare an undeclared name: the statement that uses it, and the declaration's head.

Role: for "Declare `x`", find the statement containing the first use (the node whose parent is
a block or the file), so the declaration goes on its own line just above that statement, at its
indentation, and pick the language's declaration form (`x = `, `const x = `, `x := ` or
`var x = `, `let x = `).

Invariant: never fails: without a syntax tree the declaration goes above the line of the use.
"""

from __future__ import annotations

from dataclasses import dataclass

from context.document import DocumentSnapshot
from context.positions import Position

# Node types whose children are statements, per grammar (Python, JS/TS, Go, Rust).
_BODIES = frozenset(
    {"module", "block", "program", "statement_block", "source_file", "statement_list", "switch_body",
     "expression_case", "default_case", "switch_case", "switch_default", "class_body", "declaration_list"}
)
_TOP_LEVEL = frozenset({"module", "program", "source_file"})


@dataclass(frozen=True, slots=True)
class DeclarationSite:
    line: int  # the declaration is inserted at the start of this line
    indent: str
    head: str  # e.g. "const x = "; the model writes the rest of the line


def declaration_site(snapshot: DocumentSnapshot, use: Position, name: str) -> DeclarationSite:
    line, top_level = _statement_line(snapshot, use)
    text = snapshot.line(line)
    indent = text[: len(text) - len(text.lstrip())]
    return DeclarationSite(line, indent, _head(snapshot.language.name if snapshot.language else "", name, top_level))


def _statement_line(snapshot: DocumentSnapshot, use: Position) -> tuple[int, bool]:
    if snapshot.tree is None:
        return use.line, use.line == 0 or not snapshot.line(use.line)[:1].isspace()
    point = snapshot.lines.point_at(snapshot.offset_at(use))
    node = snapshot.tree.root_node.named_descendant_for_point_range(point, point)
    while node is not None and node.parent is not None and node.parent.type not in _BODIES:
        node = node.parent
    if node is None or node.parent is None:
        return use.line, True
    return node.start_point[0], node.parent.type in _TOP_LEVEL


def _head(language: str, name: str, top_level: bool) -> str:
    if language in ("javascript", "typescript", "tsx"):
        return f"const {name} = "
    if language == "go":
        return f"var {name} = " if top_level else f"{name} := "
    if language == "rust":
        return f"let {name} = "
    return f"{name} = "

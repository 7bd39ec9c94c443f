"""Should we complete here, and how much: nothing, the rest of the line, or a block?

Role: the gate before a completion request (llm-ls `should_complete` style), from the text around
the cursor and the syntax node under it:
- EMPTY: the cursor touches an identifier on its right (completing would split a word), or sits
  right after a word with more code following on the line.
- SINGLE_LINE: inside a comment or a string, or in the middle/end of a line of code.
- MULTI_LINE: on an empty (whitespace-only) line, or at the end of a line that opens a block or a
  bracket (`:` in Python, `{`, `(`, `[`, `=>`).

Invariants: pure and total; a document without a tree is classified from its text alone.
"""

from __future__ import annotations

from enum import Enum

import tree_sitter as ts

from context.document import DocumentSnapshot
from context.positions import Position


class CompletionKind(str, Enum):
    EMPTY = "empty"
    SINGLE_LINE = "single_line"
    MULTI_LINE = "multi_line"


TRAILING_OK = frozenset(")]}>\"'`;,:. \t")
OPENERS = ("{", "(", "[", "=>")
PYTHON_OPENERS = (":", "(", "[", "{", "\\")
COMMENT_TYPES = frozenset({"comment", "line_comment", "block_comment"})
STRING_TYPES = frozenset(
    {
        "string", "string_content", "string_fragment", "template_string", "interpreted_string_literal",
        "raw_string_literal", "string_literal", "char_literal", "rune_literal", "concatenated_string",
    }
)


def classify(snapshot: DocumentSnapshot, position: Position) -> CompletionKind:
    lines = snapshot.lines
    offset = lines.offset_at(position)
    line_number = lines.position_at(offset).line
    line = lines.line(line_number)
    column = offset - lines.line_start(line_number)
    before, after = line[:column], line[column:]
    if after[:1] and _is_word(after[0]):
        return CompletionKind.EMPTY
    if before[-1:] and _is_word(before[-1]) and not set(after) <= TRAILING_OK:
        return CompletionKind.EMPTY
    if snapshot.tree is not None and _in_comment_or_string(snapshot.tree, lines.byte_at(offset)):
        return CompletionKind.SINGLE_LINE
    if not before.strip() and not after.strip():
        return CompletionKind.MULTI_LINE
    openers = PYTHON_OPENERS if snapshot.language and snapshot.language.name == "python" else OPENERS
    if not after.strip() and before.rstrip().endswith(openers):
        return CompletionKind.MULTI_LINE
    return CompletionKind.SINGLE_LINE


def _is_word(char: str) -> bool:
    return char.isalnum() or char in "_$"


def _in_comment_or_string(tree: ts.Tree, byte: int) -> bool:
    """Whether the cursor at `byte` is inside a comment (up to its end) or a string (before its
    closing quote)."""
    if byte == 0:
        return False
    node: ts.Node | None = tree.root_node.descendant_for_byte_range(byte - 1, byte)
    while node is not None:
        if node.type in COMMENT_TYPES and node.start_byte < byte <= node.end_byte:
            return True
        if node.type in STRING_TYPES and node.start_byte < byte < node.end_byte:
            return True
        node = node.parent
    return False

"""Helpers for the context tests: snapshots from text with a cursor marker, tiny tokenizers."""

from __future__ import annotations

from context.document import Document, DocumentSnapshot
from context.positions import Position, TextIndex

CURSOR = "┃"

LANGUAGE_IDS = {
    "python": ("python", "py"),
    "javascript": ("javascript", "js"),
    "typescript": ("typescript", "ts"),
    "tsx": ("typescriptreact", "tsx"),
    "go": ("go", "go"),
    "rust": ("rust", "rs"),
}


def snapshot(text: str, language: str = "python", path: str = "/work/demo/main") -> DocumentSnapshot:
    """A snapshot of `text` (without any cursor marker) as an open document."""
    language_id, extension = LANGUAGE_IDS[language]
    return Document(f"file://{path}.{extension}", language_id, 1, text).snapshot()


def with_cursor(marked: str, language: str = "python", path: str = "/work/demo/main") -> tuple[DocumentSnapshot, Position]:
    """Snapshot and cursor position of `marked`, where `CURSOR` marks the cursor."""
    offset = marked.index(CURSOR)
    text = marked.replace(CURSOR, "", 1)
    return snapshot(text, language, path), TextIndex(text).position_at(offset)

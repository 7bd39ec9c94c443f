"""Open documents: a mutable `Document` kept in sync with the editor, and frozen snapshots of it.

Role: apply LSP-style changes (full or ranged, positions in UTF-16 code units) and keep a
tree-sitter tree in step by editing the old tree and re-parsing incrementally, as editors do.
Requests work on a `DocumentSnapshot`, which never changes after it is taken.

Invariants:
- `apply_change` never raises on a bad range: positions clamp (see `context.positions`), and a
  reversed range is put in order. The text always equals what the edits describe.
- The tree handed to a snapshot is never edited afterwards: the document edits a copy.
- Byte offsets given to tree-sitter come from the same UTF-8 encoding as the parsed bytes, so
  non-ASCII text (CJK, emoji, lone surrogates) keeps the tree aligned with the text.
- Files over `MAX_PARSE_CHARS` are kept as text without a tree.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from urllib.parse import urlparse
from urllib.request import url2pathname

import tree_sitter as ts

from context.languages import Language, language_for
from context.positions import Position, Range, TextIndex, encode_text, offset_at, position_at

__all__ = [
    "Document",
    "DocumentSnapshot",
    "Position",
    "Range",
    "TextChange",
    "offset_at",
    "path_from_uri",
    "position_at",
]

MAX_PARSE_CHARS = 4_000_000


@dataclass(frozen=True, slots=True)
class TextChange:
    """What one change did, in whole lines: old lines [start_line, old_end_line] became new lines
    [start_line, new_end_line]. `before` and `after` are those lines' text (terminators included
    between lines, not after the last). Feeds `context.edits.RecentEdits`."""

    start_line: int
    old_end_line: int
    new_end_line: int
    before: str
    after: str


@dataclass(frozen=True, slots=True)
class DocumentSnapshot:
    """An immutable view of a document at one version. `tree` is None for unsupported languages."""

    uri: str
    path: str | None
    language_id: str
    language: Language | None
    version: int
    text: str
    tree: ts.Tree | None
    lines: TextIndex

    def offset_at(self, position: Position) -> int:
        return self.lines.offset_at(position)

    def position_at(self, offset: int) -> Position:
        return self.lines.position_at(offset)

    def line(self, line: int) -> str:
        return self.lines.line(line)


class Document:
    """A document open in the editor. Owned by one thread (the server's); snapshots are shareable."""

    def __init__(self, uri: str, language_id: str, version: int, text: str) -> None:
        self.uri = uri
        self.path = path_from_uri(uri)
        self.language_id = language_id
        self.language = language_for(language_id, self.path)
        self.version = version
        self._lines = TextIndex(text)
        self._tree = self._parse(self._lines, None)

    @property
    def text(self) -> str:
        return self._lines.text

    @property
    def tree(self) -> ts.Tree | None:
        return self._tree

    def apply_change(self, range: Range | None, text: str, version: int) -> TextChange:
        """Apply one content change (`range` None replaces the whole text) and re-parse."""
        old = self._lines
        if range is None:
            start, end = 0, len(old.text)
        else:
            start, end = sorted((old.offset_at(range.start), old.offset_at(range.end)))
        new = TextIndex(old.text[:start] + text + old.text[end:])
        change = _text_change(old, new, start, end, len(text))
        edited = self._edited_tree(old, start, end, text) if range is not None else None
        self._lines = new
        self._tree = self._parse(new, edited)
        self.version = version
        return change

    def snapshot(self) -> DocumentSnapshot:
        return DocumentSnapshot(
            uri=self.uri,
            path=self.path,
            language_id=self.language_id,
            language=self.language,
            version=self.version,
            text=self._lines.text,
            tree=self._tree,
            lines=self._lines,
        )

    def _edited_tree(self, old: TextIndex, start: int, end: int, inserted: str) -> ts.Tree | None:
        if self._tree is None:
            return None
        start_byte, start_point = old.byte_at(start), old.point_at(start)
        inserted_bytes = encode_text(inserted)
        rows = inserted.count("\n")
        tail = inserted_bytes[inserted_bytes.rfind(b"\n") + 1 :]
        end_column = len(tail) if rows else start_point[1] + len(tail)
        tree = self._tree.copy()
        tree.edit(
            start_byte=start_byte,
            old_end_byte=old.byte_at(end),
            new_end_byte=start_byte + len(inserted_bytes),
            start_point=start_point,
            old_end_point=old.point_at(end),
            new_end_point=(start_point[0] + rows, end_column),
        )
        return tree

    def _parse(self, lines: TextIndex, edited: ts.Tree | None) -> ts.Tree | None:
        if self.language is None or len(lines.text) > MAX_PARSE_CHARS:
            return None
        return self.language.parse(lines.data, edited)


def path_from_uri(uri: str) -> str | None:
    """The local file path of a `file:` URI (None for other schemes such as `untitled:`)."""
    parsed = urlparse(uri)
    if parsed.scheme == "file":
        path = url2pathname(parsed.path)
        if parsed.netloc and parsed.netloc != "localhost":
            path = f"//{parsed.netloc}{path}"
        return os.path.normpath(path)
    if not parsed.scheme and uri.startswith("/"):
        return os.path.normpath(uri)
    return None


def _text_change(old: TextIndex, new: TextIndex, start: int, end: int, inserted: int) -> TextChange:
    first = old.position_at(start).line
    old_last = old.position_at(end).line
    new_last = new.position_at(start + inserted).line
    return TextChange(
        start_line=first,
        old_end_line=old_last,
        new_end_line=new_last,
        before=old.text[old.line_start(first) : old.line_end(old_last)],
        after=new.text[new.line_start(first) : new.line_end(new_last)],
    )

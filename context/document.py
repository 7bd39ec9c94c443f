"""Open documents: a mutable `Document` kept in sync with the editor, and frozen snapshots of it.

Role: apply LSP-style changes (full or ranged, positions in UTF-16 code units) and keep a
tree-sitter tree in step by editing the old tree and re-parsing incrementally, as editors do.
Requests work on a `DocumentSnapshot`, which never changes after it is taken.

Invariants:
- `apply_change` never raises on a bad range: positions clamp (see `context.positions`), and a
  reversed range is put in order. The text always equals what the edits describe.
- The tree handed to a snapshot is never edited afterwards: the document edits a copy.
- Edits apply to the text at once; the tree of a document over `SYNC_PARSE_CHARS` is parsed on
  the first use of that version's tree (once, on whichever thread asks, incrementally from the
  previous version's tree when that one was parsed), so a 1 MB edit never parses on the thread
  that applies edits (the server's event loop) and a version nobody reads is never parsed.
  A large parse hands the interpreter lock over between chunks (`context.languages`), so a
  parse on a worker thread pauses the loop for a chunk's parse at a time.
- Byte offsets given to tree-sitter come from the same UTF-8 encoding as the parsed bytes, so
  non-ASCII text (CJK, emoji, lone surrogates) keeps the tree aligned with the text.
- Files over `MAX_PARSE_CHARS` are kept as text without a tree.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, replace
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
    "SyntaxTree",
    "TextChange",
    "offset_at",
    "path_from_uri",
    "position_at",
]

MAX_PARSE_CHARS = 4_000_000
SYNC_PARSE_CHARS = 100_000  # a larger document parses on the first use of its tree, not on each edit


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


class SyntaxTree:
    """The tree of one version of a document: made already, or made by the first `get()` (once,
    under a lock, on whichever thread asks): parsed with that thread's parser (from the previous
    version's tree, edited, when there is one), or copied from another `SyntaxTree`."""

    __slots__ = ("_make", "_tree", "_lock")

    def __init__(self, make: Callable[[], ts.Tree | None] | None, tree: ts.Tree | None = None) -> None:
        self._make = make
        self._tree = tree
        self._lock = threading.Lock()

    @classmethod
    def ready(cls, tree: ts.Tree | None) -> SyntaxTree:
        return cls(None, tree)

    @classmethod
    def parse(cls, language: Language, lines: TextIndex, base: ts.Tree | None) -> SyntaxTree:
        return cls(lambda: language.parse(lines.data, base))

    @classmethod
    def copy_of(cls, source: SyntaxTree) -> SyntaxTree:
        return cls(lambda: tree.copy() if (tree := source.get()) is not None else None)

    @property
    def made(self) -> bool:
        return self._make is None

    def get(self) -> ts.Tree | None:
        if self._make is not None:
            with self._lock:
                if self._make is not None:
                    self._tree, self._make = self._make(), None
        return self._tree


@dataclass(frozen=True, slots=True)
class DocumentSnapshot:
    """An immutable view of a document at one version. `tree` is None for unsupported languages
    and files over `MAX_PARSE_CHARS`; reading it may parse (see `SyntaxTree`)."""

    uri: str
    path: str | None
    language_id: str
    language: Language | None
    version: int
    text: str
    syntax: SyntaxTree
    lines: TextIndex

    @property
    def tree(self) -> ts.Tree | None:
        return self.syntax.get()

    def with_own_tree(self) -> DocumentSnapshot:
        """This snapshot with its own copy of the tree, for one worker thread (tree-sitter trees
        are not thread-safe), taken on the first read of its tree (which parses the version if
        nothing did yet): a reader that never needs the tree never parses."""
        return replace(self, syntax=SyntaxTree.copy_of(self.syntax))

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
        self._syntax = self._parse(self._lines, None)

    @property
    def text(self) -> str:
        return self._lines.text

    @property
    def tree(self) -> ts.Tree | None:
        return self._syntax.get()

    def apply_change(self, range: Range | None, text: str, version: int) -> TextChange:
        """Apply one content change (`range` None replaces the whole text) and re-parse."""
        old = self._lines
        if range is None:
            start, end = 0, len(old.text)
        else:
            start, end = sorted((old.offset_at(range.start), old.offset_at(range.end)))
        new = TextIndex(old.text[:start] + text + old.text[end:])
        change = _text_change(old, new, start, end, len(text))
        edited = self._edited_tree(old, start, end, text) if range is not None and self._syntax.made else None
        self._lines = new
        self._syntax = self._parse(new, edited)
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
            syntax=self._syntax,
            lines=self._lines,
        )

    def _edited_tree(self, old: TextIndex, start: int, end: int, inserted: str) -> ts.Tree | None:
        """A copy of the (parsed) current tree with the edit applied, for an incremental parse."""
        if (current := self._syntax.get()) is None:
            return None
        start_byte, start_point = old.byte_at(start), old.point_at(start)
        inserted_bytes = encode_text(inserted)
        rows = inserted.count("\n")
        tail = inserted_bytes[inserted_bytes.rfind(b"\n") + 1 :]
        end_column = len(tail) if rows else start_point[1] + len(tail)
        tree = current.copy()
        tree.edit(
            start_byte=start_byte,
            old_end_byte=old.byte_at(end),
            new_end_byte=start_byte + len(inserted_bytes),
            start_point=start_point,
            old_end_point=old.point_at(end),
            new_end_point=(start_point[0] + rows, end_column),
        )
        return tree

    def _parse(self, lines: TextIndex, edited: ts.Tree | None) -> SyntaxTree:
        """The new version's tree: parsed now up to `SYNC_PARSE_CHARS`, else on first use."""
        if self.language is None or len(lines.text) > MAX_PARSE_CHARS:
            return SyntaxTree.ready(None)
        syntax = SyntaxTree.parse(self.language, lines, edited)
        if len(lines.text) <= SYNC_PARSE_CHARS:
            syntax.get()
        return syntax


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

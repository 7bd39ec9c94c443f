"""`WorkspaceState`: what the editor told the server, in one leaf module.

Role: holds the open documents (by version), the workspace roots, the workspace index with its
watcher and readiness, the cursor per document, the recent edits and the negotiated position
encoding. Every change to them goes through a method here; features read the state and pass
its narrow parts (a snapshot, the index, the recent edits) to the services they call.

Invariants:
- Edits apply synchronously, in message order; readers get immutable `DocumentSnapshot`s.
- Open documents overlay the disk in the index (`WorkspaceIndex.open_buffer`): a watcher event
  or a rebuild never replaces the editor's unsaved text, and closing a document goes back to
  the file on disk. A newly built index gets the open buffers before it is swapped in.
- The latest index build wins: a build started for an older set of roots is dropped.
- `index_ready` is set once the first build ended, whether it succeeded or not.
- No LSP types and no server object: this module imports only `context` and `encoding`.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable
from pathlib import Path

from context.cursor import CursorTracker
from context.document import Document, DocumentSnapshot
from context.edits import RecentEdits
from context.index import WorkspaceIndex
from context.positions import Range, TextIndex
from context.watcher import IndexWatcher

from .encoding import PositionEncoding
from .errors import DocumentNotOpen

log = logging.getLogger(__name__)

RangeOf = Callable[[TextIndex], Range]  # a change's range, from the text it applies to


class WorkspaceState:
    def __init__(self) -> None:
        self.documents: dict[str, Document] = {}
        self.cursors = CursorTracker()
        self.recent_edits = RecentEdits()
        self.roots: list[Path] = []
        self.index: WorkspaceIndex | None = None
        self.index_ready = asyncio.Event()
        self.index_generation = 0
        self.watcher: IndexWatcher | None = None
        self.encoding = PositionEncoding()

    # ---- documents --------------------------------------------------------------------------
    def snapshot(self, uri: str) -> DocumentSnapshot:
        document = self.documents.get(uri)
        if document is None:
            raise DocumentNotOpen(uri)
        return document.snapshot()

    def document_version(self, uri: str) -> int | None:
        document = self.documents.get(uri)
        return document.version if document is not None else None

    def open_snapshots(self, exclude: str | None = None) -> list[DocumentSnapshot]:
        return [d.snapshot() for uri, d in self.documents.items() if uri != exclude]

    def lines(self, uri: str) -> TextIndex | None:
        """The current text of an open document (for position conversion), None if not open."""
        document = self.documents.get(uri)
        return document.snapshot().lines if document is not None else None

    def file_lines(self, path: str) -> TextIndex | None:
        """The text of `path` as the client sees it: its open document, else the file on disk
        (None when unreadable). For converting positions in other files (locations, snippets)."""
        normal = os.path.normpath(path)
        for document in self.documents.values():
            if document.path == normal:
                return document.snapshot().lines
        try:
            with open(normal, encoding="utf-8", errors="surrogateescape") as file:
                return TextIndex(file.read())
        except OSError:
            return None

    def open(self, uri: str, language_id: str, version: int, text: str) -> Document:
        document = self.documents[uri] = Document(uri, language_id, version, text)
        if self.index is not None and document.path is not None:
            self.index.open_buffer(document.path)  # indexed from the buffer by the analysis
        return document

    def change(self, uri: str, version: int, changes: list[tuple[RangeOf | None, str]]) -> bool:
        """Apply one didChange's changes in order, each range computed from the text just before
        that change (client units convert against it); False (nothing applied) for a document
        that is not open or a version that is not newer."""
        document = self.documents.get(uri)
        if document is None:
            log.warning("didChange for %s, which is not open: ignored", uri)
            return False
        if version <= document.version:
            log.warning("didChange for %s: version %d is not newer than %d: ignored", uri, version, document.version)
            return False
        for range_of, text in changes:
            change_range = range_of(document.snapshot().lines) if range_of is not None else None
            self.recent_edits.record(document.path or uri, document.apply_change(change_range, text, version))
        document.version = version  # also when `changes` is empty: the client's copy is at `version` now
        return True

    def close(self, uri: str) -> bool:
        document = self.documents.pop(uri, None)
        if document is None:
            log.warning("didClose for %s, which is not open: ignored", uri)
            return False
        self.cursors.forget(uri)
        if self.index is not None and document.path is not None:
            self.index.close_buffer(document.path)
        return True

    # ---- roots and index ----------------------------------------------------------------------
    def set_roots(self, roots: list[Path]) -> bool:
        """Replace the roots; False when they did not change."""
        if roots == self.roots:
            return False
        self.roots = list(roots)
        return True

    def begin_index_build(self) -> int:
        self.index_generation += 1
        return self.index_generation

    def install_index(self, generation: int, index: WorkspaceIndex) -> bool:
        """Swap in a built index unless a newer build started; open buffers overlay it."""
        if generation != self.index_generation:
            return False
        for document in self.documents.values():
            if document.path is not None:
                index.open_buffer(document.path)
        self.stop_watcher()
        self.index = index
        return True

    def stop_watcher(self) -> None:
        watcher, self.watcher = self.watcher, None
        if watcher is not None:
            watcher.stop()

"""Debounced per-document analysis: undeclared-symbol diagnostics and the index refresh.

Role: after the last edit of a document settles (`diagnosticsDebounceMs`), re-tag it into the
workspace index (so definitions/references and cross-file context see unsaved text) and
publish its undeclared symbols as diagnostics (source "glm5", code "undeclared-symbol",
`data = {"name", "kind"}`), each of which gets a "Declare `x`" code action.

Invariants: diagnostics are published for the version they were computed on, and only if the
document is still at that version (a newer edit reschedules). A failure in the analysis of
one document is logged and never reaches the other documents or the server.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import TYPE_CHECKING

from context.document import path_from_uri
from context.symbols import undeclared_symbols
from lsprotocol import types

from .convert import lsp_range

if TYPE_CHECKING:
    from .server import Glm5Server

log = logging.getLogger(__name__)

SOURCE = "glm5"
UNDECLARED = "undeclared-symbol"


class Analysis:
    def __init__(self, ls: Glm5Server) -> None:
        self._ls = ls
        self._timers: dict[str, asyncio.TimerHandle] = {}

    def schedule(self, uri: str) -> None:
        if (timer := self._timers.pop(uri, None)) is not None:
            timer.cancel()
        delay = self._ls.settings.diagnostics_debounce_ms / 1000
        self._timers[uri] = asyncio.get_running_loop().call_later(delay, self._run, uri)

    def closed(self, uri: str) -> None:
        """Forget a closed document: clear its diagnostics, re-read the file from disk."""
        if (timer := self._timers.pop(uri, None)) is not None:
            timer.cancel()
        self._ls.text_document_publish_diagnostics(types.PublishDiagnosticsParams(uri=uri, diagnostics=[]))
        index, path = self._ls.index, path_from_uri(uri)
        if index is not None and path is not None:
            index.update_file(Path(path))

    def refresh_all(self) -> None:
        for uri in list(self._ls.documents):
            self.schedule(uri)

    def _run(self, uri: str) -> None:
        self._timers.pop(uri, None)
        document = self._ls.documents.get(uri)
        if document is None:
            return
        try:
            self._analyse(uri)
        except Exception:
            log.exception("analysis of %s failed", uri)

    def _analyse(self, uri: str) -> None:
        snapshot = self._ls.snapshot(uri)
        index = self._ls.index
        if index is not None and snapshot.path is not None:
            index.update_file(Path(snapshot.path), snapshot.text)
        diagnostics = [] if not self._ls.settings.diagnostics else [
            types.Diagnostic(
                range=lsp_range(symbol.range),
                message=f"`{symbol.name}` is not declared",
                severity=types.DiagnosticSeverity.Warning,
                source=SOURCE,
                code=UNDECLARED,
                data={"name": symbol.name, "kind": symbol.kind},
            )
            for symbol in undeclared_symbols(snapshot, index)
        ]
        self._ls.text_document_publish_diagnostics(
            types.PublishDiagnosticsParams(uri=uri, diagnostics=diagnostics, version=snapshot.version)
        )

"""Document sync (didOpen / didChange / didClose) and the `glm5/didChangeCursor` notification.

Role: keep one `context.document.Document` per open uri, apply incremental changes in message
order (each re-parses incrementally), abort completions that a change made stale, record the
edit for cross-file context, and schedule the debounced analysis (diagnostics, index refresh).

Invariants: a notification for a document that was never opened, or a change with an older
version, is logged and ignored: the server keeps serving. Changes apply synchronously, so a
request handled after a didChange always sees the new version.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from context.document import Document
from lsprotocol import types

from .. import convert
from ..errors import InvalidParams

if TYPE_CHECKING:
    from ..server import Glm5Server

log = logging.getLogger(__name__)

DID_CHANGE_CURSOR = "glm5/didChangeCursor"


def register(ls: Glm5Server) -> None:
    @ls.feature(types.TEXT_DOCUMENT_DID_OPEN)
    def did_open(ls: Glm5Server, params: types.DidOpenTextDocumentParams) -> None:
        doc = params.text_document
        ls.documents[doc.uri] = Document(doc.uri, doc.language_id, doc.version, doc.text)
        ls.jobs.document_changed(doc.uri, doc.version)
        ls.analysis.schedule(doc.uri)

    @ls.feature(types.TEXT_DOCUMENT_DID_CHANGE)
    def did_change(ls: Glm5Server, params: types.DidChangeTextDocumentParams) -> None:
        uri, version = params.text_document.uri, params.text_document.version
        document = ls.documents.get(uri)
        if document is None:
            log.warning("didChange for %s, which is not open: ignored", uri)
            return
        if version <= document.version:
            log.warning("didChange for %s: version %d is not newer than %d: ignored", uri, version, document.version)
            return
        for change in params.content_changes:
            change_range = convert.range_(change.range) if isinstance(change, types.TextDocumentContentChangePartial) else None
            edit = document.apply_change(change_range, change.text, version)
            ls.recent_edits.record(document.path or uri, edit)
        ls.jobs.document_changed(uri, version)
        ls.completions.document_changed(uri)
        ls.analysis.schedule(uri)

    @ls.feature(types.TEXT_DOCUMENT_DID_CLOSE)
    def did_close(ls: Glm5Server, params: types.DidCloseTextDocumentParams) -> None:
        uri = params.text_document.uri
        if ls.documents.pop(uri, None) is None:
            log.warning("didClose for %s, which is not open: ignored", uri)
            return
        ls.jobs.document_changed(uri, None)
        ls.completions.document_changed(uri)
        ls.cache.clear(uri)
        ls.cursors.forget(uri)
        ls.analysis.closed(uri)

    @ls.feature(DID_CHANGE_CURSOR)
    def did_change_cursor(ls: Glm5Server, params: Any) -> None:
        raw = convert.plain(params)
        try:
            uri = convert.parse_uri(raw, DID_CHANGE_CURSOR)
            position = convert.parse_position(raw.get("position"), f"{DID_CHANGE_CURSOR} position")
        except InvalidParams as exc:
            log.warning("%s: ignored", exc)
            return
        if uri in ls.documents:
            ls.cursors.update(uri, position, ls.documents[uri].version)


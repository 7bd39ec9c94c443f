"""Document sync (didOpen / didChange / didClose) and the `glm5/didChangeCursor` notification.

Role: keep one `context.document.Document` per open uri (in `WorkspaceState`), apply
incremental changes in message order (each re-parses incrementally, or, over
`SYNC_PARSE_CHARS`, leaves the parse to the first use of the new version's tree, off the loop;
ranges convert from the negotiated position encoding against the text each change applies to),
abort completions that a change made stale, record the edit for cross-file context, and
schedule the debounced analysis (diagnostics, index refresh).

Invariants: a notification for a document that was never opened, or a change with an older
version, is logged and ignored: the server keeps serving. Changes apply synchronously, so a
request handled after a didChange always sees the new version.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from lsprotocol import types

from .. import convert
from ..errors import InvalidParams
from ..state import RangeOf

if TYPE_CHECKING:
    from ..server import Glm5Server

log = logging.getLogger(__name__)

DID_CHANGE_CURSOR = "glm5/didChangeCursor"


def register(ls: Glm5Server) -> None:
    @ls.feature(types.TEXT_DOCUMENT_DID_OPEN)
    def did_open(ls: Glm5Server, params: types.DidOpenTextDocumentParams) -> None:
        doc = params.text_document
        ls.state.open(doc.uri, doc.language_id, doc.version, doc.text)
        ls.jobs.document_changed(doc.uri, doc.version)
        ls.analysis.schedule(doc.uri)

    @ls.feature(types.TEXT_DOCUMENT_DID_CHANGE)
    def did_change(ls: Glm5Server, params: types.DidChangeTextDocumentParams) -> None:
        uri, version = params.text_document.uri, params.text_document.version
        changes = [(_range_of(ls, change), change.text) for change in params.content_changes]
        if not ls.state.change(uri, version, changes):
            return
        ls.jobs.document_changed(uri, version)
        ls.completions.document_changed(uri)
        ls.analysis.schedule(uri)

    @ls.feature(types.TEXT_DOCUMENT_DID_CLOSE)
    def did_close(ls: Glm5Server, params: types.DidCloseTextDocumentParams) -> None:
        uri = params.text_document.uri
        if not ls.state.close(uri):
            return
        ls.jobs.document_changed(uri, None)
        ls.completions.document_changed(uri)
        ls.cache.clear(uri)
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
        if (lines := ls.state.lines(uri)) is not None:
            utf16 = ls.state.encoding.position_in(lines, types.Position(line=position.line, character=position.character))
            ls.cursors.update(uri, utf16, ls.document_version(uri))


def _range_of(ls: Glm5Server, change: object) -> RangeOf | None:
    """The change's range in UTF-16, from the text it applies to (None: the whole document)."""
    if not isinstance(change, types.TextDocumentContentChangePartial):
        return None
    client_range, encoding = change.range, ls.state.encoding
    return lambda lines: encoding.range_in(lines, client_range)


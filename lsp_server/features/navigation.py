"""`textDocument/definition` and `textDocument/references` from the workspace index.

The index covers every file of every workspace root (kept fresh by the watcher) and the
unsaved text of open documents (refreshed by the debounced analysis). Requests that arrive
while the index is still being built wait for it.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from context.document import path_from_uri
from context.index import WorkspaceIndex
from context.positions import Position, Range
from lsprotocol import types
from pygls.uris import from_fs_path

from .. import convert

if TYPE_CHECKING:
    from ..server import Glm5Server


def register(ls: Glm5Server) -> None:
    @ls.feature(types.TEXT_DOCUMENT_DEFINITION)
    async def definition(ls: Glm5Server, params: types.DefinitionParams) -> list[types.Location]:
        index, path, position, text = await _lookup(ls, params.text_document.uri, params.position)
        if index is None or path is None:
            return []
        return [_location(d.path, d.range) for d in index.definition_at(path, position, text)]

    @ls.feature(types.TEXT_DOCUMENT_REFERENCES)
    async def references(ls: Glm5Server, params: types.ReferenceParams) -> list[types.Location]:
        index, path, position, text = await _lookup(ls, params.text_document.uri, params.position)
        if index is None or path is None:
            return []
        found = [_location(r.path, r.range) for r in index.references_at(path, position, text)]
        if params.context.include_declaration:
            found = [_location(d.path, d.range) for d in index.definition_at(path, position, text)] + found
        return found


async def _lookup(
    ls: Glm5Server, uri: str, position: types.Position
) -> tuple[WorkspaceIndex | None, Path | None, Position, str | None]:
    """The index, the file's path (None for non-file uris), the position, and the editor's
    text when the document is open (the index may not have seen its latest edits yet)."""
    path = path_from_uri(uri)
    await ls.index_ready.wait()
    document = ls.documents.get(uri)
    return ls.index, Path(path) if path else None, convert.position(position), document.text if document else None


def _location(path: str | Path, r: Range) -> types.Location:
    return types.Location(uri=from_fs_path(str(path)) or str(path), range=convert.lsp_range(r))

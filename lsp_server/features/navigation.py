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
        return _locations(ls, [(d.path, d.range) for d in index.definition_at(path, position, text)])

    @ls.feature(types.TEXT_DOCUMENT_REFERENCES)
    async def references(ls: Glm5Server, params: types.ReferenceParams) -> list[types.Location]:
        index, path, position, text = await _lookup(ls, params.text_document.uri, params.position)
        if index is None or path is None:
            return []
        found = [(r.path, r.range) for r in index.references_at(path, position, text)]
        if params.context.include_declaration:
            found = [(d.path, d.range) for d in index.definition_at(path, position, text)] + found
        return _locations(ls, found)


async def _lookup(
    ls: Glm5Server, uri: str, position: types.Position
) -> tuple[WorkspaceIndex | None, Path | None, Position, str | None]:
    """The index, the file's path (None for non-file uris), the position, and the editor's
    text when the document is open (the index may not have seen its latest edits yet)."""
    path = path_from_uri(uri)
    await ls.index_ready.wait()
    editor, encoding = ls.state.lines(uri), ls.state.encoding
    if editor is not None:
        utf16 = convert.position_in(editor, encoding, position, "position", clamp=True)
    else:
        utf16 = encoding.position_in(ls.state.file_lines(path) if path and not encoding.identity else None, position)
    return ls.index, Path(path) if path else None, utf16, editor.text if editor is not None else None


def _locations(ls: Glm5Server, found: list[tuple[str, Range]]) -> list[types.Location]:
    """LSP locations in the client's position encoding (converted against each file's text:
    the open document's, else the file on disk)."""
    encoding, texts = ls.state.encoding, {}
    locations = []
    for path, r in found:
        uri = from_fs_path(str(path)) or str(path)
        if not encoding.identity and uri not in texts:
            texts[uri] = ls.state.file_lines(str(path))
        locations.append(types.Location(uri=uri, range=encoding.range_out(texts.get(uri), r)))
    return locations

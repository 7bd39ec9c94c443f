"""`textDocument/completion`: the model's completion as a completion item.

For clients without inline completion (e.g. Emacs eglot, Helix). The item replaces the word
prefix before the cursor with that prefix plus the completion, so the client's fuzzy filter
(which matches the typed word against `filterText`) keeps it. The list is `isIncomplete`: the
client asks again as the user types (and type-through hits the cache).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from context.positions import Position, Range, utf16_length
from lsprotocol import types

from .. import convert
from .inline_completion import request_id, accept_command

if TYPE_CHECKING:
    from ..server import Glm5Server

_WORD_TAIL = re.compile(r"[\w$]*$")
LABEL_CHARS = 80


def register(ls: Glm5Server) -> None:
    @ls.feature(types.TEXT_DOCUMENT_COMPLETION, types.CompletionOptions(resolve_provider=False))
    async def completion(ls: Glm5Server, params: types.CompletionParams) -> types.CompletionList:
        invoked = params.context is not None and params.context.trigger_kind == types.CompletionTriggerKind.Invoked
        uri, encoding = params.text_document.uri, ls.state.encoding
        position = convert.position_in(ls.snapshot(uri).lines, encoding, params.position, "position", clamp=True)
        answer = await ls.completions.complete(
            uri, position, request_id(ls), "items", automatic=not invoked
        )
        if not answer.text:
            return types.CompletionList(is_incomplete=True, items=[])
        snapshot = ls.snapshot(uri)
        offset = snapshot.offset_at(answer.position)
        before = snapshot.text[snapshot.lines.line_start(answer.position.line) : offset]
        word = _WORD_TAIL.search(before).group()  # type: ignore[union-attr]
        start = Position(answer.position.line, answer.position.character - utf16_length(word))
        new_text = word + answer.text
        first_line = new_text.split("\n", 1)[0].strip() or new_text.strip()
        item = types.CompletionItem(
            label=first_line[:LABEL_CHARS],
            kind=types.CompletionItemKind.Snippet,
            detail="glm5",
            documentation=types.MarkupContent(kind=types.MarkupKind.Markdown, value=f"```\n{new_text}\n```"),
            filter_text=new_text,
            sort_text="0",
            preselect=True,
            insert_text_format=types.InsertTextFormat.PlainText,
            text_edit=types.TextEdit(range=encoding.range_out(snapshot.lines, Range(start, answer.position)), new_text=new_text),
            command=accept_command(answer),
        )
        return types.CompletionList(is_incomplete=True, items=[item])

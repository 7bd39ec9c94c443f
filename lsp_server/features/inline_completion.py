"""`textDocument/inlineCompletion`: ghost text from the model.

Registered with `InlineCompletionOptions()` so the capability is advertised (pygls does not
advertise it from the handler alone). The item's `command` reports acceptance back to the
server (`glm5.didAcceptCompletion`) with the completion id used by the telemetry
notifications; clients that report through `glm5/didAcceptCompletion` get the same count once.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from lsprotocol import types

from .. import convert
from ..completions import Answer

if TYPE_CHECKING:
    from ..server import Glm5Server

ACCEPT_COMMAND = "glm5.didAcceptCompletion"


def accept_command(answer: Answer) -> types.Command:
    return types.Command(title="glm5: completion accepted", command=ACCEPT_COMMAND, arguments=[{"completionId": answer.completion_id}])


def request_id(ls: Glm5Server) -> int | str:
    """The id of the request being handled (echoed in `glm5/inlineCompletionProgress`)."""
    msg_id = ls.protocol.msg_id
    return "" if msg_id is None else msg_id


def register(ls: Glm5Server) -> None:
    @ls.feature(types.TEXT_DOCUMENT_INLINE_COMPLETION, types.InlineCompletionOptions())
    async def inline_completion(ls: Glm5Server, params: types.InlineCompletionParams) -> types.InlineCompletionList:
        automatic = params.context.trigger_kind == types.InlineCompletionTriggerKind.Automatic
        uri, encoding = params.text_document.uri, ls.state.encoding
        position = convert.position_in(ls.snapshot(uri).lines, encoding, params.position, "position", clamp=True)
        answer = await ls.completions.complete(
            uri, position, request_id(ls), "inline", automatic
        )
        if not answer.text:
            return types.InlineCompletionList(items=[])
        at = encoding.position_out(ls.state.lines(uri), answer.position)
        item = types.InlineCompletionItem(
            insert_text=answer.text, range=types.Range(start=at, end=at), command=accept_command(answer)
        )
        return types.InlineCompletionList(items=[item])

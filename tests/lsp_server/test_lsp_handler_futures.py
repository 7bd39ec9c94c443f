"""pygls keeps every running handler's future in a table; a finished one must leave it.

pygls removes only a request's own future, when it answers. The futures of notifications and
of the user handlers that its built-in generator handlers run (`didChange`, `executeCommand`)
stayed for good: one per edit, which a cancel storm of 4,000 edits showed as 4,000 entries.
The protocol is driven in-process, message by message, as its read loop would.
"""

from __future__ import annotations

import asyncio
import json

from lsprotocol import types
from pygls.lsp.server import LanguageServer

from lsp_server.protocol import Glm5Protocol

ROUNDS = 25


class _Sink:
    def __init__(self) -> None:
        self.messages: list[dict] = []

    def write(self, data: bytes | str) -> None:
        text = data.decode() if isinstance(data, bytes) else data
        self.messages.append(json.loads(text[text.index("{"):]))

    def close(self) -> None:
        pass


def _server() -> tuple[LanguageServer, _Sink]:
    ls = LanguageServer("futures-test", "0", protocol_cls=Glm5Protocol)
    sink = _Sink()
    ls.protocol.set_writer(sink)
    changes: list[int] = []

    @ls.feature(types.TEXT_DOCUMENT_DID_CHANGE)
    def did_change(ls: LanguageServer, params: types.DidChangeTextDocumentParams) -> None:
        changes.append(params.text_document.version)

    @ls.feature(types.WORKSPACE_DID_CHANGE_CONFIGURATION)
    async def did_change_configuration(ls: LanguageServer, params: types.DidChangeConfigurationParams) -> None:
        await asyncio.sleep(0)

    @ls.command("test.echo")
    async def echo(ls: LanguageServer, *args: object) -> list[object]:
        await asyncio.sleep(0)
        return list(args)

    ls.changes = changes
    return ls, sink


def _feed(ls: LanguageServer, message: dict) -> None:
    ls.protocol.handle_message(ls.protocol.structure_message({"jsonrpc": "2.0", **message}))


async def test_finished_handlers_leave_the_futures_table_and_every_request_is_answered():
    ls, sink = _server()
    _feed(ls, {"id": 0, "method": "initialize", "params": {"capabilities": {}}})
    for i in range(ROUNDS):
        _feed(ls, {"method": "textDocument/didChange", "params": {
            "textDocument": {"uri": "file:///a.py", "version": i}, "contentChanges": [{"text": f"x = {i}\n"}]}})
        _feed(ls, {"method": "workspace/didChangeConfiguration", "params": {"settings": {}}})
        _feed(ls, {"id": f"echo-{i}", "method": "workspace/executeCommand", "params": {"command": "test.echo", "arguments": [i]}})
    for _ in range(20):
        await asyncio.sleep(0)
    assert ls.changes == list(range(ROUNDS))
    answers = {m["id"]: m.get("result") for m in sink.messages if "id" in m}
    assert all(answers[f"echo-{i}"] == [i] for i in range(ROUNDS))
    assert ls.protocol._request_futures == {}


async def test_a_pending_request_stays_in_the_table_and_cancellable():
    ls, sink = _server()
    release = asyncio.Event()

    @ls.command("test.wait")
    async def wait(ls: LanguageServer, *args: object) -> str:
        await release.wait()
        return "done"

    _feed(ls, {"id": 0, "method": "initialize", "params": {"capabilities": {}}})
    _feed(ls, {"id": "slow", "method": "workspace/executeCommand", "params": {"command": "test.wait"}})
    _feed(ls, {"id": "quick", "method": "workspace/executeCommand", "params": {"command": "test.echo", "arguments": [1]}})
    for _ in range(10):
        await asyncio.sleep(0)
    assert "slow" in ls.protocol._request_futures and "quick" not in ls.protocol._request_futures
    _feed(ls, {"method": "$/cancelRequest", "params": {"id": "slow"}})
    for _ in range(10):
        await asyncio.sleep(0)
    errors = {m["id"]: m["error"]["code"] for m in sink.messages if "error" in m}
    assert errors.get("slow") == types.LSPErrorCodes.RequestCancelled
    release.set()
    for _ in range(10):
        await asyncio.sleep(0)
    assert ls.protocol._request_futures == {}

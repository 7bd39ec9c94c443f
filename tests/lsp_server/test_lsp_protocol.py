"""The server over stdio with a scripted engine: capabilities, completions, streaming, caching,
cancellation, stale versions, telemetry and bad input. One server process for the module."""

from __future__ import annotations

import asyncio

import pytest
import pytest_asyncio
from lsprotocol import types
from pygls.exceptions import JsonRpcException

from lsp_harness import Session

pytestmark = pytest.mark.asyncio(loop_scope="module")

FAKE_TEXT = "compute_total(items)\nprint('never shown')\n"


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def session(tmp_path_factory):
    root = tmp_path_factory.mktemp("ws")
    (root / "util.py").write_text("def compute_total(items):\n    return sum(items)\n")
    s = await Session.start_fake(
        root, {"text": FAKE_TEXT, "step_s": 0.002}, {"streaming": True, "debounceMs": 300, "diagnosticsDebounceMs": 20},
    )
    await s.wait_ready()
    yield s
    assert await s.stop() == 0



async def test_capabilities_are_advertised(session: Session):
    caps = session.initialize_result.capabilities
    assert caps.inline_completion_provider is not None
    assert caps.text_document_sync.change == types.TextDocumentSyncKind.Incremental
    assert caps.completion_provider is not None
    assert caps.code_action_provider.resolve_provider is True
    assert {"glm5.explainContext", "glm5.stats", "glm5.clearCache", "glm5.applyFix"} <= set(caps.execute_command_provider.commands)
    assert caps.definition_provider and caps.references_provider
    assert caps.workspace.workspace_folders.supported and caps.workspace.workspace_folders.change_notifications


async def test_start_up_reports_work_done_progress(session: Session):
    kinds = [p["kind"] for p in session.progress()]
    assert session.messages("window/workDoneProgress/create")
    assert kinds.count("begin") == kinds.count("end") >= 2  # indexing and model loading at least


async def test_inline_completion_is_post_processed_and_streamed(session: Session):
    uri = session.create("main.py", "from util import compute_total\n\nitems = [1, 2]\ntotal = \n")
    result = await session.inline(uri, 3, 8)
    assert [i.insert_text for i in result.items] == ["compute_total(items)"]
    item = result.items[0]
    assert item.range.start == item.range.end == types.Position(line=3, character=8)
    assert item.command.command == "glm5.didAcceptCompletion"
    streamed = [p["text"] for p in session.messages("glm5/inlineCompletionProgress")]
    assert streamed and streamed[-1] == "compute_total(items)"
    assert all("\n" not in text for text in streamed)  # single-line post-processing applies while streaming


async def test_typing_through_the_suggestion_is_answered_from_the_cache(session: Session):
    uri = session.create("cache.py", "x = \n")
    first = await session.inline(uri, 0, 4)
    assert first.items[0].insert_text == "compute_total(items)"
    before = (await session.stats())["engine"]["requests_submitted"]
    session.change(uri, "comp", start=(0, 4))
    second = await session.inline(uri, 0, 8)
    assert second.items[0].insert_text == "ute_total(items)"
    stats = await session.stats()
    assert stats["engine"]["requests_submitted"] == before
    assert stats["cache"]["hits"] >= 1


async def test_rapid_requests_only_the_last_reaches_the_engine(session: Session):
    uri = session.create("rapid.py", "value = \n")
    before = (await session.stats())["engine"]
    futures = [session.inline_request(uri, 0, 8, msg_id=f"rapid-{i}") for i in range(20)]
    outcomes = await asyncio.gather(*(asyncio.wrap_future(f) for f in futures), return_exceptions=True)
    assert all(isinstance(o, JsonRpcException) and o.code == types.LSPErrorCodes.ServerCancelled for o in outcomes[:-1])
    assert outcomes[-1].items[0].insert_text == "compute_total(items)"
    after = await session.stats(recent=20)
    assert after["engine"]["requests_submitted"] - before["requests_submitted"] == 1
    last = after["recent"][-1]
    assert last["request_id"] == "rapid-19" and last["outcome"] == "answered"
    assert after["engine"]["decode_steps"] - before["decode_steps"] == last["decode_steps"]
    assert [r["outcome"] for r in after["recent"][-20:-1]] == ["superseded"] * 19


async def test_client_cancel_aborts_generation(session: Session):
    uri = session.create("cancel.py", "value = \n")
    future = session.inline_request(uri, 0, 8, msg_id="to-cancel", automatic=False)
    await session.wait_for(lambda: any(p["requestId"] == "to-cancel" for p in session.messages("glm5/inlineCompletionProgress")), what="first streamed text")
    session.client.protocol.notify(types.CANCEL_REQUEST, types.CancelParams(id="to-cancel"))
    with pytest.raises(JsonRpcException) as error:
        await asyncio.wrap_future(future)
    assert error.value.code == types.LSPErrorCodes.RequestCancelled
    stats = await session.stats(recent=1)
    assert stats["recent"][-1]["outcome"] == "cancelled"


async def test_a_change_during_generation_drops_the_stale_request(session: Session):
    uri = session.create("stale.py", "value = \n")
    future = session.inline_request(uri, 0, 8, msg_id="stale-1", automatic=False)
    await session.wait_for(lambda: any(p["requestId"] == "stale-1" for p in session.messages("glm5/inlineCompletionProgress")), what="generation to start")
    session.change(uri, "1", start=(0, 8))
    with pytest.raises(JsonRpcException) as error:
        await asyncio.wrap_future(future)
    assert error.value.code == types.LSPErrorCodes.ContentModified
    fresh = await session.inline(uri, 0, 9)
    assert fresh.items  # the server keeps serving the new version


async def test_completion_items_for_clients_without_inline_completion(session: Session):
    uri = session.create("items.py", "total = comp\n")
    result = await session.client.text_document_completion_async(
        types.CompletionParams(text_document=types.TextDocumentIdentifier(uri=uri), position=types.Position(line=0, character=12))
    )
    assert result.is_incomplete
    item = result.items[0]
    assert item.text_edit.new_text == "comp" + "compute_total(items)"
    assert item.text_edit.range.start.character == 8 and item.filter_text.startswith("comp")


async def test_telemetry_counts_each_completion_once(session: Session):
    uri = session.create("tele.py", "v = \n")
    result = await session.inline(uri, 0, 4)
    completion_id = result.items[0].command.arguments[0]["completionId"]
    session.client.protocol.notify("glm5/didShowCompletion", {"completionId": completion_id})
    await session.command("glm5.didAcceptCompletion", {"completionId": completion_id})
    session.client.protocol.notify("glm5/didAcceptCompletion", {"completionId": completion_id})
    session.client.protocol.notify("glm5/didRejectCompletion", {"nothing": 1})
    stats = await session.stats()
    assert stats["telemetry"]["shown"] >= 1
    accepted = stats["telemetry"]["accepted"]
    session.client.protocol.notify("glm5/didAcceptCompletion", {"completionId": completion_id})
    assert (await session.stats())["telemetry"]["accepted"] == accepted


async def test_bad_requests_get_errors_and_the_server_keeps_serving(session: Session):
    protocol = session.client.protocol
    with pytest.raises(JsonRpcException) as unknown:
        await protocol.send_request_async("glm5/noSuchMethod", {})
    assert unknown.value.code == types.ErrorCodes.MethodNotFound
    with pytest.raises(JsonRpcException) as bad_params:
        await session.raw_request("bad-params", types.TEXT_DOCUMENT_INLINE_COMPLETION, {"textDocument": {"uri": "file:///x.py"}})
    assert bad_params.value.code == types.ErrorCodes.InvalidParams
    with pytest.raises(JsonRpcException) as not_open:
        await session.inline("file:///never/opened.py", 0, 0)
    assert not_open.value.code == types.ErrorCodes.InvalidParams and "not open" in not_open.value.message
    with pytest.raises(JsonRpcException) as bad_command:
        await session.command("glm5.explainContext", "nope")
    assert bad_command.value.code == types.ErrorCodes.InvalidParams
    session.client.text_document_did_change(
        types.DidChangeTextDocumentParams(
            text_document=types.VersionedTextDocumentIdentifier(uri="file:///never/opened.py", version=2),
            content_changes=[types.TextDocumentContentChangeWholeDocument(text="x")],
        )
    )
    session.client.protocol.notify("glm5/didChangeCursor", {"position": "garbage"})
    assert (await session.raw_error(b"{not json")).code == types.ErrorCodes.ParseError
    assert (await session.raw_error(b'{"jsonrpc": "2.0", "id": 7, "params": "\xff"}')).code == types.ErrorCodes.ParseError
    assert (await session.raw_error(b'["a", "list"]')).code == types.ErrorCodes.InvalidRequest
    uri = session.create("after_bad.py", "v = \n")
    assert (await session.inline(uri, 0, 4)).items


async def test_characters_past_the_line_and_surrogate_pairs_clamp_a_line_past_the_end_is_invalid(session: Session):
    uri = session.create("emoji.py", "s = '😀😀' + \n")
    past_line = await session.inline(uri, 0, 500)  # LSP: a character past the line "defaults back to the line length"
    assert past_line.items[0].range.start == types.Position(line=0, character=13)  # the line is 13 UTF-16 units
    with pytest.raises(JsonRpcException, match="line 99 is past the end of the document") as error:
        await session.inline(uri, 99, 3)
    assert error.value.code == types.ErrorCodes.InvalidParams
    assert (await session.inline(uri, 1, 0)).items  # the last line (after the final "\n") is in the document
    mid_pair = await session.inline(uri, 0, 6)  # inside the first emoji's surrogate pair
    assert mid_pair.items[0].range.start.character == 5


async def test_nul_characters_and_lone_surrogates_in_a_document_are_served(session: Session):
    uri = session.open(session.root / "odd.py", "a = '\x00'\nb = '\ud800' + \n")
    result = await session.inline(uri, 1, 10)  # the end of line 1: the lone surrogate is one UTF-16 unit
    assert result.items[0].range.start == types.Position(line=1, character=10)
    explained = await session.command("glm5.explainContext", {"uri": uri, "position": {"line": 1, "character": 10}})
    assert explained["tokens"]["total"] > 0


async def test_explain_context_defaults_to_the_cursor_the_client_reported(session: Session):
    uri = session.create("cursor.py", "import os\n\npath = os.getcwd()\nname = \n")
    with pytest.raises(JsonRpcException, match="no known cursor"):
        await session.command("glm5.explainContext", {"uri": uri})
    session.client.protocol.notify("glm5/didChangeCursor", {"textDocument": {"uri": uri}, "position": {"line": 3, "character": 7}})
    explained = await session.command("glm5.explainContext", {"uri": uri})
    assert explained["position"] == {"line": 3, "character": 7}
    assert explained["prompt"].endswith("name = <|code_middle|>")  # the prefix ends at the cursor


async def test_clear_cache_forgets_suggestions(session: Session):
    uri = session.create("clear.py", "y = \n")
    await session.inline(uri, 0, 4)
    assert (await session.command("glm5.clearCache"))["cleared"] >= 1
    before = (await session.stats())["engine"]["requests_submitted"]
    await session.inline(uri, 0, 4)  # same place: answered by the model again, not the cache
    assert (await session.stats())["engine"]["requests_submitted"] == before + 1

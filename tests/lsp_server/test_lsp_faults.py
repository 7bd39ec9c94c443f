"""Faults inside the server: a start-up phase that raises, a slow engine call from a command,
and a background task that fails. Each must be reported and leave the server answering."""

from __future__ import annotations

import asyncio
import logging

import pytest
from lsprotocol import types
from pygls.exceptions import JsonRpcException

from lsp_harness import Session
from lsp_server.engine_client import ModelHandle
from lsp_server.server import build_server
from lsp_fakes import FakeEngine, byte_tokenizer


def _definition(session: Session, uri: str):
    where = types.DefinitionParams(text_document=types.TextDocumentIdentifier(uri=uri), position=types.Position(line=1, character=1))
    return session.client.text_document_definition_async(where)


async def test_a_watcher_that_cannot_start_is_reported_and_start_up_still_ends(tmp_path):
    (tmp_path / "lib.py").write_text("def helper():\n    return 1\n")
    session = await Session.start_fake(tmp_path, {"watcher_fails": True})
    try:
        uri = session.create("main.py", "from lib import helper\nhelper()\n")
        found = await asyncio.wait_for(_definition(session, uri), 20)
        assert [loc.uri for loc in found] == [(tmp_path / "lib.py").as_uri()]
        await session.wait_ready(20)
        logged = [m.message for m in session.messages("window/logMessage")]
        assert any("inotify watch limit" in m for m in logged), logged
    finally:
        assert await session.stop() == 0


async def test_glm5_stats_does_not_block_the_event_loop_on_the_engine(tmp_path):
    gate = tmp_path.parent / f"{tmp_path.name}.gate"
    session = await Session.start_fake(tmp_path, {"stats_gate": str(gate)})
    try:
        await session.wait_ready()
        uri = session.create("a.py", "def f():\n    return f\n")
        stats = asyncio.ensure_future(session.stats())
        await asyncio.sleep(0.2)
        answered = await asyncio.wait_for(_definition(session, uri), 20)  # while the engine is busy
        assert not stats.done() and answered is not None
        gate.touch()
        assert (await asyncio.wait_for(stats, 20))["kvCache"]["prefills"] >= 0
    finally:
        gate.touch()
        assert await session.stop() == 0


async def test_a_failing_background_task_is_logged_with_its_error(caplog):
    tok = byte_tokenizer()
    server = build_server(loader=lambda path, runtime: ModelHandle(FakeEngine(tok, lambda r: ""), tok, path, 4096))

    async def broken() -> None:
        raise ValueError("index refresh exploded")

    with caplog.at_level(logging.ERROR, logger="lsp_server"):
        server.background(broken())
        for _ in range(100):
            await asyncio.sleep(0.01)
            if not server._tasks:
                break
    assert any(r.name.startswith("lsp_server") and "index refresh exploded" in (r.getMessage() + str(r.exc_info)) for r in caplog.records)


async def test_after_a_content_length_mismatch_the_next_message_is_served(tmp_path):
    session = await Session.start_fake(tmp_path, {})
    try:
        body = b'{"jsonrpc": "2.0", "id": "cut", "method": "workspace/executeCommand", "params": {"command": "glm5.stats"}}'
        session.client._server.stdin.write(b"Content-Length: %d\r\n\r\n%s" % (len(body) - 10, body))  # declared too short
        stats = await asyncio.wait_for(session.stats(), 20)
        assert "model" in stats
    finally:
        assert await session.stop() == 0


async def test_requests_before_initialize_and_after_shutdown_are_answered_with_errors(tmp_path):
    import json
    import sys

    from lsp_harness import TESTS, server_env
    from pygls.lsp.client import LanguageClient

    client = LanguageClient("raw", "1")
    await client.start_io(sys.executable, str(TESTS / "fake_lsp_server.py"), env=server_env({"GLM5_FAKE": json.dumps({})}))
    try:
        with pytest.raises(JsonRpcException) as early:
            await asyncio.wait_for(client.workspace_execute_command_async(types.ExecuteCommandParams(command="glm5.stats")), 20)
        assert early.value.code == types.ErrorCodes.ServerNotInitialized
        await client.initialize_async(types.InitializeParams(capabilities=types.ClientCapabilities()))
        with pytest.raises(JsonRpcException) as again:
            await asyncio.wait_for(client.initialize_async(types.InitializeParams(capabilities=types.ClientCapabilities())), 20)
        assert again.value.code == types.ErrorCodes.InvalidRequest
        await client.shutdown_async(None)
        with pytest.raises(JsonRpcException) as late:
            await asyncio.wait_for(client.workspace_execute_command_async(types.ExecuteCommandParams(command="glm5.stats")), 20)
        assert late.value.code == types.ErrorCodes.InvalidRequest
        client.exit(None)
        assert await asyncio.wait_for(client._server.wait(), 20) == 0
    finally:
        await client.stop()


def test_the_log_stays_bounded_however_large_the_input_it_reports():
    """A 1 MB string echoed in an error and a long traceback are cut to the record limit, keeping
    their head and their last lines (the exception's own line)."""
    import io

    from lsp_server.errors import BoundedRecordFilter

    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.addFilter(BoundedRecordFilter(limit=2_000))
    logger = logging.getLogger("test.bounded")
    logger.addHandler(handler)
    logger.propagate = False
    try:
        logger.error("Invalid Params: Command name %r", "x" * 1_000_000)
        try:
            raise ValueError("deep " * 2_000 + "the final cause")
        except ValueError:
            logger.exception("Unable to deserialize message")
    finally:
        logger.removeHandler(handler)
    text = out.getvalue()
    assert len(text) < 7_000
    assert text.startswith("Invalid Params: Command name 'xxx") and "characters cut" in text
    assert "Unable to deserialize message" in text and text.rstrip().endswith("the final cause")


async def test_a_request_right_after_a_1_mb_edit_is_answered_while_its_parse_is_held(tmp_path):
    """The didChange of a 1 MB text applies the text at once and leaves the parse to the first
    use of the tree: with every large parse held by a gate, a request after the edit is answered
    (the event loop never waits on the parse), and a completion, which needs the tree, waits for
    it off the loop and then answers for the latest version."""
    gate = tmp_path.parent / f"{tmp_path.name}.parse-gate"
    session = await Session.start_fake(tmp_path, {"parse_gate": str(gate), "rules": [["latest_marker = ", "from_latest"]]})
    try:
        await session.wait_ready()
        uri = session.create("big.py", "x = 1\n")
        big = "def f():\n    pass\n" * 60_000 + "latest_marker = "
        session.change(uri, big.replace("latest_marker", "older_marker"))
        session.change(uri, big)
        lines = big.split("\n")
        completion = asyncio.ensure_future(session.inline(uri, len(lines) - 1, len(lines[-1])))
        stats = await asyncio.wait_for(session.stats(), 30)  # answered while both versions' parses are held
        assert "model" in stats and not completion.done()
        gate.touch()
        answer = await asyncio.wait_for(completion, 60)
        assert [item.insert_text for item in answer.items] == ["from_latest"]
    finally:
        gate.touch()
        assert await session.stop() == 0


def test_the_server_turns_repeated_engine_failures_into_a_status_error_and_back():
    tok = byte_tokenizer()
    server = build_server(loader=lambda path, runtime: ModelHandle(FakeEngine(tok, lambda r: ""), tok, path, 4096))
    sent: list[tuple[str, dict]] = []
    server.protocol.notify = lambda method, params=None: sent.append((method, params))
    for restarts in (1, 2, 3):
        server.engine.health.failed(restarts, "engine error: RuntimeError: boom")
    server.engine.health.succeeded()
    assert [(m, p["state"]) for m, p in sent] == [("glm5/status", "error"), ("glm5/status", "ready")]
    assert "failed 3 times" in sent[0][1]["message"] and "boom" in sent[0][1]["message"]

"""Strict input at the boundary: params of the wrong JSON type are refused (InvalidParams for a
request; a notification is logged and dropped, so a document never takes an edit that did not
type-check), and positions outside the document a command or request works on are InvalidParams,
never an internal error. One server (scripted engine) for the module."""

from __future__ import annotations

import hashlib
import json

import pytest
import pytest_asyncio
from lsprotocol import types
from pygls.exceptions import JsonRpcException

from lsp_harness import Session

pytestmark = pytest.mark.asyncio(loop_scope="module")

TEXT = "def area(r):\n    return 3.14 * r * r\n\nvalue = \n"


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def session(tmp_path_factory):
    s = await Session.start_fake(tmp_path_factory.mktemp("ws"), {"text": "area(2)\n", "step_s": 0.001})
    await s.wait_ready()
    yield s
    assert await s.stop() == 0


def _did_change(uri: str, version: int, change: object) -> bytes:
    params = {"textDocument": {"uri": uri, "version": version}, "contentChanges": [change]}
    return json.dumps({"jsonrpc": "2.0", "method": "textDocument/didChange", "params": params}).encode()


async def _state(session: Session, uri: str) -> dict:
    return await session.command("glm5.documentState", {"uri": uri})


@pytest.mark.parametrize("text", [{"x": 1}, 5, None, True, ["a"]])
async def test_a_change_whose_text_is_not_a_string_leaves_the_document_unchanged(session: Session, text):
    uri = session.create(f"typed_{type(text).__name__}.py", TEXT)
    before = await _state(session, uri)
    assert before["sha256"] == hashlib.sha256(TEXT.encode()).hexdigest()  # the command reads the server's copy
    session.write_raw(_did_change(uri, 2, {"text": text}))
    whole = {"range": {"start": {"line": 0, "character": 0}, "end": {"line": 9, "character": 0}}, "text": text}
    session.write_raw(_did_change(uri, 3, whole))
    assert await _state(session, uri) == before  # text and version: neither change applied
    answer = await session.inline(uri, 3, 8)  # the server is alive and the next request is fine
    assert [item.insert_text for item in answer.items] == ["area(2)"]
    log = session.log_tail(400)
    assert "notification textDocument/didChange dropped: invalid params" in log and "contentChanges[0].text" in log


@pytest.mark.parametrize(
    "change",
    [
        {"range": None, "text": "x"},  # not a whole-document replacement by a fragment
        {"range": {"start": {"line": "0", "character": 0}, "end": {"line": 0, "character": 1}}, "text": "x"},
        {"range": {"start": {"line": 0, "character": 0}, "end": {"line": 0, "character": 1.5}}, "text": "x"},
    ],
)
async def test_a_change_with_a_wrongly_typed_range_leaves_the_document_unchanged(session: Session, change):
    uri = session.create(f"range_{abs(hash(json.dumps(change)))}.py", TEXT)
    before = await _state(session, uri)
    session.write_raw(_did_change(uri, 2, change))
    assert await _state(session, uri) == before


async def test_a_wrongly_typed_version_is_refused_not_rounded(session: Session):
    uri = session.create("version.py", TEXT)
    before = await _state(session, uri)
    for version in ("7", 7.9, True):
        session.write_raw(_did_change(uri, version, {"text": "replaced\n"}))  # type: ignore[arg-type]
    assert await _state(session, uri) == before


@pytest.mark.parametrize(
    "position",
    [{"line": "3", "character": 8}, {"line": 3, "character": 8.0}, {"line": 3, "character": True}, {"line": 3}],
)
async def test_a_wrongly_typed_request_param_is_invalid_params(session: Session, position):
    uri = session.create("request.py", TEXT)
    params = {"textDocument": {"uri": uri}, "position": position, "context": {"triggerKind": 1}}
    with pytest.raises(JsonRpcException) as error:
        await session.raw_request(f"typed-{json.dumps(position)}", "textDocument/inlineCompletion", params)
    assert error.value.code == types.ErrorCodes.InvalidParams
    assert "params.position" in str(error.value)  # the message names the field


@pytest.mark.parametrize("command", ["glm5.explainContext", "glm5.explainAttention"])
@pytest.mark.parametrize(
    ("position", "message"),
    [
        ({"line": 5, "character": 0}, "line 5 is past the end of the document (5 lines)"),  # line 4 follows the final newline
        ({"line": 99, "character": 0}, "line 99 is past the end"),
        ({"line": 3, "character": 9}, "character 9 is past the end of line 3 (8 characters)"),
    ],
)
async def test_a_command_at_a_position_outside_the_document_is_invalid_params(session: Session, command, position, message):
    uri = session.create("outside.py", TEXT)
    with pytest.raises(JsonRpcException, match=message.replace("(", r"\(").replace(")", r"\)")) as error:
        await session.command(command, {"uri": uri, "position": position})
    assert error.value.code == types.ErrorCodes.InvalidParams


async def test_a_remembered_cursor_outside_the_current_text_is_invalid_params(session: Session):
    uri = session.create("cursor_outside.py", TEXT)
    session.client.protocol.notify("glm5/didChangeCursor", {"textDocument": {"uri": uri}, "position": {"line": 3, "character": 8}})
    session.change(uri, "x = 1\n")  # the cursor's line is gone
    with pytest.raises(JsonRpcException, match="the last known cursor") as error:
        await session.command("glm5.explainContext", {"uri": uri})
    assert error.value.code == types.ErrorCodes.InvalidParams
    assert (await session.command("glm5.explainContext", {"uri": uri, "position": {"line": 1, "character": 0}}))["version"] == 2


async def test_a_code_action_range_outside_the_document_is_invalid_params(session: Session):
    uri = session.create("action.py", TEXT)
    data = {"action": "declare", "uri": uri, "version": 1, "name": "rate",
            "range": {"start": {"line": 40, "character": 0}, "end": {"line": 40, "character": 4}}}
    with pytest.raises(JsonRpcException, match="line 40 is past the end") as error:
        await session.command("glm5.applyFix", data)
    assert error.value.code == types.ErrorCodes.InvalidParams


async def test_a_change_with_no_content_changes_still_moves_the_version(session: Session):
    uri = session.create("empty_change.py", TEXT)
    session.write_raw(json.dumps({"jsonrpc": "2.0", "method": "textDocument/didChange",
                                  "params": {"textDocument": {"uri": uri, "version": 5}, "contentChanges": []}}).encode())
    state = await _state(session, uri)
    assert state["version"] == 5 and state["sha256"] == hashlib.sha256(TEXT.encode()).hexdigest()

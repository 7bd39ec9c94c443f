"""In-flight reuse and the KV-cache wiring: typing exactly what is being generated follows the
running generation (no new engine request); typing anything else aborts it. Start-up binds the
engine's persistent KV store to the workspace and prefills each open file's stable prompt
start; glm5.clearCache clears the engine's cache too. A slow scripted engine (one server)."""

from __future__ import annotations

import asyncio

import pytest
import pytest_asyncio
from lsprotocol import types
from pygls.exceptions import JsonRpcException

from lsp_harness import Session

pytestmark = pytest.mark.asyncio(loop_scope="module")

TEXT = "compute_total(items)"


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def session(tmp_path_factory):
    root = tmp_path_factory.mktemp("ws")
    (root / "util.py").write_text("def compute_total(items):\n    return sum(items)\n")
    (root / "opened.py").write_text("from util import compute_total\n\ntotal = \n")
    s = await Session.start_fake(root, {"text": TEXT, "step_s": 0.05, "load_s": 1.0}, {"streaming": True, "debounceMs": 0})
    s.open(root / "opened.py")  # open while the model loads: warm-up prefills its prompt start
    await s.wait_ready()
    yield s
    assert await s.stop() == 0



async def _streamed(session: Session, msg_id: str, at_least: int) -> None:
    await session.wait_for(
        lambda: any(p["requestId"] == msg_id and len(p["text"]) >= at_least for p in session.messages("glm5/inlineCompletionProgress")),
        what=f"{at_least} streamed characters of {msg_id}",
    )


async def test_start_up_binds_the_kv_store_and_prefills_the_stable_prompt_start(session: Session):
    kv = (await session.stats())["kvCache"]
    assert kv["workspaces_opened"] == 1
    assert kv["prefills"] >= 1 and kv["prefills_ending_at_code_suffix"] == kv["prefills"]


async def test_typing_what_is_generated_follows_the_running_generation(session: Session):
    uri = session.create("follow.py", "total = \n")
    before = (await session.stats())["engine"]
    first = session.inline_request(uri, 0, 8, msg_id="follow-1", automatic=False)
    await _streamed(session, "follow-1", 6)
    session.change(uri, "comp", start=(0, 8))
    second = await session.inline(uri, 0, 12)
    assert second.items[0].insert_text == TEXT[4:]
    with pytest.raises(JsonRpcException) as error:  # the first request's version is gone
        await asyncio.wrap_future(first)
    assert error.value.code == types.LSPErrorCodes.ContentModified
    after = await session.stats(recent=1)
    assert after["engine"]["requests_submitted"] == before["requests_submitted"] + 1
    assert after["engine"]["requests_aborted"] == before["requests_aborted"]
    assert after["recent"][-1]["outcome"] == "continued"


async def test_typing_something_else_aborts_the_running_generation(session: Session):
    uri = session.create("diverge.py", "total = \n")
    before = (await session.stats())["engine"]
    first = session.inline_request(uri, 0, 8, msg_id="diverge-1", automatic=False)
    await _streamed(session, "diverge-1", 4)
    session.change(uri, "x", start=(0, 8))
    with pytest.raises(JsonRpcException):
        await asyncio.wrap_future(first)
    second = await session.inline(uri, 0, 9)
    assert second.items[0].insert_text == TEXT
    after = await session.stats()
    assert after["engine"]["requests_submitted"] == before["requests_submitted"] + 2
    assert after["engine"]["requests_aborted"] == before["requests_aborted"] + 1


async def test_clear_cache_clears_the_engine_kv_cache(session: Session):
    result = await session.command("glm5.clearCache", {"allWorkspaces": True})
    assert result["kvBytesFreed"] == 1024
    assert (await session.stats())["kvCache"]["clears"] == 1

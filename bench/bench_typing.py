"""Typing benchmark: replay a recorded typing session on a real file through `lsp_server --stdio`.

The recording is made from a real source file: a span of N >= 200 characters is cut out and
typed back one character per keystroke (`--record FILE` saves it as JSON, `--replay FILE` plays
a saved one), at a steady interval with a pause after each line. The client behaves like an editor: every keystroke is an incremental didChange
at the cursor; after each keystroke a debounce timer is re-armed; when it fires the client
sends `textDocument/inlineCompletion` (trigger Automatic) and `$/cancelRequest`s the previous
request if it is still pending (cancel-previous).

Measured per request: latency to the first streamed text (`glm5/inlineCompletionProgress`,
the server runs with `streaming: true`) and to the final answer; from `glm5.stats`, the prompt
tokens, the tokens reused from the engine's prefix cache and the tokens actually prefilled.
With `--compare-warmup`, the latency of the first completion after start-up, with and without
the server's warm-up (two fresh servers).

Usage: python bench/bench_typing.py [--model DIR] [--file PATH] [--chars 240] [--interval-ms 150] [--pause-ms 600]
                                    [--debounce-ms 75] [--max-tokens 24] [--compare-warmup]
Without --model the embedded default model is used; without one, a tiny random checkpoint
(numbers then describe the machinery, not a useful model).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lsprotocol import types
from pygls.exceptions import JsonRpcException
from pygls.lsp.client import LanguageClient

REPO = Path(__file__).resolve().parents[1]
DEFAULT_FILE = REPO / "context" / "postprocess.py"


@dataclass
class Recording:
    path: str
    language_id: str
    initial_text: str
    start: tuple[int, int]
    keystrokes: list[tuple[float, str]]  # (seconds since the first keystroke, character)


@dataclass
class Request:
    msg_id: str
    sent: float
    first_text: float | None = None
    done: float | None = None
    outcome: str = "pending"  # answered | empty | cancelled | superseded | stale | error


@dataclass
class Run:
    requests: dict[str, Request] = field(default_factory=dict)
    records: dict[str, dict[str, Any]] = field(default_factory=dict)


def record_session(path: Path, chars: int, interval_s: float, pause_s: float) -> Recording:
    """Cut whole lines (at least `chars` characters) out of `path`, a third into the file, to be
    typed back: the cursor always sits at the end of the line being written, as when coding."""
    text = path.read_text(encoding="utf-8")
    lines = text.splitlines(keepends=True)
    first = len(lines) // 3
    start = sum(len(line) for line in lines[:first])
    end = start
    for line in lines[first:]:
        if end - start >= chars:
            break
        end += len(line)
    end -= 1  # the span's last newline stays: the cursor line has nothing after the cursor
    typed = text[start:end]
    if len(typed) < chars - 1:
        raise SystemExit(f"{path}: too short to type {chars} characters from line {first + 1}")
    language = {".py": "python", ".js": "javascript", ".ts": "typescript", ".go": "go", ".rs": "rust"}.get(path.suffix, "plaintext")
    keystrokes, at = [], 0.0
    for char in typed:
        keystrokes.append((at, char))
        at += interval_s + (pause_s if char == "\n" else 0.0)
    return Recording(str(path), language, text[:start] + text[end:], (first, 0), keystrokes)


async def start_server(
    model: str, root: Path, warmup: bool, max_tokens: int, log: Path, on_initialized: Callable[[LanguageClient], None] | None = None,
    env: dict[str, str] | None = None, options: dict[str, Any] | None = None,
) -> tuple[LanguageClient, list]:
    """Start and initialize a server; `on_initialized` runs right after `initialized`, before the
    model is ready, as an editor opens its visible buffers while the server warms up."""
    client = LanguageClient("bench-typing", "1")
    notes: list[tuple[float, str, Any]] = []
    for method in ("glm5/inlineCompletionProgress", "glm5/status", types.PROGRESS, types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS):
        client.feature(method)(lambda params, m=method: notes.append((time.perf_counter(), m, params)))
    client.feature(types.WINDOW_WORK_DONE_PROGRESS_CREATE)(lambda params: None)
    await client.start_io(sys.executable, "-m", "lsp_server", "--stdio", "--model", model, "--log-file", str(log), cwd=str(REPO),
                          env={**os.environ, **(env or {})})
    options = {"streaming": True, "debounceMs": 0, "warmup": warmup, "maxTokens": max_tokens, "singleLineMaxTokens": max_tokens, **(options or {})}
    await client.initialize_async(types.InitializeParams(
        capabilities=types.ClientCapabilities(window=types.WindowClientCapabilities(work_done_progress=True)),
        workspace_folders=[types.WorkspaceFolder(uri=root.as_uri(), name=root.name)],
        initialization_options=options,
    ))
    client.initialized(types.InitializedParams())
    if on_initialized is not None:
        on_initialized(client)
    while not any(m == "glm5/status" and p.state in ("ready", "error") for _, m, p in notes):
        await asyncio.sleep(0.05)
    state = [p for _, m, p in notes if m == "glm5/status"][-1]
    if state.state != "ready":
        raise SystemExit(f"server not ready: {state.message}")
    return client, notes


async def stop_server(client: LanguageClient) -> None:
    await client.shutdown_async(None)
    client.exit(None)
    await client.stop()


def _open(client: LanguageClient, rec: Recording, text: str) -> str:
    uri = Path(rec.path).resolve().as_uri()
    client.text_document_did_open(types.DidOpenTextDocumentParams(
        text_document=types.TextDocumentItem(uri=uri, language_id=rec.language_id, version=1, text=text)))
    return uri


def _inline(client: LanguageClient, uri: str, line: int, character: int, msg_id: str, automatic: bool = True):
    kind = types.InlineCompletionTriggerKind.Automatic if automatic else types.InlineCompletionTriggerKind.Invoked
    params = types.InlineCompletionParams(
        context=types.InlineCompletionContext(trigger_kind=kind),
        text_document=types.TextDocumentIdentifier(uri=uri), position=types.Position(line=line, character=character))
    return client.protocol.send_request(types.TEXT_DOCUMENT_INLINE_COMPLETION, params, msg_id=msg_id)


async def replay(client: LanguageClient, notes: list, rec: Recording, debounce_s: float) -> Run:
    run = Run()
    uri = _open(client, rec, rec.initial_text)
    line, character = rec.start
    version, pending, timer = 1, None, None
    loop = asyncio.get_running_loop()

    def fire() -> None:
        nonlocal pending
        if pending is not None and run.requests[pending].done is None:
            client.protocol.notify(types.CANCEL_REQUEST, types.CancelParams(id=pending))
        msg_id = f"k{len(run.requests)}"
        request = run.requests[msg_id] = Request(msg_id, time.perf_counter())
        future = _inline(client, uri, line, character, msg_id)
        future.add_done_callback(lambda f, r=request: loop.call_soon_threadsafe(_finish, r, f))
        pending = msg_id

    started = time.perf_counter()
    for at, char in rec.keystrokes:
        await asyncio.sleep(max(0.0, started + at - time.perf_counter()))
        version += 1
        client.text_document_did_change(types.DidChangeTextDocumentParams(
            text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=version),
            content_changes=[types.TextDocumentContentChangePartial(
                range=types.Range(start=types.Position(line=line, character=character), end=types.Position(line=line, character=character)),
                text=char)]))
        line, character = (line + 1, 0) if char == "\n" else (line, character + len(char.encode("utf-16-le")) // 2)
        if timer is not None:
            timer.cancel()
        timer = loop.call_later(debounce_s, fire)
    await asyncio.sleep(debounce_s + 0.01)
    while any(r.done is None for r in run.requests.values()):
        await asyncio.sleep(0.02)
    for at, method, params in notes:
        if method == "glm5/inlineCompletionProgress":
            request = run.requests.get(str(params.requestId))
            if request is not None and request.first_text is None:
                request.first_text = at
    stats = await client.workspace_execute_command_async(
        types.ExecuteCommandParams(command="glm5.stats", arguments=[{"recent": len(run.requests) + 5}]))
    run.records = {r["request_id"]: r for r in stats["recent"]}
    return run


def _finish(request: Request, future) -> None:
    request.done = time.perf_counter()
    try:
        result = future.result()
        request.outcome = "answered" if result.items else "empty"
    except JsonRpcException as exc:
        request.outcome = {-32800: "cancelled", -32802: "superseded", -32801: "stale"}.get(exc.code, "error")


async def first_completion(model: str, rec: Recording, warmup: bool, max_tokens: int, log: Path) -> tuple[float, dict]:
    """The editor opens the file and reports its cursor while the server starts, then asks at once.
    Each server gets an empty KV cache directory, so nothing persisted by an earlier run helps.
    Returns the latency and the request's `glm5.stats` record (prompt, cached, prefilled tokens)."""
    uri = Path(rec.path).resolve().as_uri()

    def open_with_cursor(client: LanguageClient) -> None:
        _open(client, rec, rec.initial_text)
        client.protocol.notify("glm5/didChangeCursor", {"textDocument": {"uri": uri}, "position": {"line": rec.start[0], "character": rec.start[1]}})

    cache = tempfile.mkdtemp(prefix="bench-typing-kv-")
    client, _ = await start_server(model, Path(rec.path).parent, warmup, max_tokens, log, open_with_cursor, {"GLM5_LSP_CACHE_DIR": cache})
    try:
        start = time.perf_counter()
        await asyncio.wrap_future(_inline(client, uri, *rec.start, msg_id="first", automatic=False))
        latency = time.perf_counter() - start
        stats = await client.workspace_execute_command_async(
            types.ExecuteCommandParams(command="glm5.stats", arguments=[{"recent": 8}]))
        return latency, next((r for r in stats["recent"] if r["request_id"] == "first"), {})
    finally:
        await stop_server(client)


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[max(0, min(len(ordered) - 1, round(p * len(ordered) + 0.5) - 1))]


def report(run: Run, rec: Recording) -> None:
    reqs = list(run.requests.values())
    answered = [r for r in reqs if r.outcome in ("answered", "empty")]
    engine = [run.records[r.msg_id] for r in answered if run.records.get(r.msg_id, {}).get("prompt_tokens")]
    hits = sum(1 for r in answered if run.records.get(r.msg_id, {}).get("outcome") == "cache_hit")
    print(f"\nfile {rec.path}: {len(rec.keystrokes)} keystrokes, {len(reqs)} requests sent")
    print("outcomes: " + ", ".join(f"{k} {sum(1 for r in reqs if r.outcome == k)}" for k in ("answered", "empty", "cancelled", "superseded", "stale", "error")) + f"; cache hits {hits}")
    rows = [("to first streamed text", [r.first_text - r.sent for r in answered if r.first_text]),
            ("to final result", [r.done - r.sent for r in answered])]
    print(f"\n{'latency (ms)':<26}{'n':>6}{'p50':>10}{'p95':>10}")
    for name, values in rows:
        if values:
            print(f"{name:<26}{len(values):>6}{pct(values, .5) * 1000:>10.1f}{pct(values, .95) * 1000:>10.1f}")
    if engine:
        prompt = [e["prompt_tokens"] for e in engine]
        cached = [e["cached_tokens"] for e in engine]
        filled = [e["prefilled_tokens"] for e in engine]
        share = [f / p for f, p in zip(filled, prompt) if p]
        print(f"\n{'per engine request':<26}{'n':>6}{'mean':>10}{'p50':>10}{'p95':>10}")
        for name, values in (("prompt tokens", prompt), ("cached tokens", cached), ("prefilled tokens", filled)):
            print(f"{name:<26}{len(values):>6}{statistics.mean(values):>10.1f}{pct(values, .5):>10.0f}{pct(values, .95):>10.0f}")
        prepare = [e["prepare_s"] * 1000 for e in engine]
        print(f"{'prompt building (ms)':<26}{len(prepare):>6}{statistics.mean(prepare):>10.1f}{pct(prepare, .5):>10.1f}{pct(prepare, .95):>10.1f}")
        if share:
            print(f"{'prefilled / prompt':<26}{len(share):>6}{statistics.mean(share):>10.3f}{pct(share, .5):>10.3f}{pct(share, .95):>10.3f}")


async def main_async(args: argparse.Namespace) -> None:
    model = args.model or _embedded_or_tiny()
    rec = Recording(**json.loads(Path(args.replay).read_text())) if args.replay else \
        record_session(Path(args.file), args.chars, args.interval_ms / 1000, args.pause_ms / 1000)
    if args.record:
        Path(args.record).write_text(json.dumps(rec.__dict__))
    logs = Path(tempfile.mkdtemp(prefix="bench-typing-"))
    client, notes = await start_server(model, Path(rec.path).parent, True, args.max_tokens, logs / "server.log")
    try:
        run = await replay(client, notes, rec, args.debounce_ms / 1000)
    finally:
        await stop_server(client)
    print(f"model {model}; server log {logs / 'server.log'}")
    report(run, rec)
    if args.compare_warmup:
        print(f"\n{'first completion after start-up':<34}{'ms':>8}{'prompt':>8}{'cached':>8}{'prefilled':>10}")
        for label, warm in (("with warm-up", True), ("without warm-up", False)):
            latency, record = await first_completion(model, rec, warm, args.max_tokens, logs / f"{label.split()[0]}.log")
            print(f"{label:<34}{latency * 1000:>8.1f}" + "".join(f"{record.get(k, '-')!s:>{w}}" for k, w in
                  (("prompt_tokens", 8), ("cached_tokens", 8), ("prefilled_tokens", 10))))


def _embedded_or_tiny() -> str:
    from model_runtime.embedded import DEFAULT_MODEL_DIR

    if (DEFAULT_MODEL_DIR / "config.json").is_file():
        return str(DEFAULT_MODEL_DIR)
    from model_runtime.testing import make_tiny_checkpoint

    path = make_tiny_checkpoint(Path(tempfile.mkdtemp(prefix="bench-tiny-")))
    print(f"no embedded model: using a tiny random checkpoint at {path}")
    return str(path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", help="checkpoint directory (default: the embedded model)")
    parser.add_argument("--file", default=str(DEFAULT_FILE), help="source file to type into")
    parser.add_argument("--chars", type=int, default=240, help="keystrokes to type (>= 200)")
    parser.add_argument("--interval-ms", type=float, default=150.0, help="time between keystrokes (150 ms: about 70 wpm)")
    parser.add_argument("--pause-ms", type=float, default=600.0, help="extra pause after each typed line")
    parser.add_argument("--debounce-ms", type=float, default=75.0, help="client debounce before a request")
    parser.add_argument("--max-tokens", type=int, default=24)
    parser.add_argument("--record", help="save the recording here (JSON)")
    parser.add_argument("--replay", help="replay this recording instead of making one")
    parser.add_argument("--compare-warmup", action="store_true", help="also time the first completion with and without warm-up")
    args = parser.parse_args()
    if args.chars < 200 and not args.replay:
        parser.error("--chars must be at least 200")
    asyncio.run(main_async(args))


if __name__ == "__main__":
    main()

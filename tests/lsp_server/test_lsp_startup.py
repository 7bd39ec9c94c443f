"""Start-up with a slow, failing or missing model (scripted engine; one short server each)."""

from __future__ import annotations

import asyncio
import os

import pytest
from lsprotocol import types
from pygls.exceptions import JsonRpcException

from lsp_harness import Session
from lsp_server.progress import throttled


async def _start(tmp_path, **fake) -> Session:
    return await Session.start_fake(tmp_path, fake)


async def test_a_completion_before_the_model_is_loaded_waits_for_it(tmp_path):
    session = await _start(tmp_path, load_s=1.0, text="42")
    try:
        uri = session.open(tmp_path / "early.py", "answer = \n")
        result = await session.inline(uri, 0, 9)
        assert [i.insert_text for i in result.items] == ["42"]
        assert session.messages("glm5/status")[0]["state"] == "warming"
        await session.wait_ready()
    finally:
        assert await session.stop() == 0


async def test_a_failed_load_is_reported_and_completions_get_its_reason(tmp_path):
    session = await _start(tmp_path, fail="weights are corrupt")
    try:
        await session.wait_for(lambda: any(p["state"] == "error" for p in session.messages("glm5/status")), what="error status")
        # the message follows the status notification: a loaded machine may deliver it a moment later
        await session.wait_for(lambda: session.messages("window/showMessage"), what="an error message")
        shown = [m.message for m in session.messages("window/showMessage")]
        assert any("weights are corrupt" in m for m in shown)
        uri = session.open(tmp_path / "a.py", "x = \n")
        with pytest.raises(JsonRpcException) as error:
            await session.inline(uri, 0, 4)
        assert error.value.code == types.LSPErrorCodes.RequestFailed and "weights are corrupt" in error.value.message
        stats = await session.stats()
        assert stats["model"]["state"] == "failed"
    finally:
        assert await session.stop() == 0


async def test_without_any_model_the_error_says_how_to_give_one(tmp_path):
    session = await _start(tmp_path, no_model=True)
    try:
        status = await session.wait_for(
            lambda: next((p for p in session.messages("glm5/status") if p["state"] == "error"), None), what="error status"
        )
        assert "--model" in status["message"] and "initializationOptions.model" in status["message"]
        uri = session.open(tmp_path / "a.py", "x = \n")
        with pytest.raises(JsonRpcException, match="--model"):
            await session.inline(uri, 0, 4)
    finally:
        assert await session.stop() == 0


async def test_a_request_cancelled_while_the_model_loads_is_answered_empty_with_a_status(tmp_path):
    session = await _start(tmp_path, load_s=2.0, text="42")
    try:
        uri = session.open(tmp_path / "wait.py", "x = \n")
        future = session.inline_request(uri, 0, 4, msg_id="waiting", automatic=False)
        await session.wait_for(lambda: session.messages("glm5/status"), what="warming status")
        session.client.protocol.notify(types.CANCEL_REQUEST, types.CancelParams(id="waiting"))
        result = await asyncio.wrap_future(future)
        assert list(result.items) == []
        assert any(p.get("message") == "the model is still loading" for p in session.messages("glm5/status"))
    finally:
        assert await session.stop() == 0


async def test_a_completion_during_start_up_waits_for_the_persisted_kv_store(tmp_path):
    """The store binds slower than the model loads: the completion must not run before it."""
    session = await _start(tmp_path, load_s=0.2, store_s=1.5, text="42")
    try:
        uri = session.open(tmp_path / "early.py", "answer = \n")
        result = await session.inline(uri, 0, 9)
        assert [i.insert_text for i in result.items] == ["42"]
        stats = await session.stats(recent=1)
        (record,) = stats["recent"]
        assert record["prompt_tokens"] > 0 and record["cached_tokens"] == record["prompt_tokens"]
        await session.wait_ready()
        phases = (await session.stats())["startup_ms"]
        assert set(phases) >= {"load", "index", "store", "warmup", "ready"}
        assert phases["store"] >= 1000 and phases["load"] >= 150  # the fake's sleeps, measured
    finally:
        assert await session.stop() == 0


async def test_a_completion_during_start_up_builds_its_prompt_with_the_index_before_the_model_is_ready(tmp_path):
    """The tokenizer is known before the weights: the prompt is built while the model loads, but
    only once the workspace index is there (its cross-file context decides the answer here: the
    fake answers `centroid(points)` only to a prompt that shows `centroid`'s definition)."""
    gate = tmp_path.parent / f"{tmp_path.name}.parse-gate"
    log = tmp_path.parent / f"{tmp_path.name}.log"
    (tmp_path / "geometry.py").write_text("def centroid(points):\n    return sum(points) / len(points)\n")
    (tmp_path / "big.py").write_text("def f():\n    pass\n" * 40_000)  # its parse holds the index build at the gate
    app = "from geometry import centroid\n\n\ndef main(points):\n    center = \n"
    (tmp_path / "app.py").write_text(app)
    session = await _start(
        # the model's load outlasts the 80,000-line parse the gate holds (~4 s on a slow 2-core host)
        tmp_path, load_s=15.0, early_text=True, parse_gate=str(gate), log=str(log), text="nothing",
        rules=[["return sum(points) / len(points)", "centroid(points)"]],
    )
    try:
        uri = session.open(tmp_path / "app.py", app)
        completion = asyncio.ensure_future(session.inline(uri, 4, 13))
        await asyncio.sleep(0.5)
        assert not completion.done()  # waiting for the index, not building a prompt without it
        gate.touch()
        answer = await asyncio.wait_for(completion, 60)
        assert [item.insert_text for item in answer.items] == ["centroid(points)"]
        lines = log.read_text().splitlines()
        built = next(i for i, line in enumerate(lines) if "prompt tokens" in line)
        ready = next(i for i, line in enumerate(lines) if "model ready" in line)
        assert built < ready  # the prompt was built while the model still loaded
    finally:
        gate.touch()
        assert await session.stop() == 0


async def test_the_warm_up_holds_while_the_first_completion_builds_its_prompt(tmp_path):
    """The first completion after start-up runs before any warm-up forward, also while it is
    still building its prompt outside the engine (its large parse held by a gate): the warm-up
    waits for the server's completions, not only for requests the engine can see."""
    gate = tmp_path.parent / f"{tmp_path.name}.parse-gate"
    log = tmp_path.parent / f"{tmp_path.name}.log"
    session = await _start(tmp_path, load_s=0.2, parse_gate=str(gate), text="42")
    try:
        big = "def f():\n    pass\n" * 60_000 + "answer = "
        uri = session.open(tmp_path / "big.py", big)  # not on disk: the index never parses it
        lines = big.split("\n")
        completion = asyncio.ensure_future(session.inline(uri, len(lines) - 1, len(lines[-1])))
        for _ in range(600):
            if {"load", "index", "store"} <= set((await session.stats())["startup_ms"]):
                break
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.5)  # time enough for a warm-up that did not hold
        assert not completion.done() and "fake warm-up forward" not in log.read_text()
        gate.touch()
        answer = await asyncio.wait_for(completion, 60)
        assert [item.insert_text for item in answer.items] == ["42"]
        await session.wait_ready()
        forwards = [line for line in log.read_text().splitlines() if "fake warm-up forward" in line]
        assert forwards and all(line.endswith("with 0 requests in flight") for line in forwards)
    finally:
        gate.touch()
        assert await session.stop() == 0


async def test_a_restart_takes_the_unchanged_files_from_the_saved_index(tmp_path):
    """The first start parses every file and saves the index beside the KV cache; the next
    start parses only the file edited while the server was down."""
    root = tmp_path / "ws"
    root.mkdir()
    for name in ("a.py", "b.py", "c.py"):
        (root / name).write_text(f"def {name[0]}_function():\n    return 1\n")
    counts = []
    for attempt in range(2):
        session = await Session.start_fake(root, {"text": "42"})
        try:
            await session.wait_ready()
            index = (await session.stats())["index"]
            counts.append((index["files"], index["from_snapshot"]))
        finally:
            assert await session.stop() == 0
        (root / "b.py").write_text("def b_function(changed=True):\n    return 2\n")
    assert counts == [(3, 0), (3, 2)]
    assert (tmp_path / "ws-cache").is_dir()


def test_the_index_snapshot_is_rewritten_only_when_the_index_changed(tmp_path, monkeypatch):
    from context.index import WorkspaceIndex
    from lsp_server.startup import build_from_snapshot, index_snapshot_path, save_index

    monkeypatch.setenv("GLM5_LSP_CACHE_DIR", str(tmp_path / "cache"))
    root = tmp_path / "ws"
    root.mkdir()
    (root / "a.py").write_text("def a():\n    return 1\n")
    (root / "b.py").write_text("from a import a\n")
    build_from_snapshot(WorkspaceIndex([root]), lambda *_: None)
    saved = index_snapshot_path([root])
    first = 10**18  # 2001: a rewrite would give the file a new mtime
    os.utime(saved, ns=(first, first))

    unchanged = WorkspaceIndex([root])
    build_from_snapshot(unchanged, lambda *_: None)
    save_index(unchanged)  # shutdown
    assert unchanged.reused == 2 and saved.stat().st_mtime_ns == first

    unchanged.update_file(root / "a.py", "def a(x):\n    return x\n")
    save_index(unchanged)
    assert saved.stat().st_mtime_ns != first


async def test_start_up_freezes_its_heap_out_of_the_collectors_scans(tmp_path):
    """The objects alive once the model is loaded (torch, the model, the index) are frozen, so a
    full collection inside a later request does not walk them all again."""
    root = tmp_path / "ws"
    root.mkdir()
    (root / "a.py").write_text("def a():\n    return 1\n")
    session = await Session.start_fake(root, {"text": "42"})
    try:
        await session.wait_ready()
        collector = (await session.stats())["gc"]
    finally:
        assert await session.stop() == 0
    assert collector["frozen"] > 10_000, collector
    assert len(collector["collections"]) == 3


def test_index_progress_reaches_the_loop_at_most_once_per_interval_and_always_at_the_end():
    """A snapshot restart adopts hundreds of files in a few ms each: one report per file woke the
    event loop and sent two notifications each, beside the model's import."""
    now = [0.0]
    seen: list[int] = []
    report = throttled(lambda done, total, item: seen.append(done), 0.1, clock=lambda: now[0])
    for done in range(1, 101):
        now[0] = done * 0.004  # a file every 4 ms: 0.4 s in all
        report(done, 100, f"f{done}.py")
    assert seen[0] == 1 and seen[-1] == 100
    assert all(b - a >= 25 for a, b in zip(seen, seen[1:-1]))  # 25 files = 0.1 s apart
    assert len(seen) == 5


async def test_diagnostics_wait_for_a_completion_being_answered(tmp_path):
    """An edit's analysis falls due while a slow completion runs: its diagnostics come after the
    completion's answer (both are Python on one interpreter lock; the user waits for the answer)."""
    session = await Session.start_fake(tmp_path, {"text": "value + 1", "step_s": 0.15}, {"diagnosticsDebounceMs": 100, "debounceMs": 0})
    try:
        await session.wait_ready()
        uri = session.create("held.py", "x = 1\nresult = \n")
        session.change(uri, "print(undefined_thing)\n", start=(0, 0))
        answer = await session.inline(uri, 2, 9)
        answered = len(session.notifications)
        assert [item.insert_text for item in answer.items] == ["value + 1"]
        await session.wait_for(
            lambda: any(p.uri == uri and p.version == 2 for p in session.messages("textDocument/publishDiagnostics")), what="diagnostics"
        )
        published = [i for i, (m, p) in enumerate(session.notifications) if m == "textDocument/publishDiagnostics" and p.version == 2]
        assert published and min(published) >= answered
    finally:
        assert await session.stop() == 0

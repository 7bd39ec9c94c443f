"""EngineClient: the asyncio <-> engine-thread bridge, driven against the scripted fake engine."""

from __future__ import annotations

import asyncio
import os
import threading

import pytest

from lsp_server.engine_client import EngineClient, ModelHandle, ModelState, RuntimeOptions, load_text
from lsp_server.errors import GenerationFailed, ModelUnavailable
from model_runtime.api import FinishReason, GenerationRequest, GenerationResult, SamplingParams, WarmupReport

from lsp_fakes import FakeEngine, byte_tokenizer


def make_client(script=lambda r: "hello world", step_s=0.0):
    tok = byte_tokenizer()
    engine = FakeEngine(tok, script, step_s=step_s)
    loads = []

    def loader(path, runtime):
        loads.append((path, runtime))
        return ModelHandle(engine, tok, path, 4096)

    return EngineClient(loader), engine, loads


def request(rid="r1", max_tokens=64):
    return GenerationRequest(rid, (1, 2, 3), SamplingParams(max_tokens=max_tokens))


async def test_generate_streams_on_the_loop_thread_and_returns_the_result():
    client, engine, _ = make_client()
    await client.load("ckpt")
    seen: list[tuple[str, str]] = []
    result = await client.generate(request(), lambda text: seen.append((threading.current_thread().name, text)))
    assert result.text == "hello world"
    assert result.finish_reason is FinishReason.STOP
    assert seen[-1][1] == "hello world"
    assert {name for name, _ in seen} == {threading.current_thread().name}
    assert [t for _, t in seen] == sorted((t for _, t in seen), key=len)
    engine.shutdown()


async def test_cancelling_the_caller_aborts_the_engine_between_steps():
    client, engine, _ = make_client(script=lambda r: "x" * 500, step_s=0.002)
    await client.load("ckpt")
    first = asyncio.Event()
    task = asyncio.ensure_future(client.generate(request(max_tokens=500), lambda _: first.set()))
    await first.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    for _ in range(200):
        if engine.stats().requests_aborted:
            break
        await asyncio.sleep(0.01)
    stats = engine.stats()
    assert stats.requests_aborted == 1 and stats.requests_finished == 0
    assert stats.decode_steps < 500
    engine.shutdown()


async def test_concurrent_loads_share_one_load_and_state_follows():
    client, engine, loads = make_client()
    assert client.state is ModelState.UNLOADED
    runtime = RuntimeOptions("cpu", "bfloat16")
    a, b = await asyncio.gather(client.load("ckpt", runtime), client.load("ckpt", runtime))
    assert a is b and loads == [("ckpt", runtime)]
    assert client.state is ModelState.READY and client.stats() is not None
    engine.shutdown()


async def test_ready_without_a_model_is_a_clear_error():
    client, engine, _ = make_client()
    with pytest.raises(ModelUnavailable, match="no model"):
        await client.ready()
    engine.shutdown()


async def test_a_failing_loader_reports_the_path_and_cause():
    def loader(path, runtime):
        raise FileNotFoundError(f"{path}/config.json: missing")

    client = EngineClient(loader)
    with pytest.raises(ModelUnavailable, match="cannot load model from /nope.*config.json"):
        await client.load("/nope")
    assert client.state is ModelState.FAILED
    with pytest.raises(ModelUnavailable, match="cannot load model"):
        await client.ready()


async def test_engine_error_and_rejected_submit_become_generation_failed():
    client, engine, _ = make_client()
    await client.load("ckpt")
    with pytest.raises(GenerationFailed, match="empty prompt"):
        await client.generate(GenerationRequest("r", ()))

    class FailingEngine(FakeEngine):
        def submit(self, req, on_event, on_done):
            on_done(GenerationResult(req.request_id, (), "", FinishReason.ERROR, error="out of KV blocks"))

    failing = FailingEngine(engine.tokenizer, lambda r: "")
    client2 = EngineClient(lambda p, d: ModelHandle(failing, engine.tokenizer, p, 4096))
    await client2.load("ckpt")
    with pytest.raises(GenerationFailed, match="out of KV blocks"):
        await client2.generate(request())
    engine.shutdown()
    failing.shutdown()


async def test_warmup_reports_progress_on_the_loop():
    client, engine, _ = make_client()
    await client.load("ckpt")
    progress: list[float] = []
    report = await client.warmup(["def f():\n    pass\n", "x = 1\n"], lambda f, m: progress.append(f))
    await asyncio.sleep(0)
    assert report.forwards == 2
    assert progress == [0.5, 1.0]
    engine.shutdown()


@pytest.mark.parametrize(
    ("runtime", "dtype"),
    [(RuntimeOptions("cpu"), "float32"), (RuntimeOptions("cuda:1"), "bfloat16"), (RuntimeOptions("cpu", "bfloat16"), "bfloat16"),
     (RuntimeOptions("cuda", "float32"), "float32")],
)
def test_auto_dtype_is_exact_on_the_cpu_and_bfloat16_elsewhere(runtime, dtype):
    assert runtime.resolved_dtype() == dtype


def test_the_runtime_loads_the_weights_in_the_runtimes_dtype(tmp_path):
    import torch

    from lsp_server.engine_client import load_runtime
    from model_runtime.testing import make_tiny_checkpoint

    make_tiny_checkpoint(tmp_path)
    for name, dtype in (("bfloat16", torch.bfloat16), ("auto", torch.float32)):
        handle = load_runtime(str(tmp_path), RuntimeOptions("cpu", name))
        try:
            assert handle.engine.loaded.dtype == dtype and handle.engine.loaded.model.embed_tokens.weight.dtype == dtype
        finally:
            handle.engine.shutdown()


def test_mtp_option_reaches_the_engine_and_needs_an_mtp_layer(tmp_path):
    from lsp_server.engine_client import load_runtime
    from model_runtime.config import ModelConfig
    from model_runtime.testing import make_tiny_checkpoint

    make_tiny_checkpoint(tmp_path / "with")
    handle = load_runtime(str(tmp_path / "with"), RuntimeOptions("cpu", "auto", mtp=True))
    try:
        assert handle.engine.config.use_mtp
    finally:
        handle.engine.shutdown()
    make_tiny_checkpoint(tmp_path / "without", ModelConfig.tiny(num_nextn_predict_layers=0))
    with pytest.raises(ValueError, match="MTP layer"):
        load_runtime(str(tmp_path / "without"), RuntimeOptions("cpu", "auto", mtp=True))


def test_compile_decode_option_starts_compiling_with_its_cache_under_the_cache_root(tmp_path, monkeypatch):
    from lsp_server.engine_client import load_runtime
    from model_runtime.compiled import CompiledDecode
    from model_runtime.testing import make_tiny_checkpoint

    started = []
    monkeypatch.setattr(CompiledDecode, "start", lambda self: started.append(self))  # no real compile here
    monkeypatch.setenv("GLM5_LSP_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)
    make_tiny_checkpoint(tmp_path / "model")
    handle = load_runtime(str(tmp_path / "model"), RuntimeOptions("cpu", compile_decode=True))
    try:
        assert handle.engine.config.compile_decode
        assert handle.engine.config.compile_cache_dir == str(tmp_path / "cache" / "inductor")
        assert started == [handle.engine.runner.compiled]
        assert handle.engine.stats().compiled_decode == "compiling"
    finally:
        handle.engine.shutdown()
        os.environ.pop("TORCHINDUCTOR_CACHE_DIR", None)  # set for inductor by CompiledDecode


async def _until(predicate, what: str) -> None:
    for _ in range(1000):
        if predicate():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"timed out waiting for {what}")


async def test_a_request_aborted_while_the_model_loads_never_reaches_the_engine():
    tok = byte_tokenizer()
    engine = FakeEngine(tok, lambda r: "x" * 200, step_s=0.001)
    release = threading.Event()

    def loader(path, runtime):
        release.wait(10)
        return ModelHandle(engine, tok, path, 4096)

    client = EngineClient(loader)
    client.start_loading(lambda: "ckpt")
    task = asyncio.ensure_future(client.generate(request("typed-during-load", max_tokens=200)))
    await asyncio.sleep(0.05)
    client.abort("typed-during-load")  # the flight was dropped: the user typed on
    release.set()
    result = await asyncio.wait_for(task, 10)
    assert result.finish_reason is FinishReason.ABORT and result.token_ids == ()
    assert engine.stats().requests_submitted == 0
    engine.shutdown()


async def test_a_request_aborted_during_warm_up_does_not_generate_in_full():
    client, engine, _ = make_client(script=lambda r: "x" * 300, step_s=0.002)
    await client.load("ckpt")
    release = threading.Event()
    warmed: list[str] = []

    def slow_warmup(texts, progress=None, hold=None):
        release.wait(10)
        warmed.extend(texts)
        return WarmupReport(len(texts), 0, 0, 0, 0.0)

    engine.warmup = slow_warmup
    warm = asyncio.ensure_future(client.warmup(["def f(): pass\n"]))
    await asyncio.sleep(0.05)
    task = asyncio.ensure_future(client.generate(request("keystroke", max_tokens=300)))
    await asyncio.sleep(0.05)
    client.abort("keystroke")
    result = await asyncio.wait_for(task, 10)
    release.set()
    await warm
    assert result.finish_reason is FinishReason.ABORT
    assert len(result.token_ids) < 300 and engine.stats().generated_tokens < 300
    engine.shutdown()


class _FailingEngine(FakeEngine):
    """Recovers from an engine-thread exception on the first `failures` requests (each fails
    with the supervisor's error and counts a restart), then generates normally; `-1` in a
    request id fails only that request, without a restart (a request-level failure)."""

    def __init__(self, tokenizer, failures: int) -> None:
        super().__init__(tokenizer, lambda r: "ok")
        self.failures = failures

    def submit(self, request, on_event, on_done) -> None:
        if request.request_id.endswith("-1") or self.failures > 0:
            restarted = not request.request_id.endswith("-1")
            with self._lock:
                self._stats["engine_restarts"] += restarted
            self.failures -= restarted
            message = "engine error: RuntimeError: boom" if restarted else "bookkeeping failed"
            on_done(GenerationResult(request.request_id, (), "", FinishReason.ERROR, len(request.prompt_ids), error=message))
            return
        super().submit(request, on_event, on_done)


async def test_repeated_engine_failures_are_reported_once_and_recovery_once():
    from lsp_server.health import EngineHealth

    tok = byte_tokenizer()
    engine = _FailingEngine(tok, failures=3)
    changes: list[tuple[bool, str]] = []
    client = EngineClient(lambda path, runtime: ModelHandle(engine, tok, path, 4096), EngineHealth(lambda ok, m: changes.append((ok, m))))
    await client.load("ckpt")
    for rid in ("a-1", "b-1", "c-1", "d", "e"):  # three request-level failures (no restart), two engine failures
        with pytest.raises(GenerationFailed):
            await client.generate(request(rid))
    assert changes == []
    with pytest.raises(GenerationFailed):
        await client.generate(request("f"))  # the third engine failure within the window
    assert [ok for ok, _ in changes] == [False] and "failed 3 times" in changes[0][1] and "boom" in changes[0][1]
    result = await client.generate(request("g"))
    assert result.text == "ok" and [ok for ok, _ in changes] == [False, True]
    await client.generate(request("h"))
    assert len(changes) == 2
    engine.shutdown()


def test_engine_failures_outside_the_window_do_not_add_up():
    from lsp_server.health import EngineHealth

    now = [0.0]
    changes: list[bool] = []
    health = EngineHealth(lambda ok, m: changes.append(ok), limit=3, window_s=60.0, clock=lambda: now[0])
    for restarts in (1, 2):
        health.failed(restarts, "boom")
    now[0] = 61.0
    health.failed(3, "boom")
    assert changes == [] and not health.failing
    health.failed(3, "a request-level failure: the count did not move")
    now[0] = 62.0
    health.failed(5, "two recoveries at once")
    assert changes == [False] and health.failing


THREADS_PROGRAM = """
import os, sys, torch
from lsp_server.engine_client import RuntimeOptions, load_runtime
seen = []
for threads in (3, 0):
    handle = load_runtime(sys.argv[1], RuntimeOptions("cpu", threads=threads))
    seen.append(handle.engine.call(torch.get_num_threads))  # on the engine thread, which does the model's work
    handle.engine.shutdown()
print(seen[0], seen[1], len(os.sched_getaffinity(0)))
"""


def test_the_runtime_threads_setting_reaches_the_engine_thread(tmp_path):
    """`threads` sets the engine thread's intra-op threads; 0 (auto) leaves one core free (in a
    subprocess: the setting is process-wide)."""
    import subprocess
    import sys

    from model_runtime.testing import make_tiny_checkpoint

    make_tiny_checkpoint(tmp_path)
    done = subprocess.run([sys.executable, "-c", THREADS_PROGRAM, str(tmp_path)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    explicit, auto, cores = map(int, done.stdout.split())
    assert explicit == 3 and auto == max(1, cores - 1)


def _blocked_loader(release: threading.Event):
    tok = byte_tokenizer()
    engine = FakeEngine(tok, lambda r: "x")

    def loader(path, runtime):
        assert release.wait(10), "the test never released the load"
        return ModelHandle(engine, tok, path, 4096)

    return loader


async def test_text_ready_gives_the_checkpoints_tokenizer_while_its_weights_still_load(tmp_path):
    """During start-up (torch importing, weights mapping) a completion can already build its
    prompt: `text_ready` answers from the checkpoint's tokenizer.json and config.json while the
    loader is still blocked, and encodes as the checkpoint's tokenizer does."""
    from model_runtime.config import ModelConfig
    from model_runtime.testing import make_tiny_checkpoint
    from model_runtime.tokenizer import GlmTokenizer

    cfg = ModelConfig.tiny().replace(max_position_embeddings=777)
    ckpt = make_tiny_checkpoint(tmp_path / "ckpt", cfg)
    release = threading.Event()
    client = EngineClient(_blocked_loader(release), text_loader=load_text)
    loading = client.start_loading(lambda: str(ckpt))
    try:
        text = await asyncio.wait_for(client.text_ready(), 10)
        assert client.handle is None and not loading.done()
        assert text.context_length == 777 and text.can_score
        source = "def centroid(points):\n    return sum(points) / len(points)\n"
        assert text.tokenizer.encode(source) == GlmTokenizer.from_dir(ckpt).encode(source)
    finally:
        release.set()
    await loading
    assert (await client.text_ready()).context_length == 4096  # from the loaded handle from now on


async def test_text_ready_waits_for_the_model_without_a_readable_tokenizer_and_fails_with_it():
    release = threading.Event()
    client = EngineClient(_blocked_loader(release), text_loader=load_text)
    client.start_loading(lambda: "no-such-checkpoint")
    waiting = asyncio.ensure_future(client.text_ready())
    await asyncio.sleep(0.2)
    assert not waiting.done()
    release.set()
    assert (await asyncio.wait_for(waiting, 10)).context_length == 4096

    def failing(path, runtime):
        raise OSError("disk gone")

    broken = EngineClient(failing)
    broken.start_loading(lambda: "no-such-checkpoint")
    with pytest.raises(ModelUnavailable, match="disk gone"):
        await broken.text_ready()

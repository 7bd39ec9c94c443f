"""The engine thread under faults: warm-up through the scheduler, stop, and supervision.

A tiny random GLM-5 checkpoint (built once for the module); every wait here is bounded, so a
hang shows up as a failed assertion, not a stuck suite.
"""

from __future__ import annotations

import threading
import time

import pytest

from model_runtime.api import FinishReason, GenerationRequest, GenerationResult, SamplingParams

WAIT = 30.0


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from model_runtime import load_model
    from model_runtime.testing import make_tiny_checkpoint

    return load_model(make_tiny_checkpoint(tmp_path_factory.mktemp("supervision-tiny")))


@pytest.fixture
def engine(tiny):
    engine = tiny.engine()
    yield engine
    engine.shutdown()


class Outcome:
    """Collects one request's `on_done` and lets a test wait for it (bounded)."""

    def __init__(self) -> None:
        self.results: list[GenerationResult] = []
        self.done = threading.Event()

    def __call__(self, result: GenerationResult) -> None:
        self.results.append(result)
        self.done.set()

    def wait(self) -> GenerationResult:
        assert self.done.wait(WAIT), "on_done was never called"
        assert len(self.results) == 1
        return self.results[0]


def request(rid: str, max_tokens: int = 4, n: int = 12) -> GenerationRequest:
    return GenerationRequest(rid, tuple(range(20, 20 + n)), SamplingParams(max_tokens=max_tokens))


def test_warm_up_runs_as_low_priority_requests_and_a_user_request_goes_first(engine):
    texts = [f"def f{i}(x):\n    return x + {i}\n" for i in range(40)]
    user = Outcome()
    warmed: list[float] = []
    user_done_after: list[int] = []  # warm-up prompts finished when the user request ended

    def on_user_done(result: GenerationResult) -> None:
        user_done_after.append(len(warmed))
        user(result)

    def progress(fraction: float, _message: str) -> None:
        if not warmed:
            engine.submit(request("user"), None, on_user_done)
        warmed.append(fraction)

    report = engine.warmup(texts, progress)
    assert report.forwards >= 1 and report.experts_hit > 0
    assert user.wait().finish_reason in (FinishReason.LENGTH, FinishReason.STOP)
    assert user_done_after[0] <= 3 < len(texts)  # it did not wait for the rest of the warm-up
    assert engine.stats().requests_finished == len(warmed) + 1 and not engine.scheduler.has_work


def test_stop_finishes_every_sequence_as_aborted_and_fails_every_pending_call(tiny):
    from model_runtime.engine import EngineStopped

    engine = tiny.engine()
    long = Outcome()
    engine.submit(request("long", max_tokens=400), None, long)
    while not engine.stats().generated_tokens:  # "long" is decoding
        time.sleep(0.01)
    gate, held = threading.Event(), threading.Event()
    holder = threading.Thread(target=lambda: engine.call(lambda: (held.set(), gate.wait(WAIT))))
    holder.start()
    assert held.wait(WAIT), "the engine thread never ran the call"
    prefilled: list[object] = []
    worker = threading.Thread(target=lambda: prefilled.append(_outcome(lambda: engine.prefill(list(range(30, 200))))))
    worker.start()  # the prefill waits: the engine thread is held until the stop begins
    while engine._commands.empty():
        time.sleep(0.01)
    stopper = threading.Thread(target=engine.shutdown)
    stopper.start()
    while not engine._stopping:
        time.sleep(0.01)
    gate.set()
    stopper.join(WAIT)
    holder.join(WAIT)
    worker.join(WAIT)
    assert not worker.is_alive(), "a prefill waiting during shutdown never returned"
    assert long.wait().finish_reason is FinishReason.ABORT
    assert prefilled and (isinstance(prefilled[0], EngineStopped) or prefilled[0].finish_reason is FinishReason.ABORT)
    late = Outcome()
    engine.submit(request("late"), None, late)
    assert late.wait().finish_reason is FinishReason.ABORT and "stopped" in (late.results[0].error or "")
    with pytest.raises(EngineStopped):
        engine.call(lambda: 1)
    assert _blocks_in_use(engine) == 0


def _blocks_in_use(engine) -> int:
    return sum(block.ref_count > 0 for block in engine.blocks.blocks)


def _outcome(fn):
    try:
        return fn()
    except Exception as exc:  # the test inspects it
        return exc


def test_an_exception_in_scheduling_fails_the_requests_and_the_engine_goes_on(engine, monkeypatch):
    real = engine.scheduler.schedule
    calls = {"n": 0}

    def flaky():
        calls["n"] += 1
        if calls["n"] == 1:
            raise IndexError("corrupt queue")
        return real()

    monkeypatch.setattr(engine.scheduler, "schedule", flaky)
    first = Outcome()
    engine.submit(request("first", max_tokens=8), None, first)
    result = first.wait()
    assert result.finish_reason is FinishReason.ERROR and "IndexError: corrupt queue" in result.error
    second = Outcome()
    engine.submit(request("second"), None, second)
    assert second.wait().finish_reason in (FinishReason.LENGTH, FinishReason.STOP)
    assert engine.stats().engine_restarts == 1


def test_an_exception_in_token_bookkeeping_fails_the_request_not_the_thread(engine, monkeypatch):
    real = engine._after_tokens

    def broken(seq):
        if seq.request_id == "victim":
            raise KeyError("text state")
        return real(seq)

    monkeypatch.setattr(engine, "_after_tokens", broken)
    victim, bystander = Outcome(), Outcome()
    engine.submit(request("victim", max_tokens=8), None, victim)
    assert victim.wait().finish_reason is FinishReason.ERROR
    engine.submit(request("bystander"), None, bystander)
    assert bystander.wait().finish_reason in (FinishReason.LENGTH, FinishReason.STOP)
    assert _blocks_in_use(engine) == 0 and not engine.scheduler.has_work

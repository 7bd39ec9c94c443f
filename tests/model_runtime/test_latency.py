"""Stopping early: the decode budget (with an instrumented engine clock) and the confidence cut."""

from __future__ import annotations

import pytest
import torch

from model_runtime import load_model
from model_runtime.api import FinishReason, GenerationRequest, SamplingParams
from model_runtime.config import EngineConfig
from model_runtime.engine import Engine
from model_runtime.latency import confidence_collapsed
from model_runtime.testing import make_tiny_checkpoint

STEP_S = 0.010  # what every model step costs on the instrumented clock


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return load_model(make_tiny_checkpoint(tmp_path_factory.mktemp("latency")))


def run_with_clock(loaded, sampling: SamplingParams):
    """One request on an engine whose clock advances STEP_S per model step (never wall time)."""
    engine = Engine(loaded, EngineConfig(block_size=16, max_cache_tokens=512))
    now = [100.0]
    run = engine.runner.run

    def timed_run(feeds, *rest):
        now[0] += STEP_S
        return run(feeds, *rest)

    engine.runner.run = timed_run
    engine.clock = lambda: now[0]
    done = []
    prompt = tuple(range(3, 40))
    engine.add(GenerationRequest("r", prompt, sampling), None, done.append)
    engine.run_until_idle()
    return done[0]


@pytest.mark.parametrize("budget_ms", [5.0, 25.0, 55.0, 62.0])
def test_a_budget_bounded_request_ends_within_its_budget(tiny, budget_ms):
    """No step starts that would end past the budget, as long as the last step took; only a
    budget shorter than one step is passed, by that one step."""
    eos_free = SamplingParams(max_tokens=40, stop_token_ids=())
    unbounded = run_with_clock(tiny, eos_free)
    bounded = run_with_clock(tiny, SamplingParams(max_tokens=40, max_decode_ms=budget_ms))
    assert len(unbounded.token_ids) > len(bounded.token_ids), "the tiny model ended before any budget"
    decode_ms = bounded.decode_steps * STEP_S * 1000  # time from the first token to the last
    step_ms = STEP_S * 1000
    assert decode_ms == step_ms if budget_ms < step_ms else budget_ms - step_ms < decode_ms <= budget_ms + 1e-6
    assert bounded.finish_reason is FinishReason.LENGTH
    assert bounded.token_ids == unbounded.token_ids[: len(bounded.token_ids)]  # a prefix of the same greedy text


def test_confidence_only_cuts_after_a_complete_line():
    logits = torch.tensor([0.0, 0.0, 4.0, 0.0])  # token 2 has p ~ 0.95, the others ~ 0.017
    sampling = SamplingParams(min_confidence=0.1)
    assert confidence_collapsed(sampling, "x = 1\n    ", logits, 0)
    assert not confidence_collapsed(sampling, "x = 1\n    ", logits, 2)
    assert not confidence_collapsed(sampling, "x = 1", logits, 0)  # the first line always completes
    assert not confidence_collapsed(sampling, "\n", logits, 0)  # a leading newline is not a line
    assert not confidence_collapsed(SamplingParams(), "x = 1\n", logits, 0)  # off by default


def test_the_warm_up_pauses_while_a_completion_waits(tiny):
    engine = Engine(tiny, EngineConfig(block_size=16, max_cache_tokens=1024)).start()
    try:
        order: list[str] = []
        engine.submit(GenerationRequest("user", tuple(range(3, 60)), SamplingParams(max_tokens=12, stop_token_ids=())), None,
                      lambda r: order.append(f"user {r.finish_reason.value}"))
        report = engine.warmup(["def f(x):\n    return x\n"] * 3, lambda f, m: order.append("warm-up"))  # queued behind
        assert order[0] in ("user length", "user stop") and order[1:] == ["warm-up"] * 3
        assert report.forwards >= 3  # paused, not abandoned
    finally:
        engine.shutdown()


def test_the_warm_up_starts_nothing_while_its_caller_holds_it(tiny):
    engine = Engine(tiny, EngineConfig(block_size=16, max_cache_tokens=1024)).start()
    try:
        submitted_while_held: list[int] = []

        def hold() -> bool:  # held for its first 5 looks (a language server's completion building its prompt)
            submitted_while_held.append(engine.stats().requests_submitted)
            return len(submitted_while_held) <= 5

        report = engine.warmup(["def f(x):\n    return x\n"] * 2, None, hold)
        assert submitted_while_held[:5] == [0] * 5  # nothing ran while held
        assert len(submitted_while_held) > 5  # let go, then looked again before each later prompt
        assert report.forwards >= 2 and engine.stats().requests_submitted >= 2
    finally:
        engine.shutdown()

"""Engine.score beside the decode: its forward runs on the caller's thread while the engine thread
keeps stepping, over blocks the engine thread took and gets back; `max_prefill` leaves an
uncached prompt alone."""

from __future__ import annotations

import threading

import pytest

from model_runtime.api import GenerationRequest, PromptNotCached, SamplingParams, ScoreRequest
from model_runtime.config import EngineConfig
from model_runtime import engine as engine_module
from model_runtime.engine import Engine

CFG = EngineConfig(block_size=16, max_cache_tokens=2048)
PROMPT = tuple(range(7, 7 + 49))  # three full blocks and the last token: all but it cacheable
CONTINUATIONS = ((11, 12, 13), (40,), (11, 12, 99, 100))


def assert_all_blocks_free(engine: Engine) -> None:
    engine.call(lambda: None)  # the release is queued after the take: let the engine thread run it
    assert all(b.ref_count == 0 for b in engine.blocks.blocks)
    assert engine.blocks.num_free == engine.blocks.num_device


def _scores_on_an_idle_engine(tiny, prompt: tuple[int, ...]):
    return Engine(tiny, CFG).score(ScoreRequest("idle", prompt, CONTINUATIONS))


def test_a_score_runs_on_the_callers_thread_while_the_engine_thread_decodes(tiny):
    engine = Engine(tiny, CFG).start()
    try:
        engine.prefill(PROMPT)
        runs: list[tuple[str, int]] = []
        stepped = threading.Event()
        run = engine.runner.run

        def watched(feeds, *rest):
            if threading.current_thread() is threading.main_thread():
                stepped.clear()
                assert stepped.wait(10), "the engine thread made no step while the score's forward ran"
            else:
                stepped.set()
            runs.append((threading.current_thread().name, len(feeds)))
            return run(feeds, *rest)

        engine.runner.run = watched
        engine.eos_ids = frozenset()
        done = threading.Event()
        engine.submit(GenerationRequest("long", tuple(range(60, 90)), SamplingParams(max_tokens=400)), None, lambda _: done.set())
        request = ScoreRequest("beside", PROMPT, CONTINUATIONS, max_prefill=0)
        got = engine.score(request)
        engine.abort("long")
        assert done.wait(10)
        on_caller = [n for name, n in runs if name == threading.main_thread().name]
        assert on_caller == [len(CONTINUATIONS)]  # the score's one batched forward, nothing prefilled
        assert any(name != threading.main_thread().name for name, _ in runs)
        for beside, idle in zip(got, _scores_on_an_idle_engine(tiny, PROMPT), strict=True):
            assert beside.token_logprobs == pytest.approx(idle.token_logprobs, abs=1e-4)
        assert_all_blocks_free(engine)
    finally:
        engine.shutdown()


def test_max_prefill_refuses_a_prompt_that_is_not_cached_and_takes_nothing(tiny):
    engine = Engine(tiny, CFG)
    forwards, run = [], engine.runner.run
    engine.runner.run = lambda feeds, *rest: forwards.append(feeds) or run(feeds, *rest)
    with pytest.raises(PromptNotCached, match="48 prompt tokens are not cached"):
        engine.score(ScoreRequest("uncached", PROMPT, CONTINUATIONS, max_prefill=16))
    assert forwards == []  # nothing prefilled, nothing scored
    assert_all_blocks_free(engine)


def test_max_prefill_lets_a_score_prefill_a_short_uncached_tail(tiny):
    engine = Engine(tiny, CFG)
    engine.prefill(PROMPT)
    longer = PROMPT + (50, 51, 52, 53, 54)
    prefilled, run = [], engine.runner.run

    def counting(feeds, *rest):
        prefilled.extend(len(f.tokens) for f in feeds if f.logits_from == len(f.tokens))  # chunks without logits
        return run(feeds, *rest)

    engine.runner.run = counting
    got = engine.score(ScoreRequest("tail", longer, CONTINUATIONS, max_prefill=16))
    assert 0 < sum(prefilled) <= len(longer) - 1 - 48  # only (part of) the tail after the cached blocks
    for tail, idle in zip(got, _scores_on_an_idle_engine(tiny, longer), strict=True):
        assert tail.token_logprobs == pytest.approx(idle.token_logprobs, abs=1e-4)
    assert_all_blocks_free(engine)


def test_a_score_that_cannot_take_its_blocks_gives_back_what_it_took(tiny):
    engine = Engine(tiny, EngineConfig(block_size=16, max_cache_tokens=64)).start()
    try:
        with pytest.raises(RuntimeError, match="no room"):
            engine.score(ScoreRequest("big", PROMPT, ((1,) * 30, (2,) * 30)))
        assert_all_blocks_free(engine)
        assert engine.score(ScoreRequest("small", PROMPT[:20], ((3,),)))[0].num_tokens == 1
        assert_all_blocks_free(engine)
    finally:
        engine.shutdown()


def test_max_prefill_must_not_be_negative():
    with pytest.raises(ValueError, match="max_prefill"):
        ScoreRequest("bad", (1,), ((2,),), max_prefill=-1)


def test_only_an_engine_with_a_large_model_has_scores_started_beside_its_decode(tiny, monkeypatch):
    """A small model's steps are mostly the interpreter's, which a second thread's forward would
    contend for: its engine says no, and the server scores after the decode."""
    assert Engine(tiny, CFG).scores_beside_steps is False
    monkeypatch.setattr(engine_module, "BESIDE_MIN_BYTES", 0)
    assert Engine(tiny, CFG).scores_beside_steps is True

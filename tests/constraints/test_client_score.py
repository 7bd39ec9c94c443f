"""EngineClient.score: the asyncio wrapper i11c's reranker calls, over a real engine thread."""

from __future__ import annotations

import asyncio

import pytest

from lsp_server.engine_client import EngineClient, ModelHandle
from lsp_server.errors import GenerationFailed
from model_runtime.api import ContinuationScore, ScoreRequest
from model_runtime.config import EngineConfig
from model_runtime.engine import Engine


class RefusingEngine:
    def __init__(self, error: Exception) -> None:
        self.error = error

    def score(self, request, timeout=30.0):
        raise self.error

    def shutdown(self) -> None:
        pass


async def client_for(engine, tokenizer) -> EngineClient:
    client = EngineClient(lambda path, runtime: ModelHandle(engine, tokenizer, path, 4096))
    await client.load("ckpt")
    return client


async def test_client_score_matches_the_engine(tiny):
    engine = Engine(tiny, EngineConfig(block_size=16, max_cache_tokens=1024)).start()
    try:
        request = ScoreRequest("s", tuple(range(3, 30)), ((4, 5), (6,)))
        client = await client_for(engine, tiny.tokenizer)
        got = await client.score(request)
        assert [s.token_logprobs for s in got] == [s.token_logprobs for s in engine.score(request)]
    finally:
        engine.shutdown()


async def test_client_score_turns_engine_failures_into_generation_failed(tokenizer):
    client = await client_for(RefusingEngine(RuntimeError("cache full")), tokenizer)
    with pytest.raises(GenerationFailed, match="cache full"):
        await client.score(ScoreRequest("s", (1,), ((2,),)))


async def test_client_score_lets_an_engine_without_scoring_say_so(tokenizer):
    client = await client_for(RefusingEngine(NotImplementedError("remote engines do not score")), tokenizer)
    with pytest.raises(NotImplementedError):
        await client.score(ScoreRequest("s", (1,), ((2,),)))


class EngineWithoutScore:
    def shutdown(self) -> None:
        pass


async def test_client_score_on_an_engine_without_the_method_raises_not_implemented(tokenizer):
    client = await client_for(EngineWithoutScore(), tokenizer)
    with pytest.raises(NotImplementedError, match="EngineWithoutScore"):
        await client.score(ScoreRequest("s", (1,), ((2,),)))


class StoreRecordingEngine:
    """Scores nothing in particular, but notes whether the workspace's store was bound first."""

    def __init__(self) -> None:
        self.bound = False
        self.scored_after_binding: list[bool] = []

    def open_workspace(self, roots) -> str:
        self.bound = True
        return "store"

    def score(self, request, timeout=30.0):
        self.scored_after_binding.append(self.bound)
        return [ContinuationScore(-1.0, len(c), (-1.0,) * len(c)) for c in request.continuations]

    def shutdown(self) -> None:
        pass


async def test_client_score_during_start_up_waits_for_the_kv_store(tokenizer):
    """A score must not run before the persisted store is bound: it would prefill a prompt that
    is cached on disk (as `generate` waits, so does `score`)."""
    engine = StoreRecordingEngine()
    client = await client_for(engine, tokenizer)
    client.expect_store()
    scoring = asyncio.ensure_future(client.score(ScoreRequest("s", (1, 2), ((3,),))))
    await asyncio.sleep(0.05)
    assert not scoring.done() and engine.scored_after_binding == []
    await client.open_workspace(["/ws"])
    assert (await scoring)[0].num_tokens == 1
    assert engine.scored_after_binding == [True]

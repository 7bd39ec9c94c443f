"""Scoring continuations of one prompt in one batched forward over its shared KV prefix.

Role: `Engine.score` (for reranking candidates). The prompt's KV comes from the prefix cache
where it can (else it is prefilled in chunks and cached for the completion that follows); every
continuation then gets a table that shares the prompt's full blocks (`BlockManager.fork`) and
all of them run through the model together.

A `Reservation` splits that in three: `take` (the engine thread: the blocks, the prompt's
prefill, the forks), `run` (the batched forward, on any thread: the server's worker thread, so
that a score runs on the spare core beside the engine thread's decode steps) and `release` (the
engine thread). `score_continuations` is all three in a row.

Invariants:
- Continuation i's score is sum_t log p(c_t | prompt, c_<t) under the model's unconstrained
  distribution, equal within float tolerance to scoring it alone.
- The prompt's last token is fed again with each continuation (like a prompt that is fully
  cached), so a shared block is never written. `run` writes only the blocks `take` forked for
  its continuations, which nothing else reads or writes until `release` returns them: the engine
  never moves a block that a table holds.
- Prompt blocks it prefilled are cached for later requests, except with MTP (whose layer's
  cache this path does not fill).
- Every block taken is released, also on error (`take` releases what it took before raising);
  bad ids raise ValueError, a prompt with more than `max_prefill` tokens to prefill PromptNotCached
  (so a score started beside a completion never prefills that completion's prompt a second time).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from model_runtime.api import ContinuationScore, PromptNotCached, ScoreRequest
from model_runtime.cache import CacheFullError
from model_runtime.model_runner import Feed

if TYPE_CHECKING:
    from model_runtime.engine import Engine


def score_continuations(engine: Engine, request: ScoreRequest) -> list[ContinuationScore]:
    """Take, run and release on the calling thread (the engine's, or an engine without one)."""
    held = Reservation(request)
    held.take(engine)
    try:
        return held.run(engine)
    finally:
        held.release(engine)


class Reservation:
    """The blocks and feeds of one score request, from `take` until `release`."""

    def __init__(self, request: ScoreRequest) -> None:
        self.request = request
        self.tables: list[list[int]] = []
        self.feeds: list[Feed] = []
        self.order: list[int] = []  # the continuation each feed scores

    def take(self, engine: Engine) -> None:
        """Engine thread: validate, reuse or prefill the prompt's blocks and fork one table per
        continuation; on error, release whatever was taken and raise."""
        request = self.request
        _validate(engine, request)
        prompt, blocks = list(request.prompt_ids), engine.blocks
        try:
            alloc = blocks.allocate(prompt, reuse=engine.config.prefix_caching)
            self.tables.append(alloc.block_table)
            missing = len(prompt) - 1 - alloc.cached_tokens
            if request.max_prefill is not None and missing > request.max_prefill:
                raise PromptNotCached(
                    f"score {request.request_id}: {missing} prompt tokens are not cached (at most {request.max_prefill} may be prefilled)"
                )
            _prefill(engine, prompt, alloc.block_table, alloc.hashes, alloc.cached_tokens)
            for i, cont in enumerate(request.continuations):
                if not cont:
                    continue
                table = blocks.fork(alloc.block_table, len(prompt) - 1)
                self.tables.append(table)
                blocks.append_slot(table, len(prompt) + len(cont) - 1)
                self.feeds.append(Feed(len(prompt) - 1, [prompt[-1], *cont[:-1]], table, 0))
                self.order.append(i)
        except CacheFullError as exc:
            self.release(engine)
            raise RuntimeError(f"score {request.request_id}: the KV cache has no room ({exc})") from exc
        except BaseException:
            self.release(engine)
            raise

    def run(self, engine: Engine) -> list[ContinuationScore]:
        """Any thread: the batched forward over the taken blocks, and each continuation's score."""
        continuations = self.request.continuations
        scores = [ContinuationScore(0.0, 0, ()) for _ in continuations]
        if self.feeds:
            out = engine.runner.run(self.feeds)
            for i, logits in zip(self.order, out.logits):
                cont = torch.tensor(continuations[i])
                rows = logits.float().log_softmax(-1)[torch.arange(len(cont)), cont].tolist()
                scores[i] = ContinuationScore(float(sum(rows)), len(rows), tuple(rows))
        return scores

    def release(self, engine: Engine) -> None:
        """Engine thread: give every taken block back (idempotent)."""
        tables, self.tables, self.feeds = self.tables, [], []
        for table in tables:
            engine.blocks.release(table)


def _prefill(engine: Engine, prompt: list[int], table: list[int], hashes: list[bytes], computed: int) -> None:
    """Fill the KV of every prompt token but the last, in chunks, and cache its full blocks."""
    while computed < len(prompt) - 1:
        n = min(len(prompt) - 1 - computed, engine.config.max_prefill_tokens)
        engine.blocks.append_slot(table, computed + n)
        engine.runner.run([Feed(computed, prompt[computed : computed + n], table, n)])
        computed += n
        if not engine.config.use_mtp:  # the MTP layer's cache is not filled here: keep such blocks private
            engine.blocks.seal_full_blocks(table, prompt[:computed], hashes)


def _validate(engine: Engine, request: ScoreRequest) -> None:
    cfg = engine.loaded.config
    longest = max((len(c) for c in request.continuations), default=0)
    if len(request.prompt_ids) + longest > cfg.max_position_embeddings:
        raise ValueError(f"score {request.request_id}: prompt + continuation exceed the model's {cfg.max_position_embeddings} positions")
    for ids in (request.prompt_ids, *request.continuations):
        bad = [t for t in ids if not 0 <= t < cfg.vocab_size]
        if bad:
            raise ValueError(f"score {request.request_id}: token id {bad[0]} is outside the vocabulary (0..{cfg.vocab_size - 1})")

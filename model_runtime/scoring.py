"""Scoring continuations of one prompt in one batched forward over its shared KV prefix.

Role: `Engine.score` (for reranking candidates) runs `score_continuations` on the engine thread.
The prompt's KV comes from the prefix cache where it can (else it is prefilled in chunks and
cached for the completion that follows); every continuation then gets a table that shares the
prompt's full blocks (`BlockManager.fork`) and all of them run through the model together.

Invariants:
- Continuation i's score is sum_t log p(c_t | prompt, c_<t) under the model's unconstrained
  distribution, equal within float tolerance to scoring it alone.
- The prompt's last token is fed again with each continuation (like a prompt that is fully
  cached), so a shared block is never written.
- Prompt blocks it prefilled are cached for later requests, except with MTP (whose layer's
  cache this path does not fill).
- Every block taken is released before returning, also on error; bad ids raise ValueError.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from model_runtime.api import ContinuationScore, ScoreRequest
from model_runtime.cache import CacheFullError
from model_runtime.model_runner import Feed

if TYPE_CHECKING:
    from model_runtime.engine import Engine


def score_continuations(engine: Engine, request: ScoreRequest) -> list[ContinuationScore]:
    _validate(engine, request)
    prompt, blocks = list(request.prompt_ids), engine.blocks
    tables: list[list[int]] = []
    try:
        alloc = blocks.allocate(prompt, reuse=engine.config.prefix_caching)
        tables.append(alloc.block_table)
        _prefill(engine, prompt, alloc.block_table, alloc.hashes, alloc.cached_tokens)
        feeds, order = [], []
        for i, cont in enumerate(request.continuations):
            if not cont:
                continue
            table = blocks.fork(alloc.block_table, len(prompt) - 1)
            tables.append(table)
            blocks.append_slot(table, len(prompt) + len(cont) - 1)
            feeds.append(Feed(len(prompt) - 1, [prompt[-1], *cont[:-1]], table, 0))
            order.append(i)
        scores = [ContinuationScore(0.0, 0, ()) for _ in request.continuations]
        if feeds:
            out = engine.runner.run(feeds)
            for i, logits in zip(order, out.logits):
                cont = torch.tensor(request.continuations[i])
                rows = logits.float().log_softmax(-1)[torch.arange(len(cont)), cont].tolist()
                scores[i] = ContinuationScore(float(sum(rows)), len(rows), tuple(rows))
        return scores
    except CacheFullError as exc:
        raise RuntimeError(f"score {request.request_id}: the KV cache has no room ({exc})") from exc
    finally:
        for table in tables:
            blocks.release(table)


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

"""Router warm-up: run representative text through every code path before the first completion.

Role: page in the (memory-mapped) weights of the experts the workspace's code actually routes
to, exercise the dense and sparse attention paths, the indexer, the absorbed decode path and
the MTP layer, and leave the shared context in the prefix cache.

Invariant: ordinary low-priority requests through the scheduler (so it warms exactly what
completions use): user requests submitted meanwhile are admitted first and their aborts are
handled as always; the router observers are added and removed on the engine thread. Experts picked
for user requests during warm-up count as hit too (they are warm as well). No new warm-up prompt
starts while a user's request (priority >= 0) is waiting or running: the warm-up pauses, so the
user's completion neither shares its steps nor waits behind a warm-up prefill. The caller's
`hold` extends that to requests the engine cannot see yet (a language server's completion that is
still building its prompt): while it returns true, no warm-up prompt starts either.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from model_runtime.api import GenerationRequest, ProgressCallback, SamplingParams, WarmupReport
from model_runtime.model import Gate

PAUSE_S = 0.02  # how often a paused warm-up looks again for users' requests

if TYPE_CHECKING:
    from model_runtime.engine import Engine


def warmup_prompts(engine: Engine, texts: list[str]) -> list[list[int]]:
    """Token prompts: each text (capped), plus one longer than index_topk so the sparse path runs."""
    tok = engine.loaded.tokenizer
    cfg = engine.loaded.config
    if tok is None:
        raise ValueError("warm-up needs a tokenizer, and this checkpoint has none")
    cap = min(cfg.max_position_embeddings - 8, engine.config.max_cache_tokens // 2)
    prompts = [ids[:cap] for ids in tok.encode_batch([t for t in texts if t.strip()]) if ids]
    joined = [t for p in prompts for t in p]
    if joined and cfg.index_topk + 16 <= cap and not any(len(p) > cfg.index_topk for p in prompts):
        long = (joined * (cfg.index_topk // len(joined) + 2))[: cfg.index_topk + 16]
        prompts.append(long)
    return prompts


def run_warmup(
    engine: Engine, texts: list[str], progress: ProgressCallback | None, hold: Callable[[], bool] | None = None
) -> WarmupReport:
    """Run each warm-up prompt as a low-priority request (from the caller's thread, waiting for
    each with `engine.run`), counting the experts the routers pick meanwhile; each waits while
    `hold()` is true or a user's request is in the engine."""
    prompts = warmup_prompts(engine, texts)
    start = time.perf_counter()
    gates = [m for m in engine.loaded.model.modules() if isinstance(m, Gate)]
    hit: set[tuple[int, int]] = set()

    def install() -> list:
        return [
            g.observe(lambda _weights, indices, layer=i: hit.update((layer, e) for e in indices.flatten().tolist()))
            for i, g in enumerate(gates)
        ]

    removers = engine.call(install)  # observers change only on the engine thread, between steps
    forwards = tokens = 0
    try:
        for i, ids in enumerate(prompts):
            while (hold is not None and hold()) or engine.call(engine.serving_users):
                time.sleep(PAUSE_S)
            request = GenerationRequest(f"warmup-{i}", tuple(ids), SamplingParams(max_tokens=4), priority=-1)
            result = engine.run(request)
            forwards += 1 + result.decode_steps
            tokens += len(ids)
            if progress is not None:
                progress((i + 1) / len(prompts), f"warm-up {i + 1}/{len(prompts)}")
    finally:
        engine.call(lambda: [remove() for remove in removers])
    total = sum(g.weight.shape[0] for g in gates)
    return WarmupReport(forwards, tokens, len(hit), total, time.perf_counter() - start)


"""The two MLA attention forms of a sparse step, side by side, against the engine's choice.

A sparse step (context longer than `index_topk`) attends either in the expanded form (every
context latent expanded to per-head keys and values, one masked dense attention) or in the
absorbed one (each query over its top-k latents). `attention="auto"` picks by
`model_runtime.paged.AttentionCost`. For the mid model (`bench_runtime`'s, random weights,
loaded as the server loads it), in one process, each form forced in turn:
1. prefill only, at several prompt lengths;
2. the restart's path: a long prompt prefilled, then scoring candidates over its cached blocks
   (`Engine.score`, as the reranker does), then a prompt 24 tokens longer (a few new tokens
   over a long cached context).
Greedy tokens must agree across forms (printed).

What it leaves out: the server (see `bench_latency.py`), the embedded model (its steps are
decode-sized or short prefills, where the choice does not change), a GPU (Triton's kernels are
always absorbed).

Usage: python bench/bench_attention_form.py [--prefills 300,600,1200,2400] [--prompt 3600]
                                            [--repeats 2] [--threads 1]
"""

from __future__ import annotations

import argparse
import os
import time

import torch

from model_runtime.api import GenerationRequest, SamplingParams, ScoreRequest
from model_runtime.config import EngineConfig
from model_runtime.runtime import load_model, set_threads

FORMS = ("expanded", "absorbed", "auto")


def _ids(n: int, vocab: int, seed: int) -> list[int]:
    return torch.randint(1, vocab, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


def _timed(fn):
    start = time.perf_counter()
    value = fn()
    return time.perf_counter() - start, value


def prefill_table(model, lengths: list[int], repeats: int) -> None:
    print("\n| prefill tokens | " + " | ".join(f"{f} s" for f in FORMS) + " | auto vs expanded |")
    print("|---" * (len(FORMS) + 2) + "|")
    for n in lengths:
        prompt = tuple(_ids(n, model.config.vocab_size, n))
        best = {}
        for form in FORMS * repeats:
            engine = model.engine(EngineConfig(attention=form))
            took, _ = _timed(lambda: engine.run(GenerationRequest("p", prompt, SamplingParams(max_tokens=1))))
            engine.shutdown()
            best[form] = min(best.get(form, took), took)
        print(f"| {n:,} | " + " | ".join(f"{best[f]:.2f}" for f in FORMS) + f" | {best['expanded'] / best['auto']:.2f}x |")


def restart_table(model, length: int, repeats: int) -> None:
    vocab = model.config.vocab_size
    prompt = _ids(length, vocab, 1)
    continuations = tuple(tuple(_ids(n, vocab, 100 + n)) for n in (24, 20, 16, 12, 8, 24))
    rows: dict[str, list[float]] = {}
    tokens: dict[str, tuple] = {}
    for form in FORMS * repeats:
        engine = model.engine(EngineConfig(attention=form))
        prefill, first = _timed(lambda: engine.run(GenerationRequest("p", tuple(prompt), SamplingParams(max_tokens=4))))
        score, _ = _timed(lambda: engine.score(ScoreRequest("s", tuple(prompt), continuations)))
        extend, second = _timed(lambda: engine.run(GenerationRequest("q", tuple(prompt) + continuations[0], SamplingParams(max_tokens=4))))
        engine.shutdown()
        old = rows.get(form, [float("inf")] * 3)
        rows[form] = [min(a, b) for a, b in zip(old, (prefill, score, extend))]
        tokens[form] = (first.token_ids, second.token_ids)
    print(f"\n| {length:,}-token prompt, best of {repeats} | prefill + 4 tokens s | score 6 continuations s | 24 more tokens + 4 s |")
    print("|---|---|---|---|")
    for form in FORMS:
        print(f"| {form} | " + " | ".join(f"{x:.2f}" for x in rows[form]) + " |")
    print("auto vs expanded: " + ", ".join(f"{rows['expanded'][i] / rows['auto'][i]:.2f}x" for i in range(3))
          + f"; greedy tokens equal across forms: {len(set(tokens.values())) == 1}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prefills", default="300,600,1200,2400")
    parser.add_argument("--prompt", type=int, default=3600)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    set_threads(args.threads)
    from bench_latency import mid_checkpoint

    model = load_model(mid_checkpoint())
    print(f"mid model, {args.threads} thread(s), load average at start {os.getloadavg()}")
    prefill_table(model, [int(x) for x in args.prefills.split(",") if x], args.repeats)
    restart_table(model, args.prompt, args.repeats)
    print(f"\nload average at end {os.getloadavg()}")


if __name__ == "__main__":
    main()

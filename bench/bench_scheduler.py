"""Effect of per-length-bucket batch limits on a mixed workload of short and long requests.

The scheduler decodes one length bucket per step (`EngineConfig.batch_buckets`). This runs the
same workload (short completions and long-context ones, submitted together) through several
bucket settings and prints decode throughput and the mean/p95 request latency of each class.

Usage: python bench/bench_scheduler.py [--model DIR] [--short 12] [--long 4] [--threads 2]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from model_runtime import load_model
from model_runtime.api import GenerationRequest, SamplingParams
from model_runtime.config import EngineConfig
from model_runtime.engine import Engine

SETTINGS = {
    "one bucket, batch 16": ((1 << 30, 16),),
    "one bucket, batch 4": ((1 << 30, 4),),
    "short 16 / long 4": ((768, 16), (1 << 30, 4)),
    "short 16 / long 2": ((768, 16), (1 << 30, 2)),
    "short 8 / long 1": ((768, 8), (1 << 30, 1)),
}


def workload(vocab: int, short: int, long: int, short_len: int, long_len: int) -> list[tuple[str, list[int]]]:
    gen = torch.Generator().manual_seed(0)
    jobs = [(f"short-{i}", torch.randint(10, vocab - 20, (short_len,), generator=gen).tolist()) for i in range(short)]
    jobs += [(f"long-{i}", torch.randint(10, vocab - 20, (long_len,), generator=gen).tolist()) for i in range(long)]
    return jobs


def run(loaded, buckets, jobs, new_tokens: int) -> dict[str, float]:
    engine = Engine(loaded, EngineConfig(batch_buckets=buckets, max_cache_tokens=1 << 16, prefix_caching=False))
    finished: dict[str, float] = {}
    errors: list[str] = []

    def done(result) -> None:
        finished[result.request_id] = time.perf_counter() - start
        if result.error or len(result.token_ids) != new_tokens:
            errors.append(f"{result.request_id}: {result.error or result.finish_reason}")

    start = time.perf_counter()
    for name, ids in jobs:
        engine.add(GenerationRequest(name, tuple(ids), SamplingParams(max_tokens=new_tokens, stop_token_ids=())), None, done)
    engine.run_until_idle()
    if errors:  # a failed request finishes at once and would flatter the latency columns
        raise SystemExit("requests did not run to completion: " + "; ".join(errors[:4]))
    total = time.perf_counter() - start
    stats = engine.stats()
    latency = {kind: sorted(t for n, t in finished.items() if n.startswith(kind)) for kind in ("short", "long")}
    return {
        "tok/s": stats.generated_tokens / total, "steps": stats.decode_steps,
        **{f"{k} mean s": statistics.mean(v) for k, v in latency.items() if v},
        **{f"{k} p95 s": v[min(len(v) - 1, int(0.95 * len(v)))] for k, v in latency.items() if v},
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", help="checkpoint directory (default: the embedded model)")
    parser.add_argument("--short", type=int, default=12)
    parser.add_argument("--long", type=int, default=4)
    parser.add_argument("--short-len", type=int, default=200)
    parser.add_argument("--long-len", type=int, help="default: the model's context, less the new tokens")
    parser.add_argument("--new", type=int, default=24)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    loaded = load_model(args.model)
    args.long_len = args.long_len or loaded.config.max_position_embeddings - args.new
    jobs = workload(loaded.config.vocab_size, args.short, args.long, args.short_len, args.long_len)
    print(f"{args.short} short ({args.short_len} tokens) + {args.long} long ({args.long_len} tokens) requests, "
          f"{args.new} new tokens each; model {loaded.path.name}")
    cols = ["tok/s", "steps", "short mean s", "short p95 s", "long mean s", "long p95 s"]
    print("| buckets (max context: batch) | " + " | ".join(cols) + " |")
    print("|---|" + "---|" * len(cols))
    for name, buckets in SETTINGS.items():
        row = run(loaded, buckets, jobs, args.new)
        print(f"| {name} | " + " | ".join(f"{row[c]:.2f}" if c != "steps" else str(row[c]) for c in cols) + " |", flush=True)


if __name__ == "__main__":
    main()

"""torch.compile of the paged forward on the CPU: its warm-up against its per-step gain, one run.

Runs the same greedy request (PROMPT tokens + NEW) through the engine four times: eager,
compiled (`torch.compile(Transformer.forward_paged, dynamic=True)`, graph breaks allowed: the
MoE routing and the index lists are data-dependent), compiled again (warm), eager again. Prints
per run the whole request, the first decode step and the median decode step, and whether the
tokens equal the first eager run's. The compiled run's first request carries the compile: in the
server it would land on the user's first completion.

Usage: python bench/bench_compile.py [--size mid] [--prompt 600] [--new 32] [--threads 2]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch loads: see model_runtime/__init__

import torch
from bench_runtime import SIZES

from model_runtime import load_model
from model_runtime.api import GenerationRequest, SamplingParams
from model_runtime.config import EngineConfig
from model_runtime.engine import Engine
from model_runtime.loader import save_checkpoint
from model_runtime.testing import random_model


def request(loaded, ids: list[int], new: int) -> tuple[float, float, float, list[int]]:
    """(whole s, first decode step ms, median decode step ms, tokens) of one engine request."""
    engine = Engine(loaded, EngineConfig(max_cache_tokens=4096))
    seq = engine.add(GenerationRequest("r", tuple(ids), SamplingParams(max_tokens=new + 1, stop_token_ids=())))
    start = time.perf_counter()
    engine.step()  # the prefill (and the first token)
    steps = []
    while engine.scheduler.has_work:
        t = time.perf_counter()
        engine.step()
        steps.append(time.perf_counter() - t)
    whole = time.perf_counter() - start
    return whole, steps[0] * 1000, sorted(steps)[len(steps) // 2] * 1000, seq.output_ids


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--size", default="mid", choices=sorted(SIZES))
    parser.add_argument("--prompt", type=int, default=600)
    parser.add_argument("--new", type=int, default=32)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    cfg = SIZES[args.size]
    path = Path(tempfile.mkdtemp(prefix="bench-compile-"))
    save_checkpoint(random_model(cfg, 0), cfg, path, dtype=torch.float32)
    loaded = load_model(path)
    ids = torch.randint(3, cfg.vocab_size, (args.prompt,), generator=torch.Generator().manual_seed(0)).tolist()
    eager = loaded.model.forward_paged
    compiled = torch.compile(eager, dynamic=True)
    rows = []
    runs = (("eager", eager), ("compiled, first request", compiled), ("compiled, warm", compiled), ("eager again", eager))
    for label, forward in runs:
        loaded.model.forward_paged = forward
        rows.append((label, *request(loaded, ids, args.new)))
    loaded.model.forward_paged = eager
    reference = rows[0][-1]
    head = "whole request s | first decode step ms | median decode step ms | tokens equal to eager"
    print(f"| {args.size}, {args.prompt} + {args.new} | {head} |")
    print("|---|---|---|---|---|")
    for label, whole, first, median, tokens in rows:
        print(f"| {label} | {whole:.2f} | {first:.1f} | {median:.1f} | {tokens == reference} |")


if __name__ == "__main__":
    main()

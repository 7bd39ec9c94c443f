"""Compiled decoding (`compile_decode`) on the CPU: what its background compile costs at start-up,
with an empty Inductor cache and with the cache a previous start left, against its per-step gain.

Each start is a fresh interpreter (Inductor also caches in memory): it loads the model, starts
an engine with `compile_decode` and times the background compile until ready; then it runs the
same greedy request (PROMPT tokens + NEW) eager and compiled, alternately, REPEATS times each,
and reports the median decode step of each and whether the tokens are equal. The first start
uses an empty cache directory, the second the same directory again.

What it leaves out: requests served while the compile runs (they run eager, sharing the cores
with it); the compile of a real GLM-5 checkpoint (CPU only; more layers, the same graph).

Threads: the server's count by default (`set_threads(0)`: one per core but one), or `--threads N`.

Usage: python bench/bench_compile.py [--size mid] [--prompt 600] [--new 64] [--repeats 3] [--threads N]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
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
from model_runtime.runtime import set_threads
from model_runtime.testing import random_model


def request(loaded, ids: list[int], new: int, config: EngineConfig) -> tuple[float, list[int], int]:
    """(median decode step ms, tokens, steps served compiled) of one greedy request."""
    engine = Engine(loaded, config)
    seq = engine.add(GenerationRequest("r", tuple(ids), SamplingParams(max_tokens=new + 1, stop_token_ids=())))
    engine.step()  # the prefill (and the first token)
    steps = []
    while engine.scheduler.has_work:
        start = time.perf_counter()
        engine.step()
        steps.append(time.perf_counter() - start)
    return statistics.median(steps) * 1000, list(seq.output_ids), engine.stats().compiled_steps


def child(args: argparse.Namespace) -> None:
    """One start: compile into `args.cache`, then eager and compiled requests alternately."""
    set_threads(args.threads)
    loaded = load_model(args.checkpoint)
    cache_tokens = args.prompt + args.new + 128
    on = EngineConfig(max_cache_tokens=cache_tokens, compile_decode=True, compile_cache_dir=args.cache)
    start = time.perf_counter()
    status = loaded.compiled_decode(on.block_size, on.compile_cache_dir).wait()
    compile_s = time.perf_counter() - start
    ids = torch.randint(3, loaded.config.vocab_size, (args.prompt,), generator=torch.Generator().manual_seed(0)).tolist()
    eager_ms, compiled_ms, same, served = [], [], True, 0
    for _ in range(args.repeats):
        ms, reference, _ = request(loaded, ids, args.new, EngineConfig(max_cache_tokens=cache_tokens))
        eager_ms.append(ms)
        ms, tokens, served = request(loaded, ids, args.new, on)
        compiled_ms.append(ms)
        same = same and tokens == reference
    print(json.dumps({"state": status.state, "error": status.error, "wrapper": status.wrapper, "compile_s": compile_s, "served": served,
                      "eager_ms": statistics.median(eager_ms), "compiled_ms": statistics.median(compiled_ms), "same": same}))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--size", default="mid", choices=sorted(SIZES))
    parser.add_argument("--prompt", type=int, default=600)
    parser.add_argument("--new", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=0, help="intra-op threads (0: the server's choice)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--checkpoint", help=argparse.SUPPRESS)
    parser.add_argument("--cache", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args)
        return
    cfg = SIZES[args.size]
    work = Path(tempfile.mkdtemp(prefix="bench-compile-"))
    save_checkpoint(random_model(cfg, 0), cfg, work / "model", dtype=torch.float32)
    print(f"intra-op threads: {args.threads or 'the server choice, one per core but one'}")
    print(f"| {args.size}, {args.prompt} + {args.new} | Inductor cache | compile s | median decode step ms: eager / compiled | speed-up | steps compiled | tokens equal |")
    print("|---|---|---|---|---|---|---|")
    for label in ("empty", "from the previous start"):
        flags = ["--child", "--checkpoint", str(work / "model"), "--cache", str(work / "inductor"), "--size", args.size,
                 "--prompt", str(args.prompt), "--new", str(args.new), "--repeats", str(args.repeats), "--threads", str(args.threads)]
        out = subprocess.run([sys.executable, __file__, *flags], capture_output=True, text=True, check=True).stdout
        r = json.loads(out.strip().splitlines()[-1])
        if r["state"] != "ready":
            print(f"| start | {label} | {r['compile_s']:.1f} | compiled decoding {r['state']}: {r['error']} | - | - | - |")
            continue
        print(f"| start | {label} ({r['wrapper']} wrapper) | {r['compile_s']:.1f} | {r['eager_ms']:.1f} / {r['compiled_ms']:.1f} | "
              f"{r['eager_ms'] / r['compiled_ms']:.2f}x | {r['served']}/{args.new} | {r['same']} |")


if __name__ == "__main__":
    main()

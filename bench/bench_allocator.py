"""The C allocator's policy (`model_runtime.allocator`) on and off, side by side in one run.

Each trial is a fresh process (glibc's policy is per process): it loads a model, then, like a
completion server, runs a long prompt's prefill, scores a few continuations over it and decodes
greedy tokens, through the engine the server uses. The trials alternate policy on / off
(`GLM5_MALLOC_TUNING=0`) so a drift of the machine's speed hits both. Per trial: the time of
each phase, the process's minor page faults over the three, and its peak resident size.

What it leaves out: the server, its prompt building and the tokenizer (the first completion
after start-up through `lsp_server --stdio` is `bench_latency.py --tables startup`).

Usage: python bench/bench_allocator.py [--model mid|embedded|DIR] [--prompt 4000] [--new 32] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

from bench_latency import model_dir

REPO = Path(__file__).resolve().parents[1]


def trial(model: str, prompt_len: int, new: int) -> dict:
    """One process's measurements (run in the child)."""
    import model_runtime.allocator as allocator
    from model_runtime import load_model
    from model_runtime.api import GenerationRequest, SamplingParams, ScoreRequest
    from model_runtime.config import EngineConfig
    from model_runtime.engine import Engine
    from model_runtime.runtime import set_threads

    tuned = os.environ.get("GLM5_MALLOC_TUNING") != "0" and allocator.keep_freed_memory()
    set_threads(0)
    loaded = load_model(model)
    vocab = loaded.config.vocab_size
    engine = Engine(loaded, EngineConfig(max_cache_tokens=2 * (prompt_len + new) + 2048))
    rng = random.Random(0)
    prompt = tuple(rng.randrange(10, vocab) for _ in range(prompt_len))
    conts = tuple(tuple(rng.randrange(10, vocab) for _ in range(n)) for n in (8, 12, 20, 25, 14, 9))
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    start = time.perf_counter()
    engine.prefill(prompt)
    prefilled = time.perf_counter()
    engine.score(ScoreRequest("score", prompt, conts))
    scored = time.perf_counter()
    engine.run(GenerationRequest("decode", prompt, SamplingParams(max_tokens=new)))
    decoded = time.perf_counter()
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return {"tuned": tuned, "prefill_s": prefilled - start, "score_s": scored - prefilled, "decode_s": decoded - scored,
            "faults": usage.ru_minflt - faults, "peak_mb": usage.ru_maxrss / 1024}


def run_child(model: str, prompt_len: int, new: int, tuned: bool) -> dict:
    env = os.environ | {"GLM5_MALLOC_TUNING": "1" if tuned else "0"}
    cmd = [sys.executable, __file__, "--child", "--model", model, "--prompt", str(prompt_len), "--new", str(new)]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=REPO)
    if out.returncode:
        raise SystemExit(f"trial failed ({' '.join(cmd)}):\n{out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="mid", help="mid (bench_runtime's mid size, random), embedded, or a checkpoint directory")
    parser.add_argument("--prompt", type=int, default=4000)
    parser.add_argument("--new", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    model = model_dir(args.model) if args.model in ("mid", "mid-test", "embedded") else args.model
    if args.child:
        print(json.dumps(trial(model, args.prompt, args.new)))
        return
    print(f"allocator policy on/off: {args.model}, {args.prompt}-token prefill, 6 continuations scored, {args.new} greedy tokens; "
          f"load average {os.getloadavg()[0]:.2f}")
    runs: dict[bool, list[dict]] = {True: [], False: []}
    for _ in range(args.repeats):
        for tuned in (True, False):
            runs[tuned].append(run_child(model, args.prompt, args.new, tuned))
    if not all(r["tuned"] for r in runs[True]):
        print("note: glibc refused the policy (or a MALLOC_* setting is in the environment); 'on' ran the default")
    print("| policy | prefill s (median) | score s | decode s | minor faults | peak MB | prefill vs off |")
    print("|---|---|---|---|---|---|---|")
    med = {t: {k: statistics.median(r[k] for r in runs[t]) for k in ("prefill_s", "score_s", "decode_s", "faults", "peak_mb")} for t in runs}
    for tuned, label in ((False, "off (glibc default)"), (True, "on (keep freed memory)")):
        m = med[tuned]
        print(f"| {label} | {m['prefill_s']:.2f} | {m['score_s']:.3f} | {m['decode_s']:.2f} | {m['faults']:,.0f} | {m['peak_mb']:,.0f} | "
              f"{med[False]['prefill_s'] / m['prefill_s']:.2f}x |")
    print("every trial's prefill s: on " + ", ".join(f"{r['prefill_s']:.2f}" for r in runs[True])
          + "; off " + ", ".join(f"{r['prefill_s']:.2f}" for r in runs[False]) + f"; load average at end {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()

"""The cost of recording what the model looked at (`GenerationRequest.record_attention`).

The same prompts run through the engine with recording off and on, interleaved one request at a
time (the editor's case), without the prefix cache so every request does the same work. Outputs
are checked identical. Prints per-request latency p50 / p95 for both and the ratio of medians.

Prompts are the first `--lines` lines of Python files from the standard library, so most are
longer than the embedded model's index_topk (256) and its layers select sparsely.
Leaves out: the language server around it (`glm5.explainAttention` also builds the prompt and
maps the counts to lines, `context.heat`), and JSON-RPC.

Usage: python bench/bench_attention_record.py [--model DIR] [--prompts 8] [--new 32] [--rounds 3] [--threads 1]
"""

from __future__ import annotations

import argparse
import statistics
import sysconfig
import time
from pathlib import Path

import torch

from model_runtime import default_model_path, load_model
from model_runtime.api import GenerationRequest, SamplingParams
from model_runtime.config import EngineConfig
from model_runtime.engine import Engine

FILES = ("json/decoder.py", "textwrap.py", "argparse.py", "csv.py", "dataclasses.py", "functools.py",
         "heapq.py", "pathlib.py", "shlex.py", "string.py", "tempfile.py", "zipfile.py")


def prompts(tokenizer, count: int, lines: int) -> list[tuple[int, ...]]:
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    return [tuple(tokenizer.encode("".join((stdlib / n).read_text().splitlines(keepends=True)[:lines]))) for n in FILES[:count]]


def timed(engine: Engine, request: GenerationRequest):
    box = []
    start = time.perf_counter()
    engine.add(request, None, box.append)
    engine.run_until_idle()
    return box[0], time.perf_counter() - start


def p95(values: list[float]) -> float:
    return sorted(values)[max(0, round(0.95 * len(values)) - 1)]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default=str(default_model_path()))
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--lines", type=int, default=60)
    parser.add_argument("--new", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    loaded = load_model(args.model)
    engine = Engine(loaded, EngineConfig(prefix_caching=False))
    ids = prompts(loaded.tokenizer, args.prompts, args.lines)
    sampling = SamplingParams(max_tokens=args.new)
    timed(engine, GenerationRequest("warm", ids[0], sampling))
    times: dict[bool, list[float]] = {False: [], True: []}
    for r in range(args.rounds):
        for i, prompt in enumerate(ids):
            order = (False, True) if (r + i) % 2 == 0 else (True, False)
            outs = {}
            for record in order:
                result, seconds = timed(engine, GenerationRequest(f"{r}-{i}-{record}", prompt, sampling, record_attention=record))
                outs[record] = result.token_ids
                times[record].append(seconds)
            assert outs[False] == outs[True], "recording changed the output"
    lengths = [len(p) for p in ids]
    print(f"model {args.model}: {len(ids)} prompts of {min(lengths)}-{max(lengths)} tokens (index_topk {loaded.config.index_topk}), "
          f"{args.new} new tokens, {args.rounds} rounds, {args.threads} thread(s)")
    print(f"{'recording':>10} | {'p50 ms':>8} | {'p95 ms':>8}")
    for record in (False, True):
        print(f"{'on' if record else 'off':>10} | {1000 * statistics.median(times[record]):8.1f} | {1000 * p95(times[record]):8.1f}")
    print(f"ratio of medians on/off: {statistics.median(times[True]) / statistics.median(times[False]):.3f}")


if __name__ == "__main__":
    main()

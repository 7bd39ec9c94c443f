"""MTP speculative decoding on real code: acceptance rate and decode speed against plain greedy.

Prompts are the first 40 lines of Python files from the standard library (part of the training
corpus: this measures the mechanism, not generalisation). Greedy outputs are checked identical.

Usage: python bench/bench_mtp.py [--model DIR] [--prompts 12] [--new 48] [--threads 2]
"""

from __future__ import annotations

import argparse
import sysconfig
import time
from pathlib import Path

import torch

from model_runtime import load_model
from model_runtime.api import GenerationRequest, SamplingParams
from model_runtime.config import EngineConfig
from model_runtime.engine import Engine

FILES = ("json/decoder.py", "textwrap.py", "argparse.py", "csv.py", "dataclasses.py", "functools.py",
         "heapq.py", "pathlib.py", "shlex.py", "string.py", "tempfile.py", "zipfile.py")


def prompts(tokenizer, count: int, lines: int = 40) -> list[list[int]]:
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    out = []
    for name in FILES[:count]:
        text = "".join((stdlib / name).read_text().splitlines(keepends=True)[:lines])
        out.append(tokenizer.encode(text))
    return out


def run(loaded, ids: list[list[int]], new: int, mtp: bool) -> tuple[list[tuple[int, ...]], float, dict]:
    engine = Engine(loaded, EngineConfig(use_mtp=mtp, prefix_caching=False))
    results = {}
    start = time.perf_counter()
    for i, p in enumerate(ids):  # one at a time: the editor's case
        engine.add(GenerationRequest(str(i), tuple(p), SamplingParams(max_tokens=new)), None, lambda r: results.__setitem__(r.request_id, r))
        engine.run_until_idle()
    elapsed = time.perf_counter() - start
    outs = [results[str(i)].token_ids for i in range(len(ids))]
    return outs, elapsed, {"steps": engine.stats().decode_steps, "drafted": engine.stats().spec_drafted,
                           "accepted": engine.stats().spec_accepted, "tokens": sum(len(o) for o in outs)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", help="checkpoint directory (default: the embedded model)")
    parser.add_argument("--prompts", type=int, default=12)
    parser.add_argument("--new", type=int, default=48)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    loaded = load_model(args.model)
    ids = prompts(loaded.tokenizer, args.prompts)
    plain, t_plain, s_plain = run(loaded, ids, args.new, mtp=False)
    spec, t_spec, s_spec = run(loaded, ids, args.new, mtp=True)
    print(f"{len(ids)} prompts (first 40 lines of stdlib files), up to {args.new} greedy tokens each; model {loaded.path.name}")
    print("| decoding | tokens | decode steps | tokens/step | wall s | tokens/s | drafts accepted | identical output |")
    print("|---|---|---|---|---|---|---|---|")
    for name, s, t, same in (("plain greedy", s_plain, t_plain, True), ("MTP speculative", s_spec, t_spec, plain == spec)):
        rate = f"{s['accepted']}/{s['drafted']} ({s['accepted'] / s['drafted']:.0%})" if s["drafted"] else "-"
        print(f"| {name} | {s['tokens']} | {s['steps']} | {s['tokens'] / max(1, s['steps']):.2f} | {t:.2f} | {s['tokens'] / t:.1f} | {rate} | {same} |")


if __name__ == "__main__":
    main()

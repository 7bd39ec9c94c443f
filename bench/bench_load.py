"""Where the in-process runtime's start-up time goes, phase by phase, in a fresh interpreter.

Each repeat runs one subprocess (a cold interpreter; the OS page cache stays warm) that loads a
model the way the language server does (`lsp_server.engine_client.load_runtime`'s steps) and
times each phase: import torch, import the runtime (model_runtime + kernels), config and
tokenizer, weights, fingerprint, engine construction (KV cache, fused projections) and start,
and binding the persistent KV store. Side by side in the same process, what the old path paid:
importing triton (the CPU path no longer does) and zero-filling the KV pool with `torch.zeros`
(it is now zero pages on demand). The table gives the median of the repeats.

What it leaves out: the interpreter's own start, pygls and the LSP handshake (see
`bench_latency.py`'s "from spawn"), and a cold disk (the files are in the page cache).

Usage: python bench/bench_load.py [--models embedded,mid] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

from bench_latency import REPO, model_dir

PHASES = r"""
import json, os, sys, tempfile, time
marks, t0 = {}, time.perf_counter()
def mark(name):
    global t0
    now = time.perf_counter(); marks[name] = (now - t0) * 1000; t0 = now
import model_runtime  # sets OMP_WAIT_POLICY before torch loads, as the server does
import torch; mark("import torch")
import model_runtime.runtime, model_runtime.engine, kernels; mark("import runtime + kernels")
triton_loaded = "triton" in sys.modules
from pathlib import Path
from model_runtime.config import EngineConfig
from model_runtime.loader import load_weights, read_config
from model_runtime.runtime import LoadedModel, set_threads
from model_runtime.tokenizer import GlmTokenizer
path = Path(sys.argv[1])
set_threads(0)
read_config(path); tokenizer = GlmTokenizer.from_dir(path); mark("config + tokenizer")
model, cfg = load_weights(path, torch.device("cpu"), torch.float32); mark("weights")
loaded = LoadedModel(model, cfg, tokenizer, path, torch.device("cpu"), torch.float32)
loaded.fingerprint; mark("fingerprint")
engine = loaded.engine(EngineConfig()); mark("engine construct + start")
os.environ["GLM5_LSP_CACHE_DIR"] = tempfile.mkdtemp()
engine.open_workspace([tempfile.mkdtemp()]); mark("bind the KV store")
engine.shutdown(); t0 = time.perf_counter()
zeros = [torch.zeros_like(t) for t in (*engine.cache.kv, *engine.cache.index)]; mark("(old) zero-fill the KV pool")
import kernels.jit.norm; mark("(old) import triton")
print(json.dumps({"marks": marks, "triton_on_cpu_path": triton_loaded, "pool_mib": engine.cache.device_bytes() >> 20}))
"""


def run_once(model: str) -> dict:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("TRITON_INTERPRET", None)
    done = subprocess.run([sys.executable, "-c", PHASES, model], cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    if done.returncode:
        raise SystemExit(done.stderr)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="embedded,mid")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    print(f"load average at start: {os.getloadavg()}")
    runs = {name: [run_once(model_dir(name)) for _ in range(args.repeats)] for name in args.models.split(",")}
    names = list(runs)
    phases = list(runs[names[0]][0]["marks"])
    print(f"\nstart-up phases in a fresh interpreter, median of {args.repeats} (ms)")
    print("| phase | " + " | ".join(names) + " |")
    print("|---|" + "---|" * len(names))
    for phase in phases:
        print(f"| {phase} | " + " | ".join(f"{statistics.median(r['marks'][phase] for r in runs[n]):,.1f}" for n in names) + " |")
    totals = {n: statistics.median(sum(v for k, v in r["marks"].items() if not k.startswith("(old)")) for r in runs[n]) for n in names}
    print("| **total (today's path)** | " + " | ".join(f"**{totals[n]:,.1f}**" for n in names) + " |")
    print("| KV pool MiB | " + " | ".join(str(runs[n][0]["pool_mib"]) for n in names) + " |")
    print("| triton imported on the CPU path | " + " | ".join(str(runs[n][0]["triton_on_cpu_path"]) for n in names) + " |")
    print(f"\nload average at end: {os.getloadavg()}")


if __name__ == "__main__":
    main()

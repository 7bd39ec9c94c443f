"""Decode steps with the weights input-major (`Transformer.lay_out_for_decode`) against the checkpoint's layout.

Role: an engine stores the fp32 weights its steps read through `F.linear` input-major where the
model takes at most `INPUT_MAJOR_BYTES`. This loads one model three times, side by side in one
process: in the checkpoint's layout, with only the output projection input-major, and with
every decode weight input-major (whatever the budget says), then times greedy decode steps of
one engine per layout, interleaved, over a prompt of real code (this repository's
`lsp_server/completions.py`), and prints the median step, the ratio to the checkpoint's layout
and what the copies cost once. `--beams 4` decodes four sequences of the same prompt a step,
as the start-up's first completion does.

What it leaves out: the server around the engine (`bench_latency.py` times requests through
`lsp_server --stdio`) and the prefill (600 rows: within 3% either way, see the method's
docstring).

Usage: python bench/bench_decode_layout.py [--model embedded|mid|DIR] [--beams 1] [--rounds 4] [--steps 40]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch loads: see model_runtime/__init__

from model_runtime import load_model
from model_runtime.api import GenerationRequest, SamplingParams
from model_runtime.config import EngineConfig
from model_runtime.engine import Engine
from model_runtime.model import _lay_out_input_major
from model_runtime.runtime import set_threads

from bench_latency import model_dir

REPO = Path(__file__).resolve().parents[1]
LAYOUTS = ("checkpoint", "output projection", "input-major")


def prepared(path: Path, layout: str):
    """The model at `path`, fused for inference and in `layout`; and the copies' time (ms)."""
    loaded = load_model(path)
    model = loaded.model
    model.fuse_for_inference()
    start = time.perf_counter()
    if layout == "input-major":
        model.lay_out_for_decode(max_bytes=1 << 62)
    elif layout == "output projection":
        _lay_out_input_major(model.lm_head)
    model.laid_out = True  # as it is: the engine must not lay it out again
    return loaded, (time.perf_counter() - start) * 1000


def step_ms(loaded, prompt: tuple[int, ...], beams: int, steps: int) -> float:
    """Median wall time of `steps` greedy decode steps of `beams` sequences of `prompt`."""
    engine = Engine(loaded, EngineConfig(max_cache_tokens=8192))
    engine.eos_ids = frozenset()
    for b in range(beams):
        engine.add(GenerationRequest(f"b{b}", prompt, SamplingParams(max_tokens=steps + 2, temperature=0.0, stop_token_ids=())))
    while any(s.in_prefill for s in engine.scheduler.running) or engine.scheduler.waiting:
        engine.step()
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        engine.step()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="embedded", help="embedded, mid (bench_runtime's mid size, random) or a checkpoint directory")
    parser.add_argument("--beams", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--prompt-tokens", type=int, default=850)
    args = parser.parse_args()
    set_threads(0)
    path = Path(model_dir(args.model))
    models = {layout: prepared(path, layout) for layout in LAYOUTS}
    tokenizer = models["checkpoint"][0].tokenizer
    ids = tokenizer.encode((REPO / "lsp_server" / "completions.py").read_text())
    times: dict[str, list[float]] = {layout: [] for layout in LAYOUTS}
    for round_ in range(args.rounds):
        prompt = tuple(ids[round_ * 300 : round_ * 300 + args.prompt_tokens])
        for layout in LAYOUTS:
            times[layout].append(step_ms(models[layout][0], prompt, args.beams, args.steps))
    base = statistics.median(times["checkpoint"])
    print(f"model {args.model}, {args.beams} sequence(s) a step, median of {args.steps} steps per round, {args.rounds} rounds interleaved")
    print("| weights | copying once ms | decode step ms (per round) | median ms | checkpoint's / this |")
    print("|---|---|---|---|---|")
    for layout in LAYOUTS:
        median = statistics.median(times[layout])
        rounds = " / ".join(f"{t:.2f}" for t in times[layout])
        print(f"| {layout} | {models[layout][1]:.1f} | {rounds} | {median:.2f} | {base / median:.2f}x |")


if __name__ == "__main__":
    main()

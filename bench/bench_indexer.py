"""The indexer's torch reference on the CPU: its tiling and its top-k choice against the earlier ones.

Role: the CPU runtime scores every prefill and scoring query with `kernels.indexer`'s reference.
This times, side by side in one run and interleaved, per layer call at the mid model's indexer
shape (16 heads of 64, blocks of 64 keys), on random inputs:
- scoring (`_score_rows`) with its tiling (`TILE_BYTES`, `TILE_MIN_ROWS`, `KEY_ALIGN`) against
  the earlier one (4 MiB tiles of any row count, each over exactly the keys its last query sees);
- choosing each row's top-k in position order (`best_columns`, which reads the scores that
  reach the k-th one off a mask) against the earlier way (sorting the columns of an unsorted
  `torch.topk`), on rows no tie straddles (random scores), where both choose the same.
Both pairs are checked to agree before they are timed.

What it leaves out: the rest of a layer; `bench_runtime.py --whole` times whole requests.

Usage: python bench/bench_indexer.py [--repeats 15] [--threads N]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable
from contextlib import contextmanager

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch loads: see model_runtime/__init__

import torch

from kernels import indexer
from model_runtime.runtime import set_threads

HEADS, DIM, BLOCK, TOPK, SCALE = 16, 64, 64, 256, 0.125
EARLIER_TILING = {"TILE_BYTES": 4 << 20, "TILE_MIN_ROWS": 1, "KEY_ALIGN": 1}
CASES = {  # name: (context length, first scored position)
    "600-token prefill (344 rows past top-k)": (600, TOPK),
    "4k prefill, its last 512 rows": (4096, 4096 - 512),
    "4k context, 14 new tokens": (4096, 4096 - 14),
}


def case_inputs(context: int, first: int, gen: torch.Generator) -> tuple:
    """`_score_rows`'s arguments for one sequence's queries at positions first..context-1."""
    blocks = -(-context // BLOCK)
    cache = torch.randn(blocks * BLOCK, DIM, generator=gen)
    slots = indexer.key_slots(torch.arange(blocks, dtype=torch.int32)[None], blocks, BLOCK)
    positions = torch.arange(first, context)
    q = torch.randn(positions.numel(), HEADS, DIM, generator=gen)
    weights = torch.randn(positions.numel(), HEADS, generator=gen) / HEADS**0.5
    seq_ids = torch.zeros(positions.numel(), dtype=torch.long)
    return q, weights, cache, slots, seq_ids, positions, torch.tensor([context])


@contextmanager
def tiling(settings: dict[str, int]):
    saved = {name: getattr(indexer, name) for name in settings}
    for name, value in settings.items():
        setattr(indexer, name, value)
    try:
        yield
    finally:
        for name, value in saved.items():
            setattr(indexer, name, value)


def earlier_best_columns(scores: torch.Tensor, topk: int) -> torch.Tensor:
    """The earlier `best_columns` for rows no tie straddles: the unsorted top-k's k-th score,
    the check that exactly k scores reach it, and the top-k's columns, sorted."""
    k = min(topk, scores.shape[1])
    values, columns = scores.topk(k, dim=1, sorted=False)
    kth = values.amin(1, keepdim=True)
    clear = ((kth > float("-inf")) & ((scores >= kth).sum(1, keepdim=True) == k)).squeeze(1)
    if not bool(clear.all()):
        raise SystemExit("a tie straddles a row's k-th score: the earlier way's other branch is not timed here")
    return columns.sort(1).values


def interleaved(runs: dict[str, Callable[[], object]], repeats: int) -> dict[str, float]:
    """Median ms of each run, the runs taking turns so a drift of the machine hits all alike."""
    times: dict[str, list[float]] = {label: [] for label in runs}
    for run in runs.values():
        run()
    for _ in range(repeats):
        for label, run in runs.items():
            start = time.perf_counter()
            run()
            times[label].append((time.perf_counter() - start) * 1000)
    return {label: statistics.median(values) for label, values in times.items()}


def bench_case(name: str, args: tuple, repeats: int) -> list[str]:
    def score_now():
        return indexer._score_rows(*args, SCALE)

    def score_earlier():
        with tiling(EARLIER_TILING):
            return indexer._score_rows(*args, SCALE)

    scores = score_now()
    if not torch.allclose(scores, score_earlier(), rtol=1e-4, atol=1e-4):
        raise SystemExit(f"{name}: the two tilings' scores differ")
    columns, chosen = indexer.best_columns(scores, TOPK)
    if not (bool(chosen.all()) and torch.equal(columns, earlier_best_columns(scores, TOPK))):
        raise SystemExit(f"{name}: the two top-k choices differ (random scores should have no ties)")
    score = interleaved({"now": score_now, "earlier": score_earlier}, repeats)
    select = interleaved({"now": lambda: indexer.best_columns(scores, TOPK), "earlier": lambda: earlier_best_columns(scores, TOPK)}, repeats)
    rows = args[0].shape[0]
    return [
        f"| {name} | scoring ({rows} rows) | {score['now']:.2f} | {score['earlier']:.2f} | {score['earlier'] / score['now']:.2f}x |",
        f"| {name} | top-k in position order | {select['now']:.2f} | {select['earlier']:.2f} | {select['earlier'] / select['now']:.2f}x |",
    ]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--threads", type=int, default=0, help="intra-op threads (0: the server's choice)")
    args = parser.parse_args()
    threads = set_threads(args.threads)
    print(f"{threads} intra-op thread(s); median ms per layer call of {args.repeats}, interleaved")
    print("| case | part | now ms | earlier ms | earlier / now |")
    print("|---|---|---|---|---|")
    gen = torch.Generator().manual_seed(0)
    with torch.inference_mode():
        for name, (context, first) in CASES.items():
            for line in bench_case(name, case_inputs(context, first, gen), args.repeats):
                print(line, flush=True)


if __name__ == "__main__":
    main()

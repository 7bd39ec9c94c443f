"""Training-step speed of the embedded model: where a step's time goes, and today's recipe
against the faster options, side by side in one run.

Each configuration runs the `small` preset's `forward_train` + backward + optimizer step on the
same batch (real rows from `data/shards/train` when built, else random tokens), in the phases a
run goes through: the DSA dense warm-up (with the indexer KL) and sparse training with and
without the KL. Configurations are interleaved round by round so that load from other processes
hits them alike; each cell is the median over rounds. "per run" weighs the phases as a run
does: `--dense-fraction` of steps in the warm-up, the rest sparse with the KL on every
`indexer_every`-th step.

The breakdown times the parts of today's sparse step by leaving them out one at a time: the MTP
layer, the indexer KL, the optimizer; what is left is the main forward/backward with its top-k
selection. Data loading is timed on its own (a memory-mapped batch).

Usage: python bench/bench_train_step.py [--threads 1] [--batch-size 4] [--rounds 2] [--compile]
Leaves out: evaluation, checkpointing, the first (warm-up) step of each configuration, and for
--compile the compilation time (printed separately).
"""

from __future__ import annotations

import argparse
import statistics
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from model_runtime.model import Transformer, init_weights
from training.presets import model_config
from training.stream import BatchStream, PackedDataset

SHARDS = Path("data/shards/train")


@dataclass(frozen=True)
class Config:
    name: str
    bf16: bool = True
    indexer_every: int = 1
    mtp_stride: int = 1
    mtp: bool = True
    optimizer: bool = True
    compile: bool = False


def batch(batch_size: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, float]:
    """(ids [B, 1025], loss mask [B, 1024], seconds to read the batch)."""
    if (SHARDS / "index.json").is_file():
        started = time.perf_counter()
        tokens, mask = BatchStream(PackedDataset(SHARDS), batch_size, seed).next()
        return torch.from_numpy(tokens.astype(np.int64)), torch.from_numpy(mask[:, 1:]), time.perf_counter() - started
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(0, 8192, (batch_size, 1025), generator=gen), torch.ones(batch_size, 1024, dtype=torch.uint8), 0.0


class Runner:
    def __init__(self, cfg: Config, vocab: int) -> None:
        torch.manual_seed(0)
        self.cfg = cfg
        self.model = Transformer(model_config("small", vocab, 0, 1024))
        init_weights(self.model)
        self.model.train()
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=1e-4)
        self.forward = torch.compile(self.model.forward_train) if cfg.compile else self.model.forward_train

    def step(self, ids: torch.Tensor, mask: torch.Tensor, sparse: bool, kl: bool) -> float:
        started = time.perf_counter()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=self.cfg.bf16):
            out = self.forward(ids[:, :-1], ids[:, 1:], mask, sparse=sparse, train_indexer=kl,
                               mtp_weight=0.3 if self.cfg.mtp else 0.0, mtp_stride=self.cfg.mtp_stride)
        out.loss.backward()
        if self.cfg.optimizer:
            self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        return time.perf_counter() - started


PHASES = {"dense+kl": (False, True), "sparse+kl": (True, True), "sparse": (True, False)}


def per_run(cells: dict[str, float], cfg: Config, dense_fraction: float) -> float:
    """Seconds per step averaged over a run's phases."""
    every = cfg.indexer_every
    sparse = cells["sparse+kl"] / every + cells["sparse"] * (1 - 1 / every)
    return dense_fraction * cells["dense+kl"] + (1 - dense_fraction) * sparse


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--batch-size", type=int, default=4)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--dense-fraction", type=float, default=0.1)
    p.add_argument("--compile", action="store_true", help="also time torch.compile of the fast configuration")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    ids, mask, load_s = batch(args.batch_size)
    tokens = mask.numel()
    configs = [
        Config("today (bf16 autocast, KL every step, full MTP)"),
        Config("fp32 (no autocast)", bf16=False),
        Config("fast: KL every 4th step, MTP on every 4th position", indexer_every=4, mtp_stride=4),
        Config("breakdown: today without MTP", mtp=False),
        Config("breakdown: today without optimizer step", optimizer=False),
    ]
    if args.compile:
        configs.append(Config("fast + torch.compile", indexer_every=4, mtp_stride=4, compile=True))
    runners = [Runner(c, 8192) for c in configs]
    for r in runners:  # warm-up, compilation included
        started = time.perf_counter()
        for sparse, kl in PHASES.values():
            r.step(ids, mask, sparse, kl)
        if r.cfg.compile:
            print(f"compile warm-up: {time.perf_counter() - started:.0f} s")
    times: dict[str, dict[str, list[float]]] = {c.name: {ph: [] for ph in PHASES} for c in configs}
    for _ in range(args.rounds):
        for r in runners:
            for ph, (sparse, kl) in PHASES.items():
                times[r.cfg.name][ph].append(r.step(ids, mask, sparse, kl))
    cells = {name: {ph: statistics.median(v) for ph, v in d.items()} for name, d in times.items()}
    today = per_run(cells[configs[0].name], configs[0], args.dense_fraction)
    print(f"\nbatch {args.batch_size} x 1024 tokens, {args.threads} thread(s), {args.rounds} rounds, "
          f"data: {'shards' if load_s else 'random'} (batch read {load_s * 1e3:.1f} ms)")
    print("\n| configuration | dense+kl s/step | sparse+kl s/step | sparse s/step | per run tok/s | vs today |")
    print("|---|---|---|---|---|---|")
    for c in configs:
        run_s = per_run(cells[c.name], c, args.dense_fraction)
        row = " | ".join(f"{cells[c.name][ph]:.2f}" for ph in PHASES)
        print(f"| {c.name} | {row} | {tokens / run_s:,.0f} | {today / run_s:.2f}x |")
    sp = cells[configs[0].name]
    print("\nwhere today's sparse+kl step goes (differences of medians):")
    print(f"  MTP layer + its head:  {sp['sparse+kl'] - cells[configs[3].name]['sparse+kl']:.2f} s")
    print(f"  indexer KL:            {sp['sparse+kl'] - sp['sparse']:.2f} s")
    print(f"  optimizer step:        {sp['sparse+kl'] - cells[configs[4].name]['sparse+kl']:.2f} s")
    print(f"  data loading:          {load_s:.3f} s")
    print(f"  whole step:            {sp['sparse+kl']:.2f} s")
    print(f"\n/proc/loadavg at the end: {Path('/proc/loadavg').read_text().strip()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

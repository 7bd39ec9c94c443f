"""Training-step speed, kernel launches and host reads: the trainer's old path against its fast
path, side by side in one process.

Each configuration is a real `training.train.Trainer` (the GPU recipe: Muon, the indexer KL
and the MTP layer on every 4th step, MTP on every 4th position; fp32 unless `--gpu-dtypes`, since
bf16 matmuls are 18x slower than fp32 on a CPU without AMX-bf16)
on the same rows, in sparse training (most of a run). One measurement is a whole 4-step cycle,
since the KL and MTP steps cost more; configurations alternate cycle by cycle so that load from
other processes hits them alike, and each figure is the median over rounds.

- old: Muon matrix by matrix, MoE dispatch by routed counts, exact DSA top-k, statistics read
  every step (what the trainer ran before, still selectable);
- fast: Muon batched by shape, static-capacity MoE (factor 2), bf16 top-k selection, statistics
  read every 25 steps.

Launches: aten operators that run a kernel (leaves of the profiler's tree, metadata-only ops
such as views left out), per step, with the optimizer's share. Host reads: tensor values read
into Python (`item`, `tolist`, `float`, `int`, `bool`, ...; the optimizer's step counters,
which torch keeps on the host, left out) plus operators that wait for a GPU to know their
output's size (nonzero, bincount, masked_select, unique): on a GPU each one is a sync.

Usage: python bench/bench_train_step.py [--threads 1] [--batch-size 2] [--rounds 3] [--preset small] [--seq-len 1024]
Data: rows from data/shards/train when built, else random tokens (speed does not depend on them).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections import Counter
from pathlib import Path

import numpy as np
import torch
from torch.overrides import TorchFunctionMode

from model_runtime.embedded import default_model_path
from model_runtime.tokenizer import GlmTokenizer
from training.data import INDEX_FORMAT, ShardWriter
from training.train import Trainer, parse_args

SHARDS = Path("data/shards/train")
RECIPE = ["--optimizer", "muon", "--muon-ns-dtype", "bfloat16", "--indexer-every", "4", "--mtp-stride", "4",
          "--mtp-every", "4", "--dense-fraction", "0", "--warmup-steps", "10"]
PATHS = {
    "old": ["--muon-impl", "single", "--moe-capacity", "0", "--indexer-select", "exact", "--stats-every", "1"],
    "fast": ["--muon-impl", "batched", "--moe-capacity", "2", "--indexer-select", "fast", "--stats-every", "25"],
}
CYCLE = 4  # steps: one with the KL and the MTP layer, three without
NO_KERNEL = {"aten::" + n for n in (
    "view", "_unsafe_view", "as_strided", "reshape", "expand", "t", "transpose", "permute", "unsqueeze", "squeeze",
    "select", "slice", "split", "split_with_sizes", "unbind", "chunk", "detach", "alias", "empty", "empty_like",
    "empty_strided", "resize_", "unflatten", "flatten", "narrow", "_reshape_alias", "lift_fresh", "numpy_T", "mT",
    "result_type", "is_nonzero", "_has_compatible_shallow_copy_type", "set_", "detach_", "expand_as", "view_as",
    "contiguous", "to", "item", "_local_scalar_dense", "type_as", "is_same_size", "resolve_conj", "resolve_neg",
    "conj", "_neg_view", "_conj")}
SYNC_OPS = {"aten::nonzero", "aten::bincount", "aten::masked_select", "aten::_unique2", "aten::unique_consecutive"}
READS = {"item", "tolist", "__float__", "__int__", "__bool__", "__index__", "numpy", "cpu"}


class ReadCounter(TorchFunctionMode):
    """Counts tensor values read into Python, by kind, except those of `exempt` tensors."""

    def __init__(self, exempt: set[int]) -> None:
        super().__init__()
        self.exempt, self.reads = exempt, Counter()

    def __torch_function__(self, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", "")
        if name in READS and args and id(args[0]) not in self.exempt:
            self.reads[name] += 1
        return func(*args, **(kwargs or {}))


def random_shards(directory: Path, vocab: int, rows: int, seq_len: int = 1025) -> Path:
    """A shard directory of random rows (the speed of a step does not depend on the tokens)."""
    import hashlib
    import json

    directory.mkdir(parents=True, exist_ok=True)
    writer = ShardWriter(directory, seq_len)
    rng = np.random.default_rng(0)
    writer.write([(rng.integers(0, vocab, seq_len).tolist(), [1] * seq_len) for _ in range(rows)])
    writer.close()
    sha = hashlib.sha256((default_model_path() / "tokenizer.json").read_bytes()).hexdigest()
    index = {"format": INDEX_FORMAT, "seq_len": seq_len, "vocab_size": vocab, "pad_id": 0, "tokenizer_sha256": sha,
             "sample_config": {}, "build_config": {}, "shards": writer.shards, "stats": {}}
    (directory / "index.json").write_text(json.dumps(index))
    return directory


def trainer(path: str, data: Path, run_dir: Path, args: argparse.Namespace) -> Trainer:
    torch.manual_seed(0)
    flags = ["--preset", args.preset, "--train-data", str(data), "--heldout-data", str(run_dir / "none"),
             "--tokenizer", str(default_model_path()), "--run-dir", str(run_dir), "--batch-size", str(args.batch_size),
             "--total-tokens", str(10**9), "--device", "cpu", "--threads", str(args.threads), *RECIPE, *PATHS[path],
             *([] if args.gpu_dtypes else ["--no-bf16", "--muon-ns-dtype", "float32"])]
    return Trainer(parse_args(flags))


def cycle(t: Trainer) -> float:
    started = time.perf_counter()
    for _ in range(CYCLE):
        t.step()
    return time.perf_counter() - started


def counts(t: Trainer) -> dict[str, float]:
    """Launches (all, optimizer's) and host reads per step over one cycle."""
    exempt = {id(s["step"]) for s in t.optimizer.state.values() if "step" in s}
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof, ReadCounter(exempt) as reads:
        cycle(t)
    launches = optimizer = syncs = 0
    for e in prof.events():
        if not _kernel(e) or any(a.name.startswith("aten::_foreach_") for a in _ancestors(e)):
            continue
        syncs += e.name in SYNC_OPS
        if not e.name.startswith("aten::_foreach_") and any(_kernel(c) for c in e.cpu_children):
            continue  # its children are the launches
        launches += 1
        optimizer += any(a.name.startswith("Optimizer.step") for a in _ancestors(e))
    return {"launches": launches / CYCLE, "optimizer": optimizer / CYCLE,
            "reads": (sum(reads.reads.values()) + syncs) / CYCLE, "kinds": dict(reads.reads) | ({"sync ops": syncs} if syncs else {})}


def _kernel(e) -> bool:
    """An operator that runs a kernel. A `_foreach_` op counts once (on a GPU one fused kernel
    per op and chunk of tensors; on the CPU it loops over per-tensor ops)."""
    return e.name.startswith("aten::") and e.name not in NO_KERNEL


def _ancestors(e):
    parent = e.cpu_parent
    while parent is not None:
        yield parent
        parent = parent.cpu_parent


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--batch-size", type=int, default=2)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--preset", default="small")
    p.add_argument("--seq-len", type=int, default=1024, help="context of the random rows (without shards)")
    p.add_argument("--gpu-dtypes", action="store_true",
                   help="bf16 autocast and bf16 Newton-Schulz as on a GPU (slow on a CPU without AMX-bf16)")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        vocab = GlmTokenizer.from_dir(default_model_path()).vocab_size
        data = SHARDS if (SHARDS / "index.json").is_file() else random_shards(Path(tmp) / "shards", vocab, 64, args.seq_len + 1)
        trainers = {name: trainer(name, data, Path(tmp) / name, args) for name in PATHS}
        for t in trainers.values():  # warm-up: first-step allocations, optimizer state
            cycle(t)
        found = {name: counts(t) for name, t in trainers.items()}
        for name, c in found.items():  # printed at once: they do not depend on the machine's load
            print(f"{name}: {c['launches']:,.0f} launches/step ({c['optimizer']:,.0f} in the optimizer), "
                  f"{c['reads']:.1f} host reads/step {c['kinds']}", flush=True)
        times: dict[str, list[float]] = {name: [] for name in PATHS}
        for _ in range(args.rounds):
            for name, t in trainers.items():
                times[name].append(cycle(t))
        tokens = CYCLE * trainers["old"].tokens_per_step
    rate = {name: tokens / statistics.median(v) for name, v in times.items()}
    print(f"\n{args.preset}, batch {args.batch_size} x {trainers['old'].context} tokens, {args.threads} thread(s), "
          f"{args.rounds} rounds of {CYCLE} steps, data: {'shards' if data == SHARDS else 'random'}")
    print("\n| path | tokens/s (median; range) | launches/step | of which optimizer | host reads/step |")
    print("|---|---|---|---|---|")
    for name in PATHS:
        c = found[name]
        span = f"{tokens / max(times[name]):,.0f}-{tokens / min(times[name]):,.0f}"
        print(f"| {name} | {rate[name]:,.0f} ({span}) | {c['launches']:,.0f} | {c['optimizer']:,.0f} | {c['reads']:.1f} |")
    old, fast = found["old"], found["fast"]
    print(f"\nfast/old: tokens/s {rate['fast'] / rate['old']:.2f}x, launches {fast['launches'] / old['launches']:.2f}x, "
          f"optimizer launches {fast['optimizer'] / old['optimizer']:.2f}x")
    print(f"host reads by kind, per {CYCLE} steps: old {old['kinds']}, fast {fast['kinds']}")
    print(f"/proc/loadavg at the end: {Path('/proc/loadavg').read_text().strip()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

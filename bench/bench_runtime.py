"""Runtime speed against transformers' own `generate`, same weights, prompt and output, one run.

Prints, per model size and prompt length, prefill tokens/s (prompt / time to the first token)
and decode tokens/s (between the first and the last token, from a hook inside each generator)
for transformers and model_runtime, the ratio, and whether the greedy tokens were identical.

Usage: python bench/bench_runtime.py [--sizes tiny,mid] [--contexts 128,1024,2048] [--new 32] [--threads 2]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import torch

from model_runtime import load_model
from model_runtime.config import ModelConfig

SIZES = {
    "tiny": ModelConfig.tiny(vocab_size=4096, index_n_heads=16, num_nextn_predict_layers=0),
    "mid": ModelConfig.tiny(
        vocab_size=8192, hidden_size=512, num_hidden_layers=8, num_attention_heads=8, num_key_value_heads=8,
        q_lora_rank=256, kv_lora_rank=128, qk_nope_head_dim=64, qk_rope_head_dim=32, v_head_dim=64,
        index_topk=256, index_n_heads=16, index_head_dim=64, intermediate_size=1536, moe_intermediate_size=256,
        first_k_dense_replace=1, n_routed_experts=16, num_experts_per_tok=2, n_group=1, topk_group=1,
        num_nextn_predict_layers=0,
    ),
}


def step_times(run) -> list[float]:
    """Wall-clock time of every produced token, from a hook inside the generator."""
    stamps: list[float] = []
    run(lambda: stamps.append(time.perf_counter()))
    return stamps


def rates(stamps: list[float], start: float, prompt_len: int) -> tuple[float, float]:
    """(prefill tok/s up to the first token, decode tok/s between first and last token)."""
    decode = (len(stamps) - 1) / (stamps[-1] - stamps[0])
    return prompt_len / (stamps[0] - start), decode


def bench_pair(hf, ours, ids: torch.Tensor, new: int, repeats: int) -> dict[str, tuple[float, float, list[int]]]:
    from transformers import LogitsProcessor, LogitsProcessorList

    class Stamp(LogitsProcessor):
        def __init__(self, hook):
            self.hook = hook

        def __call__(self, input_ids, scores):
            self.hook()
            return scores

    def hf_run(hook):
        with torch.no_grad():
            return hf.generate(ids[None], max_new_tokens=new, min_new_tokens=new, do_sample=False,
                               logits_processor=LogitsProcessorList([Stamp(hook)]))[0, len(ids):].tolist()

    def our_run(hook):  # the library call as users make it: the engine's cache is sized to the request
        return ours.generate(ids, max_new_tokens=new, stop_token_ids=(), callback=lambda e: hook())

    out = {}
    for name, run in (("transformers", hf_run), ("model_runtime", our_run)):
        best = (0.0, 0.0, [])
        for _ in range(repeats):
            stamps: list[float] = []
            start = time.perf_counter()
            tokens = run(lambda: stamps.append(time.perf_counter()))
            pre, dec = rates(stamps, start, len(ids))
            best = (max(best[0], pre), max(best[1], dec), tokens)
        out[name] = best
    return out


def bench_size(name: str, cfg: ModelConfig, contexts: list[int], new: int, repeats: int) -> list[tuple]:
    from transformers import GlmMoeDsaConfig, GlmMoeDsaForCausalLM

    torch.manual_seed(0)
    hf = GlmMoeDsaForCausalLM(GlmMoeDsaConfig(**cfg.to_dict())).eval()
    hf.generation_config.eos_token_id = None  # decode exactly `new` tokens in both
    path = Path(tempfile.mkdtemp(prefix=f"bench-{name}-"))
    hf.save_pretrained(path)
    ours = load_model(path)
    rows = []
    for ctx in contexts:
        ids = torch.randint(3, cfg.vocab_size, (ctx,), generator=torch.Generator().manual_seed(ctx))
        res = bench_pair(hf, ours, ids, new, repeats)
        (hp, hd, ht), (op, od, ot) = res["transformers"], res["model_runtime"]
        same = ht == ot
        rows.append((name, ctx, "prefill tok/s", hp, op, same))
        rows.append((name, ctx, "decode tok/s", hd, od, same))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="tiny,mid")
    parser.add_argument("--contexts", default="128,1024,2048", help="prompt lengths")
    parser.add_argument("--new", type=int, default=32)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    contexts = [int(c) for c in args.contexts.split(",")]
    print(f"| model | context | metric | transformers {__import__('transformers').__version__} | model_runtime | ratio | same greedy tokens |")
    print("|---|---|---|---|---|---|---|")
    for name in args.sizes.split(","):
        for size, ctx, metric, theirs, ours, same in bench_size(name, SIZES[name], contexts, args.new, args.repeats):
            print(f"| {size} | {ctx} | {metric} | {theirs:,.1f} | {ours:,.1f} | {ours / theirs:.2f}x | {same} |")


if __name__ == "__main__":
    main()

"""Runtime speed against transformers' own `generate`, same weights, prompt and output, one run.

Prints, per model size and prompt length, prefill tokens/s (prompt / time to the first token)
and decode tokens/s (between the first and the last token, from a hook inside each generator)
for transformers and model_runtime, the ratio, and whether the greedy tokens were identical.

With `--whole PROMPT,NEW` (e.g. 600,64) it instead times whole requests as a user makes them
(`generate` with a PROMPT-token prompt and NEW greedy tokens, the model already loaded) for
transformers, model_runtime in fp32, the same with compiled decoding (`compile_decode`,
`model_runtime.compiled`: compiled once before the timed runs, its compile time printed; it
leaves out that start-up cost), and model_runtime with bf16 weights (AMX/avx512_bf16 matmuls
where the CPU has them; not required to give transformers' tokens), then prints
model_runtime's per-decode-step operator profile, eager and compiled (torch.profiler, mean
of NEW steps).

Both implementations run with the same number of intra-op threads: by default the server's
(`model_runtime.runtime.set_threads(0)`: one per core but one, so 1 on a 2-core machine), or
`--threads N`. With 2 threads on 2 cores every parallel region's barrier puts a thread to
sleep and wakes it (the server's OMP_WAIT_POLICY=PASSIVE), which on some machines costs more
than the second thread gains.

Usage: python bench/bench_runtime.py [--sizes tiny,mid] [--contexts 128,1024,2048] [--new 32] [--threads N]
       python bench/bench_runtime.py --sizes mid --whole 600,64
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch loads: see model_runtime/__init__

import torch

from model_runtime import load_model
from model_runtime.config import EngineConfig, ModelConfig
from model_runtime.engine import Engine
from model_runtime.runtime import set_threads

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


def whole_requests(name: str, cfg: ModelConfig, prompt: int, new: int, repeats: int) -> None:
    """Whole `generate` calls, best of `repeats`, interleaved so load changes hit all three alike."""
    from transformers import GlmMoeDsaConfig, GlmMoeDsaForCausalLM

    torch.manual_seed(0)
    hf = GlmMoeDsaForCausalLM(GlmMoeDsaConfig(**cfg.to_dict())).eval()
    hf.generation_config.eos_token_id = None
    path = Path(tempfile.mkdtemp(prefix=f"bench-{name}-"))
    hf.save_pretrained(path)
    fp32, bf16 = load_model(path), load_model(path, dtype=torch.bfloat16)
    ids = torch.randint(3, cfg.vocab_size, (prompt,), generator=torch.Generator().manual_seed(prompt))
    compiled = EngineConfig(max_cache_tokens=prompt + new + 128, compile_decode=True)
    status = fp32.compiled_decode(compiled.block_size).wait()
    print(f"compiled decoding: {status.state} after {status.seconds:.1f} s ({status.wrapper or 'no'} wrapper) {status.error}")
    runs = {
        "transformers": lambda: hf.generate(ids[None], max_new_tokens=new, min_new_tokens=new, do_sample=False)[0, prompt:].tolist(),
        "model_runtime fp32": lambda: fp32.generate(ids, max_new_tokens=new, stop_token_ids=()),
        "model_runtime fp32, compiled decode": lambda: fp32.generate(ids, max_new_tokens=new, stop_token_ids=(), engine_config=compiled),
        "model_runtime bf16 weights": lambda: bf16.generate(ids, max_new_tokens=new, stop_token_ids=()),
    }
    best, tokens = dict.fromkeys(runs, float("inf")), {}
    with torch.no_grad():
        for _ in range(repeats):
            for label, run in runs.items():
                start = time.perf_counter()
                tokens[label] = run()
                best[label] = min(best[label], time.perf_counter() - start)
    ref = tokens["transformers"]
    print("| model | request | implementation | whole request s | vs transformers | greedy tokens equal to transformers' |")
    print("|---|---|---|---|---|---|")
    for label, seconds in best.items():
        same = next((i for i, (a, b) in enumerate(zip(tokens[label], ref)) if a != b), len(ref))
        print(f"| {name} | {prompt} + {new} | {label} | {seconds:.2f} | {best['transformers'] / seconds:.2f}x | {same}/{len(ref)} |")
    decode_profile(fp32, ids.tolist(), new)
    decode_profile(fp32, ids.tolist(), new, compiled)


def decode_profile(loaded, ids: list[int], steps: int, config: EngineConfig | None = None, rows: int = 15) -> None:
    """model_runtime's operators per decode step (the prefill step excluded), by self CPU time;
    with `config`, that engine's (compiled decoding: the graph, with its C++ wrapper, shows as one
    operator; the matrix products inside it are not split out)."""
    from torch.profiler import ProfilerActivity, profile

    from model_runtime.api import GenerationRequest, SamplingParams

    engine = Engine(loaded, config or EngineConfig(max_cache_tokens=4096))
    engine.add(GenerationRequest("p", tuple(ids), SamplingParams(max_tokens=steps + 1, stop_token_ids=())))
    engine.step()  # prefill (a 600-token prompt fits one step)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        while engine.scheduler.has_work:
            engine.step()
    events = prof.key_averages()
    ops = sum(e.self_cpu_time_total for e in events) / steps / 1000
    calls = sum(e.count for e in events if e.key.startswith("aten::")) / steps
    matmuls = sum(e.count for e in events if e.key in ("aten::mm", "aten::bmm", "aten::addmm")) / steps
    label = "compiled" if config is not None and config.compile_decode else "eager"
    print(f"\n{label}, per decode step ({steps} steps, profiled): {ops:.1f} ms in operators, {calls:.0f} aten calls, {matmuls:.0f} matmuls")
    print("| operator | calls/step | self ms/step |")
    print("|---|---|---|")
    for e in sorted(events, key=lambda e: -e.self_cpu_time_total)[:rows]:
        print(f"| {e.key} | {e.count / steps:.1f} | {e.self_cpu_time_total / steps / 1000:.2f} |")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="tiny,mid")
    parser.add_argument("--contexts", default="128,1024,2048", help="prompt lengths")
    parser.add_argument("--new", type=int, default=32)
    parser.add_argument("--threads", type=int, default=0, help="intra-op threads (0: the server's choice)")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--whole", help="PROMPT,NEW: whole-request times (and the decode profile) instead")
    args = parser.parse_args()
    threads = set_threads(args.threads)
    print(f"{threads} intra-op thread(s), OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY')}")
    if args.whole:
        prompt, new = (int(v) for v in args.whole.split(","))
        for name in args.sizes.split(","):
            whole_requests(name, SIZES[name], prompt, new, args.repeats)
        return
    contexts = [int(c) for c in args.contexts.split(",")]
    print(f"| model | context | metric | transformers {__import__('transformers').__version__} | model_runtime | ratio | same greedy tokens |")
    print("|---|---|---|---|---|---|---|")
    for name in args.sizes.split(","):
        for size, ctx, metric, theirs, ours, same in bench_size(name, SIZES[name], contexts, args.new, args.repeats):
            print(f"| {size} | {ctx} | {metric} | {theirs:,.1f} | {ours:,.1f} | {ours / theirs:.2f}x | {same} |")


if __name__ == "__main__":
    main()

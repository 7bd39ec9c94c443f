"""The engine's weight layout for CPU decoding (`Transformer.lay_out_for_decode`).

An engine stores the fp32 weights its steps read through `F.linear` input-major; what the model
computes stays the same within float tolerance, and the greedy tokens stay the same. Models
in bf16, or above the byte budget, keep their layout.
"""

from __future__ import annotations

import torch

from model_runtime import load_model
from model_runtime.api import GenerationRequest, SamplingParams
from model_runtime.config import EngineConfig
from model_runtime.engine import Engine
from model_runtime.model import MLA, MLP


def _input_major(weight: torch.Tensor) -> bool:
    return weight.stride() == (1, weight.shape[0])


def _decode_weights(model) -> list[torch.Tensor]:
    """Every weight a paged step reads through `F.linear` (the fused ones where fused)."""
    out = [model.lm_head.weight, *(mtp.eh_proj.weight for mtp in model.mtp)]
    for module in model.modules():
        if isinstance(module, MLA):
            inputs = [module.fused_in[0]] if module.fused_in is not None else [m.weight for m in module._inputs()]
            out += [*inputs, module.q_b_proj.weight, module.o_proj.weight]
            out += [module.indexer.wq_b.weight] if module.indexer is not None else []
        elif isinstance(module, MLP):
            gate_up = [module.gate_up] if module.gate_up is not None else [module.gate_proj.weight, module.up_proj.weight]
            out += [*gate_up, module.down_proj.weight]
    return out


def _greedy(loaded, prompt: list[int], new: int) -> tuple[list[int], torch.Tensor]:
    engine = Engine(loaded, EngineConfig(max_cache_tokens=1024))
    seq = engine.add(GenerationRequest("r", tuple(prompt), SamplingParams(max_tokens=new, stop_token_ids=())))
    engine.run_until_idle()
    return seq.output_ids, loaded.logits(torch.tensor(prompt + seq.output_ids))


def test_an_engine_lays_its_fp32_weights_out_input_major_with_the_same_results(tiny_ckpt):
    prompt = torch.randint(3, 200, (40,), generator=torch.Generator().manual_seed(5)).tolist()
    reference = load_model(tiny_ckpt)
    reference.model.fuse_for_inference()
    reference.model.laid_out = True  # fused, but in the checkpoint's layout
    tokens, logits = _greedy(reference, prompt, 12)
    assert not any(_input_major(w) for w in _decode_weights(reference.model))

    laid_out = load_model(tiny_ckpt)
    got_tokens, got_logits = _greedy(laid_out, prompt, 12)
    model = laid_out.model
    assert all(_input_major(w) for w in _decode_weights(model))
    assert not any(_input_major(m.self_attn.kv_b_proj.weight) for m in model.layers)  # read as per-head views
    assert got_tokens == tokens
    assert torch.allclose(got_logits, logits, atol=1e-4, rtol=1e-4)


def test_bf16_models_and_models_above_the_budget_keep_their_layout(tiny_ckpt):
    bf16 = load_model(tiny_ckpt, dtype=torch.bfloat16).model
    bf16.ensure_fused()
    above = load_model(tiny_ckpt).model
    above.fuse_for_inference()
    above.lay_out_for_decode(max_bytes=1 << 10)
    for model in (bf16, above):
        assert model.laid_out
        assert not any(_input_major(w) for w in _decode_weights(model))

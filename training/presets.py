"""Model size presets for the embedded model: GLM-5's architecture, shrunk for a 2-core CPU.

Every preset keeps every GLM-5 code path: MLA with low-rank q and kv, RoPE last in MLA and first
in the indexer, a DSA indexer whose `index_topk` is below the training context (so sparse
attention is really used), dense layers then sigmoid-routed MoE layers with a shared expert,
and one MTP layer.

Invariants:
- `model_config` fills vocabulary and special ids from the tokenizer, never from constants.
- `max_position_embeddings` is the training context: the model has not seen positions beyond it.
"""

from __future__ import annotations

from typing import Any

from model_runtime.config import ModelConfig

PRESETS: dict[str, dict[str, Any]] = {
    # CI and tests: seconds per step at context 128.
    "tiny": dict(
        hidden_size=64, num_hidden_layers=2, num_attention_heads=2, q_lora_rank=32, kv_lora_rank=32,
        qk_nope_head_dim=16, qk_rope_head_dim=16, v_head_dim=16,
        index_topk=32, index_n_heads=2, index_head_dim=32,
        intermediate_size=128, moe_intermediate_size=64, first_k_dense_replace=1,
        n_routed_experts=4, num_experts_per_tok=2, n_shared_experts=1,
    ),
    # ~7.5M active parameters per token (4 layers + MTP + head, d256; 16.7M in total): the size
    # environment.md measured at ~3.4k tokens/s of training on this machine.
    "small": dict(
        hidden_size=256, num_hidden_layers=4, num_attention_heads=4, q_lora_rank=128, kv_lora_rank=128,
        qk_nope_head_dim=32, qk_rope_head_dim=32, v_head_dim=32,
        index_topk=256, index_n_heads=4, index_head_dim=64,
        intermediate_size=768, moe_intermediate_size=384, first_k_dense_replace=1,
        n_routed_experts=8, num_experts_per_tok=2, n_shared_experts=1,
    ),
    # ~13M active parameters: fewer tokens in the same time, more capacity; ~27M in total,
    # which still ships in bf16 under the 64 MB budget.
    "medium": dict(
        hidden_size=384, num_hidden_layers=6, num_attention_heads=6, q_lora_rank=192, kv_lora_rank=192,
        qk_nope_head_dim=32, qk_rope_head_dim=32, v_head_dim=32,
        index_topk=256, index_n_heads=4, index_head_dim=64,
        intermediate_size=1024, moe_intermediate_size=256, first_k_dense_replace=1,
        n_routed_experts=8, num_experts_per_tok=2, n_shared_experts=1,
    ),
}


def model_config(preset: str, vocab_size: int, eos_id: int, context: int) -> ModelConfig:
    """The preset's config for a tokenizer of `vocab_size` with eos/pad `eos_id`."""
    if preset not in PRESETS:
        raise ValueError(f"unknown preset {preset!r}; choose from {', '.join(PRESETS)}")
    values = PRESETS[preset] | dict(
        vocab_size=vocab_size, max_position_embeddings=context, num_key_value_heads=PRESETS[preset]["num_attention_heads"],
        n_group=1, topk_group=1, num_nextn_predict_layers=1,
        bos_token_id=None, eos_token_id=(eos_id,), pad_token_id=eos_id,
    )
    if values["index_topk"] >= context:
        raise ValueError(f"index_topk {values['index_topk']} must be below the context {context} for DSA to be sparse")
    return ModelConfig(**values)


def parameter_counts(cfg: ModelConfig) -> dict[str, int]:
    """Total parameters, and those active per token (the routed experts count only top-k of E;
    the embedding lookup counts as free, the output head does not)."""
    import torch

    from model_runtime.model import Transformer

    with torch.device("meta"):
        model = Transformer(cfg)
    total = sum(p.numel() for p in model.parameters())
    expert = sum(p.numel() for n, p in model.named_parameters() if ".experts." in n)
    per_expert = expert / cfg.n_routed_experts
    active = total - expert + per_expert * cfg.num_experts_per_tok - model.embed_tokens.weight.numel()
    return {"total": total, "active": int(active)}

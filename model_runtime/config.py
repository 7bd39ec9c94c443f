"""Model and engine configuration.

Role: `ModelConfig` mirrors the Hugging Face `config.json` of `glm_moe_dsa` (GLM-5) key for
key, so a checkpoint's config loads without a renaming table. `EngineConfig` holds the
runtime's own knobs (cache blocks, batching, speculative decoding).

Invariants:
- `ModelConfig` is frozen; derived per-layer schedules (`mlp_layer_types`, `indexer_types`) are
  computed once in `__post_init__` and stored as tuples.
- Bad values raise `ValueError` naming the key. Unknown keys are kept in `extra` and logged,
  never silently dropped.
- No torch import: the language server reads configs too.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

SUPPORTED_MODEL_TYPES = ("glm_moe_dsa",)

# Keys we read but that carry no information for inference (HF bookkeeping).
_IGNORED_KEYS = frozenset(
    {
        "architectures", "transformers_version", "torch_dtype", "dtype", "use_cache",
        "initializer_range", "output_router_logits", "attention_dropout", "layer_types",
        "mlp_bias", "qk_head_dim", "head_dim", "ep_size", "auto_map", "_name_or_path",
        "num_experts", "tie_word_embeddings", "quantization_config", "moe_layer_freq",
        "scoring_func", "topk_method", "rope_interleave", "indexer_rope_interleave",
        "rope_scaling", "rope_theta", "index_topk_freq", "index_skip_topk_offset",
        "index_topk_pattern", "model_type",
    }
)


@dataclass(frozen=True)
class ModelConfig:
    """GLM-5 architecture hyper-parameters, named exactly as in HF `config.json`."""

    model_type: str = "glm_moe_dsa"
    vocab_size: int = 154880
    hidden_size: int = 6144
    num_hidden_layers: int = 78
    rms_norm_eps: float = 1e-5
    hidden_act: str = "silu"
    max_position_embeddings: int = 202752
    rope_parameters: dict[str, Any] = field(
        default_factory=lambda: {"rope_theta": 1_000_000.0, "rope_type": "default"}
    )
    tie_word_embeddings: bool = False
    bos_token_id: int | None = 0
    eos_token_id: tuple[int, ...] = (154820, 154827, 154829)
    pad_token_id: int | None = 154820
    # mla
    num_attention_heads: int = 64
    num_key_value_heads: int = 64
    q_lora_rank: int = 2048
    kv_lora_rank: int = 512
    qk_nope_head_dim: int = 192
    qk_rope_head_dim: int = 64
    v_head_dim: int = 256
    attention_bias: bool = False
    rope_interleave: bool = True
    # dsa indexer
    index_topk: int = 2048
    index_n_heads: int = 32
    index_head_dim: int = 128
    indexer_rope_interleave: bool = True
    index_topk_freq: int = 1
    index_skip_topk_offset: int = 2
    index_topk_pattern: str | None = None
    indexer_types: tuple[str, ...] = ()
    # mlp / moe
    intermediate_size: int = 12288
    moe_intermediate_size: int = 2048
    first_k_dense_replace: int = 3
    moe_layer_freq: int = 1
    mlp_layer_types: tuple[str, ...] = ()
    n_routed_experts: int = 256
    num_experts_per_tok: int = 8
    n_shared_experts: int = 1
    n_group: int = 1
    topk_group: int = 1
    norm_topk_prob: bool = True
    routed_scaling_factor: float = 2.5
    scoring_func: str = "sigmoid"
    topk_method: str = "noaux_tc"
    # mtp
    num_nextn_predict_layers: int = 1
    # keys this runtime does not know, kept verbatim
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._validate()
        set_ = object.__setattr__
        set_(self, "eos_token_id", _as_int_tuple("eos_token_id", self.eos_token_id))
        set_(self, "mlp_layer_types", self._derive_mlp_types())
        set_(self, "indexer_types", self._derive_indexer_types())

    # ---- derived quantities -------------------------------------------------------------
    @property
    def qk_head_dim(self) -> int:
        return self.qk_nope_head_dim + self.qk_rope_head_dim

    @property
    def rope_theta(self) -> float:
        return float(self.rope_parameters["rope_theta"])

    @property
    def kv_cache_dim(self) -> int:
        """Values cached per token per layer for attention: latent + rope key."""
        return self.kv_lora_rank + self.qk_rope_head_dim

    @property
    def softmax_scale(self) -> float:
        return self.qk_head_dim**-0.5

    def is_moe_layer(self, layer: int) -> bool:
        return self.mlp_layer_types[layer] == "sparse"

    @property
    def num_cache_layers(self) -> int:
        """Main layers plus MTP layers: each has its own KV and indexer cache."""
        return self.num_hidden_layers + self.num_nextn_predict_layers

    # ---- construction ------------------------------------------------------------------
    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> ModelConfig:
        """Build from a parsed `config.json`; unknown keys go to `extra` (and are logged)."""
        raw = dict(raw)
        model_type = raw.get("model_type")
        if model_type not in SUPPORTED_MODEL_TYPES:
            raise ValueError(
                f"model_type: unsupported {model_type!r}; this runtime supports {SUPPORTED_MODEL_TYPES}"
            )
        if "rope_parameters" not in raw:
            raw["rope_parameters"] = _legacy_rope(raw)
        names = {f.name for f in dataclasses.fields(cls)} - {"extra"}
        known = {k: v for k, v in raw.items() if k in names}
        unknown = {k: v for k, v in raw.items() if k not in names and k not in _IGNORED_KEYS}
        if unknown:
            log.info("config.json: keeping unknown keys %s", sorted(unknown))
        for key in ("indexer_types", "mlp_layer_types"):
            if known.get(key) is not None:
                known[key] = tuple(known[key])
            else:
                known.pop(key, None)
        if isinstance(known.get("index_topk_pattern"), list):
            known["index_topk_pattern"] = "".join(
                {"full": "F", "shared": "S"}.get(x, x) for x in known["index_topk_pattern"]
            )
        return cls(**known, extra=unknown)

    @classmethod
    def from_file(cls, path: str | Path) -> ModelConfig:
        path = Path(path)
        try:
            raw = json.loads(path.read_text())
        except FileNotFoundError:
            raise ValueError(f"{path}: missing") from None
        except (OSError, json.JSONDecodeError) as exc:
            raise ValueError(f"{path}: not valid JSON: {exc}") from exc
        if not isinstance(raw, dict):
            raise ValueError(f"{path}: expected a JSON object")
        return cls.from_dict(raw)

    def to_dict(self) -> dict[str, Any]:
        """The HF `config.json` form (loadable by transformers' `GlmMoeDsaConfig`)."""
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "extra"}
        out["eos_token_id"] = list(self.eos_token_id)
        out["mlp_layer_types"] = list(self.mlp_layer_types)
        out["indexer_types"] = list(self.indexer_types)
        if out["index_topk_pattern"] is None:
            del out["index_topk_pattern"]
        out["architectures"] = ["GlmMoeDsaForCausalLM"]
        out["head_dim"] = self.qk_rope_head_dim
        out["qk_head_dim"] = self.qk_head_dim
        return {**self.extra, **out}

    def replace(self, **changes: Any) -> ModelConfig:
        changes.setdefault("indexer_types", ())
        changes.setdefault("mlp_layer_types", ())
        return dataclasses.replace(self, **changes)

    @classmethod
    def tiny(cls, vocab_size: int = 512, **overrides: Any) -> ModelConfig:
        """A few-layer config that keeps every code path: a dense layer and MoE layers,
        group-limited routing, an indexer top-k smaller than test sequences, an MTP layer."""
        base: dict[str, Any] = dict(
            vocab_size=vocab_size, hidden_size=64, num_hidden_layers=3, max_position_embeddings=4096,
            num_attention_heads=4, num_key_value_heads=4, q_lora_rank=32, kv_lora_rank=32,
            qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=16,
            index_topk=8, index_n_heads=4, index_head_dim=16,
            intermediate_size=128, moe_intermediate_size=32, first_k_dense_replace=1,
            n_routed_experts=8, num_experts_per_tok=2, n_shared_experts=1, n_group=2, topk_group=1,
            bos_token_id=None, eos_token_id=(0,), pad_token_id=0,
        )
        base.update(overrides)
        return cls(**base)

    # ---- validation --------------------------------------------------------------------
    def _validate(self) -> None:
        positive = (
            "vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "q_lora_rank",
            "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim", "index_topk",
            "index_n_heads", "index_head_dim", "intermediate_size", "moe_intermediate_size",
            "n_routed_experts", "num_experts_per_tok", "n_group", "topk_group",
            "max_position_embeddings", "index_topk_freq", "moe_layer_freq",
        )
        for key in positive:
            value = getattr(self, key)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ValueError(f"{key}: expected a positive integer, got {value!r}")
        for key in ("first_k_dense_replace", "n_shared_experts", "num_nextn_predict_layers", "index_skip_topk_offset"):
            value = getattr(self, key)
            if not isinstance(value, int) or value < 0:
                raise ValueError(f"{key}: expected a non-negative integer, got {value!r}")
        checks = [
            ("model_type", self.model_type in SUPPORTED_MODEL_TYPES, f"unsupported {self.model_type!r}"),
            ("num_key_value_heads", self.num_key_value_heads == self.num_attention_heads,
             "MLA needs num_key_value_heads == num_attention_heads"),
            ("qk_rope_head_dim", self.qk_rope_head_dim % 2 == 0, "must be even (RoPE rotates pairs)"),
            ("index_head_dim", self.index_head_dim >= self.qk_rope_head_dim,
             "must be >= qk_rope_head_dim (the indexer ropes its first qk_rope_head_dim dims)"),
            ("n_group", self.n_routed_experts % self.n_group == 0, "must divide n_routed_experts"),
            ("topk_group", self.topk_group <= self.n_group, "must be <= n_group"),
            ("num_experts_per_tok", self.num_experts_per_tok <= self.n_routed_experts,
             "must be <= n_routed_experts"),
            ("hidden_act", self.hidden_act == "silu", f"only 'silu' is supported, got {self.hidden_act!r}"),
            ("scoring_func", self.scoring_func == "sigmoid", f"only 'sigmoid' is supported, got {self.scoring_func!r}"),
            ("rms_norm_eps", isinstance(self.rms_norm_eps, (int, float)) and self.rms_norm_eps > 0, "must be > 0"),
            ("routed_scaling_factor", isinstance(self.routed_scaling_factor, (int, float))
             and self.routed_scaling_factor > 0, "must be > 0"),
            ("tie_word_embeddings", not self.tie_word_embeddings, "GLM-5 has an untied head; tied is unsupported"),
        ]
        for key, ok, why in checks:
            if not ok:
                raise ValueError(f"{key}: {why}")
        if self.n_group > 1 and (self.n_routed_experts // self.n_group) < 2:
            raise ValueError("n_group: group-limited routing needs at least 2 experts per group")
        if self.topk_group * (self.n_routed_experts // self.n_group) < self.num_experts_per_tok:
            raise ValueError("topk_group: the kept groups hold fewer experts than num_experts_per_tok")
        rope = self.rope_parameters
        if not isinstance(rope, dict) or "rope_theta" not in rope:
            raise ValueError("rope_parameters: expected an object with 'rope_theta'")
        if rope.get("rope_type", "default") != "default":
            raise ValueError(f"rope_parameters: rope_type {rope.get('rope_type')!r} is unsupported (GLM-5 uses 'default')")
        if not self.rope_interleave or not self.indexer_rope_interleave:
            raise ValueError("rope_interleave: GLM-5 uses interleaved RoPE in MLA and the indexer; NeoX is unsupported")
        if self.first_k_dense_replace > self.num_hidden_layers:
            raise ValueError("first_k_dense_replace: larger than num_hidden_layers")

    def _derive_mlp_types(self) -> tuple[str, ...]:
        n = self.num_hidden_layers
        if self.mlp_layer_types:
            types = tuple(self.mlp_layer_types)
            if len(types) != n or set(types) - {"dense", "sparse"}:
                raise ValueError("mlp_layer_types: expected num_hidden_layers entries of 'dense'/'sparse'")
            return types
        return tuple(
            "sparse" if i >= self.first_k_dense_replace and i % self.moe_layer_freq == 0 else "dense"
            for i in range(n)
        )

    def _derive_indexer_types(self) -> tuple[str, ...]:
        """Per layer 'full' (own indexer) or 'shared' (reuse the previous full layer's top-k)."""
        n = self.num_hidden_layers
        if self.indexer_types:
            types = tuple(self.indexer_types)
        elif self.index_topk_pattern:
            mapping = {"F": "full", "S": "shared"}
            if set(self.index_topk_pattern) - set(mapping):
                raise ValueError("index_topk_pattern: only 'F' and 'S' are allowed")
            types = tuple(mapping[c] for c in self.index_topk_pattern)
        else:
            freq, offset = self.index_topk_freq, self.index_skip_topk_offset
            types = tuple("full" if max(i - offset + 1, 0) % freq == 0 else "shared" for i in range(n))
        if len(types) != n or set(types) - {"full", "shared"}:
            raise ValueError("indexer_types: expected num_hidden_layers entries of 'full'/'shared'")
        if types and types[0] != "full":
            raise ValueError("indexer_types: layer 0 must be 'full' (a shared layer needs an earlier full one)")
        return types


def _as_int_tuple(key: str, value: Any) -> tuple[int, ...]:
    if value is None:
        return ()
    if isinstance(value, int) and not isinstance(value, bool):
        return (value,)
    if isinstance(value, (list, tuple)) and all(isinstance(v, int) for v in value):
        return tuple(value)
    raise ValueError(f"{key}: expected an integer or a list of integers, got {value!r}")


def _legacy_rope(raw: dict[str, Any]) -> dict[str, Any]:
    """Older configs carry `rope_theta` (+ `rope_scaling`) instead of `rope_parameters`."""
    params = dict(raw.get("rope_scaling") or {})
    params.setdefault("rope_type", params.pop("type", "default"))
    params["rope_theta"] = raw.get("rope_theta", 1_000_000.0)
    return params


@dataclass(frozen=True, slots=True)
class EngineConfig:
    """Runtime knobs of the generation engine (not part of the checkpoint)."""

    block_size: int = 64  # tokens per KV-cache block
    max_cache_tokens: int = 65536  # device-tier capacity of the paged cache, in tokens
    max_prefill_tokens: int = 4096  # prompt tokens prefilled per engine step (chunked prefill)
    # Per length bucket: (upper bound on context tokens, max sequences decoded together).
    batch_buckets: tuple[tuple[int, int], ...] = ((512, 16), (2048, 8), (8192, 4), (1 << 30, 2))
    use_mtp: bool = False  # speculative decoding with the MTP layer (greedy requests only)
    # torch.compile decode steps in a background thread, CPU only (model_runtime.compiled);
    # inductor's code is cached under `compile_cache_dir` ("": torch's default, /tmp)
    compile_decode: bool = False
    compile_cache_dir: str = ""
    prefix_caching: bool = True
    attention: str = "auto"  # "auto" | "absorbed" | "expanded"
    # KV cache tiers behind the device pool (model_runtime.kvstore): LRU caps in bytes
    host_cache_bytes: int = 1 << 30  # warm: blocks evicted from the device pool, in host RAM
    disk_cache_bytes: int = 8 << 30  # cold: per workspace and model, once Engine.open_workspace ran
    # Sparse residency: per sequence, keep the latents of at most `resident_latent_tokens` tokens
    # on the device (0 = all); older full blocks move to `latent_spill_tokens` of host memory
    # while their indexer keys stay on the device.
    latent_spill_tokens: int = 0
    resident_latent_tokens: int = 0

    def __post_init__(self) -> None:
        if self.block_size <= 0 or self.block_size & (self.block_size - 1):
            raise ValueError(f"block_size: expected a positive power of two, got {self.block_size}")
        if self.max_cache_tokens < self.block_size:
            raise ValueError("max_cache_tokens: smaller than one block")
        if self.max_prefill_tokens <= 0:
            raise ValueError("max_prefill_tokens: must be > 0")
        bounds = [b for b, _ in self.batch_buckets]
        if not self.batch_buckets or bounds != sorted(bounds) or any(n <= 0 for _, n in self.batch_buckets):
            raise ValueError("batch_buckets: expected ascending (max_context, max_batch) pairs with max_batch > 0")
        if self.attention not in ("auto", "absorbed", "expanded"):
            raise ValueError(f"attention: expected auto/absorbed/expanded, got {self.attention!r}")
        for key in ("host_cache_bytes", "disk_cache_bytes", "latent_spill_tokens", "resident_latent_tokens"):
            if getattr(self, key) < 0:
                raise ValueError(f"{key}: must be >= 0")
        if self.resident_latent_tokens and not self.latent_spill_tokens:
            raise ValueError("resident_latent_tokens: needs latent_spill_tokens > 0 (where spilled latents go)")
        if self.resident_latent_tokens and self.resident_latent_tokens < 2 * self.block_size:
            raise ValueError("resident_latent_tokens: must be at least two blocks (the one being written and one more)")

    def max_batch_for(self, context_tokens: int) -> int:
        for bound, size in self.batch_buckets:
            if context_tokens <= bound:
                return size
        return self.batch_buckets[-1][1]

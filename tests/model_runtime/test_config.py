"""ModelConfig: exact HF keys, the indexer schedule, validation errors that name the key."""

from __future__ import annotations

import json
import logging

import pytest

from model_runtime.config import EngineConfig, ModelConfig

GLM5_CONFIG = {  # the real GLM-5 config.json values (architecture spec, section 1)
    "architectures": ["GlmMoeDsaForCausalLM"], "model_type": "glm_moe_dsa", "vocab_size": 154880,
    "hidden_size": 6144, "num_hidden_layers": 78, "first_k_dense_replace": 3, "moe_layer_freq": 1,
    "intermediate_size": 12288, "moe_intermediate_size": 2048, "n_routed_experts": 256,
    "num_experts_per_tok": 8, "n_shared_experts": 1, "n_group": 1, "topk_group": 1,
    "routed_scaling_factor": 2.5, "norm_topk_prob": True, "scoring_func": "sigmoid", "topk_method": "noaux_tc",
    "num_attention_heads": 64, "num_key_value_heads": 64, "q_lora_rank": 2048, "kv_lora_rank": 512,
    "qk_nope_head_dim": 192, "qk_rope_head_dim": 64, "qk_head_dim": 256, "v_head_dim": 256, "head_dim": 64,
    "index_n_heads": 32, "index_head_dim": 128, "index_topk": 2048, "rope_interleave": True,
    "indexer_rope_interleave": True, "rope_parameters": {"rope_theta": 1000000, "rope_type": "default"},
    "max_position_embeddings": 202752, "rms_norm_eps": 1e-5, "hidden_act": "silu", "attention_bias": False,
    "tie_word_embeddings": False, "num_nextn_predict_layers": 1, "bos_token_id": 0,
    "eos_token_id": [154820, 154827, 154829], "pad_token_id": 154820, "dtype": "bfloat16",
    "transformers_version": "5.0.2.dev0",
}


def test_real_glm5_config_loads():
    cfg = ModelConfig.from_dict(GLM5_CONFIG)
    assert cfg.mlp_layer_types[:4] == ("dense", "dense", "dense", "sparse")
    assert cfg.mlp_layer_types.count("sparse") == 75
    assert set(cfg.indexer_types) == {"full"} and len(cfg.indexer_types) == 78
    assert cfg.kv_cache_dim == 576 and cfg.qk_head_dim == 256
    assert cfg.eos_token_id == (154820, 154827, 154829)
    assert cfg.num_cache_layers == 79


def test_index_cache_schedule_matches_hf_formula():
    cfg = ModelConfig.from_dict(GLM5_CONFIG | {"index_topk_freq": 4, "index_skip_topk_offset": 3})
    expected = ["full" if max(i - 3 + 1, 0) % 4 == 0 else "shared" for i in range(78)]
    assert list(cfg.indexer_types) == expected
    assert cfg.indexer_types.count("full") == 21


def test_pattern_overrides_schedule():
    cfg = ModelConfig.tiny(index_topk_pattern="FSF")
    assert cfg.indexer_types == ("full", "shared", "full")


def test_config_round_trips_through_transformers():
    from transformers import GlmMoeDsaConfig

    cfg = ModelConfig.tiny(index_topk_freq=2, index_skip_topk_offset=2, num_hidden_layers=4)
    hf = GlmMoeDsaConfig(**cfg.to_dict())
    assert list(hf.indexer_types) == list(cfg.indexer_types)
    assert list(hf.mlp_layer_types) == list(cfg.mlp_layer_types)
    again = ModelConfig.from_dict(json.loads(hf.to_json_string()))
    assert again.indexer_types == cfg.indexer_types and again.index_topk == cfg.index_topk


def test_unknown_keys_are_kept_and_logged(caplog):
    with caplog.at_level(logging.INFO, logger="model_runtime.config"):
        cfg = ModelConfig.from_dict(GLM5_CONFIG | {"index_share_for_mtp_iteration": True, "my_key": 3})
    assert cfg.extra == {"index_share_for_mtp_iteration": True, "my_key": 3}
    assert "my_key" in caplog.text
    assert cfg.to_dict()["my_key"] == 3


def test_legacy_rope_theta_key():
    raw = {k: v for k, v in GLM5_CONFIG.items() if k != "rope_parameters"} | {"rope_theta": 8e6}
    assert ModelConfig.from_dict(raw).rope_theta == 8e6


@pytest.mark.parametrize(
    "key, value",
    [
        ("hidden_size", 0), ("num_attention_heads", -4), ("index_topk", "big"), ("qk_rope_head_dim", 63),
        ("n_group", 3), ("topk_group", 2), ("num_experts_per_tok", 300), ("hidden_act", "gelu"),
        ("num_key_value_heads", 8), ("eos_token_id", "eos"), ("index_head_dim", 32),
        ("first_k_dense_replace", 100), ("tie_word_embeddings", True),
    ],
)
def test_bad_values_name_the_key(key, value):
    with pytest.raises(ValueError, match=key):
        ModelConfig.from_dict(GLM5_CONFIG | {key: value})


def test_yarn_and_neox_are_rejected_clearly():
    with pytest.raises(ValueError, match="rope_parameters"):
        ModelConfig.from_dict(GLM5_CONFIG | {"rope_parameters": {"rope_theta": 1e6, "rope_type": "yarn"}})
    with pytest.raises(ValueError, match="rope_interleave"):
        ModelConfig.from_dict(GLM5_CONFIG | {"indexer_rope_interleave": False})


def test_unsupported_model_type():
    with pytest.raises(ValueError, match="model_type"):
        ModelConfig.from_dict(GLM5_CONFIG | {"model_type": "llama"})


def test_engine_config_validation_and_buckets():
    cfg = EngineConfig(batch_buckets=((100, 8), (1000, 2)))
    assert cfg.max_batch_for(50) == 8 and cfg.max_batch_for(500) == 2 and cfg.max_batch_for(10**6) == 2
    with pytest.raises(ValueError, match="block_size"):
        EngineConfig(block_size=48)
    with pytest.raises(ValueError, match="batch_buckets"):
        EngineConfig(batch_buckets=((1000, 2), (100, 8)))

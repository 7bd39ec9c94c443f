"""Fixtures: tiny random GLM-5 models from transformers (the numerical oracle) saved in the hub
layout, and their FP8 copies. Built once per session; nothing is downloaded."""

from __future__ import annotations

import pytest
import torch

from model_runtime.config import ModelConfig


def hf_model(cfg: ModelConfig, seed: int = 0):
    from transformers import GlmMoeDsaConfig, GlmMoeDsaForCausalLM

    torch.manual_seed(seed)
    model = GlmMoeDsaForCausalLM(GlmMoeDsaConfig(**cfg.to_dict())).eval()
    model.config._attn_implementation = "eager"
    with torch.no_grad():  # exercise the norm weights and the router bias
        for name, p in model.named_parameters():
            if "norm" in name and p.dim() == 1:
                p.uniform_(0.5, 1.5) if name.endswith("weight") else p.uniform_(-0.1, 0.1)
        for name, b in model.named_buffers():
            if "e_score_correction_bias" in name:
                b.uniform_(-0.05, 0.05)
    return model


ORACLE_CONFIGS = {
    # group-limited routing (2 groups), 8 indexer heads, top-k 8
    "grouped": ModelConfig.tiny(vocab_size=256, index_n_heads=8, num_nextn_predict_layers=0),
    # IndexCache schedule: layers 0,1,3 run their own indexer, layer 2 reuses layer 1's top-k
    "shared-indexer": ModelConfig.tiny(
        vocab_size=256, index_n_heads=8, num_hidden_layers=4, index_topk_freq=2, index_skip_topk_offset=2,
        n_group=1, topk_group=1, num_nextn_predict_layers=0,
    ),
}


@pytest.fixture(scope="session", params=sorted(ORACLE_CONFIGS))
def oracle(request, tmp_path_factory):
    """(transformers model, checkpoint directory it saved)."""
    cfg = ORACLE_CONFIGS[request.param]
    model = hf_model(cfg)
    path = tmp_path_factory.mktemp(f"hf-{request.param}")
    model.save_pretrained(path)
    return model, path


@pytest.fixture(scope="session")
def tiny_ckpt(tmp_path_factory):
    """A tiny random checkpoint of our own, with a tokenizer and an MTP layer."""
    from model_runtime.testing import make_tiny_checkpoint

    return make_tiny_checkpoint(tmp_path_factory.mktemp("tiny"))


@pytest.fixture(scope="module")
def tiny(tiny_ckpt):
    """The tiny checkpoint, loaded afresh for each test module: an engine prepares its model for
    decoding (weights fused and laid out anew), which changes the low bits of what it computes."""
    from model_runtime import load_model

    return load_model(tiny_ckpt)

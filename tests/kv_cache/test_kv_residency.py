"""Sparse residency: the gather that maps selected slots to compact rows, and whole generations
with most latents spilled to the host giving the same tokens as a fully resident cache, with
the device blocks a sequence holds bounded while its context grows past the device pool."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from kv_engine_support import generate, prompt
from model_runtime.api import GenerationRequest, SamplingParams
from model_runtime.cache import KVCache
from model_runtime.config import EngineConfig, ModelConfig
from model_runtime.engine import Engine
from model_runtime.kvstore.residency import SpilledLatents

BS = 16
SPARSE = EngineConfig(block_size=BS, max_cache_tokens=128, latent_spill_tokens=1024, resident_latent_tokens=48, max_prefill_tokens=32)
FULL = EngineConfig(block_size=BS, max_cache_tokens=2048, max_prefill_tokens=32)


def test_gather_maps_device_and_spilled_slots_to_compact_rows_in_order():
    cfg = ModelConfig.tiny(num_hidden_layers=2, num_nextn_predict_layers=0)
    cache = KVCache(cfg, 4, 4, torch.float32, "cpu", spill_blocks=4)
    for t in (*cache.kv, *cache.spill):
        t.copy_(torch.randn(t.shape))
    width = cfg.kv_cache_dim
    slots = torch.tensor([[3, 20, -1, 17, 5], [-1, -1, 30, 3, 2]])  # 16 device slots; 16.. are spilled
    every = torch.cat([cache.kv[1].view(-1, width), cache.spill[1].view(-1, width)])
    for latents in (cache.kv[1], cache.kv[1].view(-1, width)):  # the layer's cache or a view of it
        rows, renumbered = SpilledLatents(cache).gather(latents, slots)
        flat = rows.view(-1, width)
        valid = slots >= 0
        assert torch.equal(flat[renumbered[valid]], every[slots[valid]])
        assert (renumbered[~valid] == -1).all()
        order = slots[valid].argsort()
        assert (renumbered[valid][order].diff() >= 0).all()  # slot order is kept
    assert cache.spill_rows_read == 2 * 3  # slots 17, 20, 30, once per gather


def test_no_gather_when_no_block_is_spilled():
    cfg = ModelConfig.tiny(num_hidden_layers=2, num_nextn_predict_layers=0)
    cache = KVCache(cfg, 4, 4, torch.float32, "cpu", spill_blocks=4)
    assert SpilledLatents.for_step(cache, [[0, 1], [3]]) is None
    assert SpilledLatents.for_step(cache, [[0, 5]]) is not None


@pytest.mark.parametrize("use_mtp, attention", [(False, "auto"), (True, "auto"), (False, "expanded")])
def test_spilled_latents_give_the_same_tokens_with_bounded_device_blocks(tiny, use_mtp, attention):
    ids = prompt(300, seed=20)  # 19 blocks: more than the whole device pool of 8
    engine = Engine(tiny, dataclasses.replace(SPARSE, use_mtp=use_mtp, attention=attention))
    out: list = []
    seq = engine.add(GenerationRequest("long", tuple(ids), SamplingParams(max_tokens=24)), None, out.append)
    peak = 0
    while engine.scheduler.has_work:
        engine.step()
        peak = max(peak, sum(1 for b in seq.block_table if not engine.cache.is_spilled(b)))
    assert peak <= 48 // BS + 32 // BS + 1  # the resident cap plus one prefill chunk
    assert engine.cache.spill_rows_read > 0
    full_engine = Engine(tiny, dataclasses.replace(FULL, use_mtp=use_mtp, attention=attention))
    assert out[0].token_ids == generate(full_engine, ids, max_tokens=24).token_ids
    again = generate(engine, ids + [7], max_tokens=6)  # its prefix is mostly in spilled blocks
    assert again.cached_tokens >= 288
    assert again.token_ids == generate(full_engine, ids + [7], max_tokens=6).token_ids

"""The engine over its cache tiers: reuse from the device pool, host RAM and disk (after a
restart) gives the same output as a cold run; models, workspaces and clears keep caches apart;
prefill-only warm-up; in-flight extension; idle persistence; two engines on one workspace."""

from __future__ import annotations

import logging
import threading
import time

import pytest
import torch

import model_runtime.engine as engine_module
from kv_engine_support import block_rows, generate, prompt
from model_runtime import load_model
from model_runtime.api import FinishReason, GenerationRequest, SamplingParams
from model_runtime.cache import ROOT_HASH, chain_hash
from model_runtime.config import EngineConfig
from model_runtime.engine import Engine
from model_runtime.kvstore.disk import DiskStore
from model_runtime.kvstore.tiers import tail_key

BS = 16
CFG = EngineConfig(block_size=BS, max_cache_tokens=512)
SMALL = EngineConfig(block_size=BS, max_cache_tokens=128)  # 8 blocks: a second prompt evicts the first


def full_block_hashes(ids: list[int]) -> list[bytes]:
    hashes, prev = [], ROOT_HASH
    for start in range(0, len(ids) - len(ids) % BS, BS):
        prev = chain_hash(prev, ids[start : start + BS])
        hashes.append(prev)
    return hashes


def open_ws(engine: Engine, tmp_path, name: str = "ws") -> str:
    return engine.open_workspace([str(tmp_path / name)], str(tmp_path / "cache"))


def stored(directory: str, engine: Engine) -> set[bytes]:
    store = DiskStore(directory, engine.loaded.fingerprint, engine.tiers.layout, 1 << 40)
    return {bytes.fromhex(key) for key in store.entries}


@pytest.mark.parametrize("tier", ["device", "host", "disk"])
def test_reuse_from_every_tier_matches_a_cold_run(tiny, tmp_path, tier):
    base = prompt(100, seed=1)
    hashes = full_block_hashes(base)
    first = Engine(tiny, SMALL if tier == "host" else CFG)
    if tier == "disk":
        open_ws(first, tmp_path)
    generate(first, base)
    rows = [block_rows(first, h) for h in hashes]
    engine = first
    if tier == "host":
        generate(first, prompt(120, seed=2))  # needs the whole pool: base's blocks move to host RAM
        assert not any(h in first.blocks.by_hash for h in hashes)
    if tier == "disk":
        first.shutdown()  # persists; a new engine is a restarted server
        engine = Engine(tiny, CFG)
        open_ws(engine, tmp_path)
    warm = generate(engine, base + [5, 6])
    assert warm.cached_tokens >= 96 and warm.prefilled_tokens == 102 - warm.cached_tokens
    stats = engine.cache_stats()
    assert (stats["host_hits"], stats["disk_hits"]) == {"device": (0, 0), "host": (6, 0), "disk": (0, 6)}[tier]
    for h, (kv, index) in zip(hashes, rows):
        again_kv, again_index = block_rows(engine, h)
        assert torch.equal(kv, again_kv) and torch.equal(index, again_index)
    cold = generate(Engine(tiny, CFG), base + [5, 6])
    assert warm.token_ids == cold.token_ids and cold.cached_tokens == 0


def test_blocks_go_from_device_to_host_to_disk_within_each_cap(tiny, tmp_path):
    per_block = tiny.config.num_cache_layers * BS * (tiny.config.kv_cache_dim + tiny.config.index_head_dim) * 4
    engine = Engine(tiny, EngineConfig(block_size=BS, max_cache_tokens=128, host_cache_bytes=3 * per_block))
    open_ws(engine, tmp_path)
    prompts = [prompt(100, seed=s) for s in range(10, 14)]
    for ids in prompts:
        generate(engine, ids, max_tokens=2)
        assert engine.tiers.host.total_bytes <= 3 * per_block
    engine.tiers.flush()
    first = full_block_hashes(prompts[0])
    assert not any(h in engine.blocks.by_hash or h in engine.tiers.host for h in first)
    again = generate(engine, prompts[0], max_tokens=2)
    assert engine.cache_stats()["disk_hits"] == len(first) == 6 and again.cached_tokens == 96


def test_a_corrupt_block_on_disk_is_skipped_and_recomputed(tiny, tmp_path, caplog):
    base = prompt(100, seed=3)
    first = Engine(tiny, CFG)
    directory = open_ws(first, tmp_path)
    cold = generate(first, base + [9])
    first.shutdown()
    victim = tmp_path / directory / "blocks" / f"{full_block_hashes(base)[3].hex()}.kvb"
    data = bytearray(victim.read_bytes())
    data[200] ^= 0xFF
    victim.write_bytes(bytes(data))
    engine = Engine(tiny, CFG)
    open_ws(engine, tmp_path)
    with caplog.at_level(logging.WARNING, logger="model_runtime.kvstore.disk"):
        warm = generate(engine, base + [9])
    assert "checksum mismatch" in caplog.text
    assert warm.cached_tokens == 48 and engine.cache_stats()["disk_hits"] == 3
    assert warm.token_ids == cold.token_ids


def test_another_model_dtype_or_runtime_version_never_reuses_blocks(tiny, tiny_ckpt, tmp_path, monkeypatch):
    from model_runtime import runtime
    from model_runtime.testing import make_tiny_checkpoint

    base = prompt(80, seed=4)
    first = Engine(tiny, CFG)
    directory = open_ws(first, tmp_path)
    generate(first, base)
    first.shutdown()
    others = [load_model(make_tiny_checkpoint(tmp_path / "other", seed=1)), load_model(tiny_ckpt, dtype=torch.bfloat16)]
    fingerprints = [m.fingerprint for m in others]
    monkeypatch.setattr(runtime, "RUNTIME_VERSION", runtime.RUNTIME_VERSION + ".next")
    fingerprints.append(tiny.fingerprint)
    assert len({*fingerprints, directory.rsplit("/", 1)[1]}) == 4
    engine = Engine(others[0], CFG)
    assert open_ws(engine, tmp_path) != directory
    assert generate(engine, base).cached_tokens == 0 and engine.cache_stats()["disk_hits"] == 0


def test_switching_workspaces_keeps_their_blocks_apart(tiny, tmp_path):
    engine = Engine(tiny, CFG)
    a_ids, b_ids = prompt(70, seed=5), prompt(70, seed=6)
    dir_a = open_ws(engine, tmp_path, "a")
    generate(engine, a_ids)
    dir_b = open_ws(engine, tmp_path, "b")  # persists a's blocks, then binds b
    assert open_ws(engine, tmp_path, "b") == dir_b  # binding again changes nothing
    generate(engine, b_ids)
    engine.persist()
    a_blocks, b_blocks = set(full_block_hashes(a_ids)), set(full_block_hashes(b_ids))
    assert a_blocks <= stored(dir_a, engine) and not b_blocks & stored(dir_a, engine)
    assert b_blocks <= stored(dir_b, engine) and not a_blocks & stored(dir_b, engine)


def test_clear_cache_forgets_every_tier(tiny, tmp_path):
    base = prompt(80, seed=7)
    engine, other = Engine(tiny, CFG), Engine(tiny, CFG)
    directory, other_dir = open_ws(engine, tmp_path, "a"), open_ws(other, tmp_path, "b")
    generate(engine, base)
    generate(other, base)
    assert engine.persist() == 5 and other.persist() == 5
    freed = engine.clear_cache()
    assert freed >= 5 * 16 * 4 * 56 * 4 and stored(directory, engine) == set()
    assert generate(engine, base).cached_tokens == 0  # the device pool forgot its prefixes too
    assert len(stored(other_dir, engine)) == 6  # another workspace is untouched: 5 full blocks and the tail after them
    assert engine.clear_cache(workspace=False) > 0
    assert stored(other_dir, engine) == set()


def test_prefill_warms_the_cache_without_decoding(tiny):
    engine = Engine(tiny, CFG).start()
    try:
        header = prompt(75, seed=8)
        result = engine.prefill(header)
        assert result.finish_reason is FinishReason.LENGTH and result.token_ids == ()
        assert result.prefilled_tokens == 75 and engine.stats().generated_tokens == 0
        done = threading.Event()
        out = []
        request = GenerationRequest("c", tuple(header + [11, 12]), SamplingParams(max_tokens=6))
        engine.submit(request, None, lambda r: (out.append(r), done.set()))
        assert done.wait(30)
    finally:
        engine.shutdown()
    assert out[0].cached_tokens == 75 and out[0].prefilled_tokens == 2
    assert out[0].token_ids == generate(Engine(tiny, CFG), header + [11, 12], max_tokens=6).token_ids


def test_a_prompt_extending_a_running_generation_reuses_all_of_it(tiny):
    engine = Engine(tiny, CFG)
    base = prompt(60, seed=9)
    first: list = []
    seq = engine.add(GenerationRequest("first", tuple(base), SamplingParams(max_tokens=16)), None, first.append)
    while len(seq.output_ids) < 5:
        engine.step()
    typed = base + seq.output_ids  # the user typed exactly what is being generated
    second: list = []
    engine.add(GenerationRequest("second", tuple(typed), SamplingParams(max_tokens=8)), None, second.append)
    engine.run_until_idle()
    assert second[0].cached_tokens == len(typed) - 1 and second[0].prefilled_tokens == 1
    assert list(second[0].token_ids) == list(first[0].token_ids[5:13])


def test_an_idle_engine_persists_on_its_own(tiny, tmp_path, monkeypatch):
    monkeypatch.setattr(engine_module, "IDLE_PERSIST_S", 0.0)
    engine = Engine(tiny, CFG).start()
    try:
        directory = open_ws(engine, tmp_path)
        done = threading.Event()
        engine.submit(GenerationRequest("r", tuple(prompt(90, seed=10)), SamplingParams(max_tokens=4)), None, lambda r: done.set())
        assert done.wait(30)
        deadline = time.monotonic() + 20
        while engine.cache_stats()["disk_blocks"] < 6 and time.monotonic() < deadline:
            time.sleep(0.05)
        ids = prompt(90, seed=10)
        assert stored(directory, engine) == {*full_block_hashes(ids), tail_key(full_block_hashes(ids)[-1])}
    finally:
        engine.shutdown()


def test_two_engines_on_one_workspace_share_its_store(tiny, tmp_path):
    one, two = Engine(tiny, CFG), Engine(tiny, CFG)
    a_ids, b_ids = prompt(64, seed=11), prompt(64, seed=12)
    open_ws(one, tmp_path)
    open_ws(two, tmp_path)
    generate(one, a_ids)
    generate(two, b_ids)
    one.shutdown()
    two.shutdown()
    third = Engine(tiny, CFG)
    open_ws(third, tmp_path)
    assert generate(third, a_ids + [1]).cached_tokens == 64
    assert generate(third, b_ids + [1]).cached_tokens == 64
    assert third.cache_stats()["disk_hits"] == 8


def test_no_fsync_on_the_request_path(tiny, tmp_path, monkeypatch):
    """Blocks demoted device -> host -> disk during requests wait for the idle path to be written."""
    import os

    per_block = tiny.config.num_cache_layers * BS * (tiny.config.kv_cache_dim + tiny.config.index_head_dim) * 4
    engine = Engine(tiny, EngineConfig(block_size=BS, max_cache_tokens=128, host_cache_bytes=2 * per_block))
    open_ws(engine, tmp_path)
    calls: list[int] = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (calls.append(fd), real_fsync(fd))[1])
    prompts = [prompt(100, seed=s) for s in range(20, 25)]
    for ids in prompts:
        generate(engine, ids, max_tokens=3)
    assert engine.tiers.pending and engine.cache_stats()["demoted"] >= 12  # blocks did leave host RAM for disk
    assert calls == []
    written = engine.persist()  # what the engine's idle path calls
    assert written >= len(full_block_hashes(prompts[0])) and calls  # the instrument sees writes
    again = generate(engine, prompts[0], max_tokens=3)
    assert again.cached_tokens == 96 and engine.cache_stats()["disk_hits"] > 0


def test_a_restart_at_the_same_prompt_prefills_only_its_last_token(tiny, tmp_path):
    """The partial block after the last full one is persisted too (keyed by its prefix), so the
    first completion after a restart at the same cursor reuses every prompt token."""
    base = prompt(100, seed=21)
    first = Engine(tiny, CFG)
    open_ws(first, tmp_path)
    generate(first, base)
    first.shutdown()
    engine = Engine(tiny, CFG)
    open_ws(engine, tmp_path)
    warm = generate(engine, base)
    assert (warm.cached_tokens, warm.prefilled_tokens) == (99, 1)
    assert engine.cache_stats()["tail_hits"] == 1
    assert warm.token_ids == generate(Engine(tiny, CFG), base).token_ids


def test_a_later_tail_replaces_the_stored_one_and_a_diverging_prompt_reuses_only_the_shared_rows(tiny, tmp_path):
    base = prompt(96, seed=22)
    for tail in ([7, 8, 9, 10], [7, 8, 30, 31]):
        engine = Engine(tiny, CFG)
        open_ws(engine, tmp_path)
        generate(engine, base + tail, max_tokens=1)
        engine.shutdown()
    engine = Engine(tiny, CFG)
    open_ws(engine, tmp_path)
    assert generate(engine, base + [7, 8, 30, 31, 32]).cached_tokens == 100  # the second tail, whole
    engine = Engine(tiny, CFG)
    open_ws(engine, tmp_path)
    ids = base + [7, 8, 9, 10, 11]
    warm = generate(engine, ids)
    assert warm.cached_tokens == 98  # the first tail was replaced: only [7, 8] are shared
    assert warm.token_ids == generate(Engine(tiny, CFG), ids).token_ids


def test_a_corrupt_tail_on_disk_is_discarded_and_recomputed(tiny, tmp_path, caplog):
    base = prompt(100, seed=23)
    first = Engine(tiny, CFG)
    directory = open_ws(first, tmp_path)
    cold = generate(first, base)
    first.shutdown()
    victim = tmp_path / directory / "blocks" / f"{tail_key(full_block_hashes(base)[-1]).hex()}.kvb"
    data = bytearray(victim.read_bytes())
    data[300] ^= 0xFF
    victim.write_bytes(bytes(data))
    engine = Engine(tiny, CFG)
    open_ws(engine, tmp_path)
    with caplog.at_level(logging.WARNING, logger="model_runtime.kvstore.disk"):
        warm = generate(engine, base)
    assert "checksum mismatch" in caplog.text and not victim.exists()
    assert warm.cached_tokens == 96 and engine.cache_stats()["tail_hits"] == 0
    assert warm.token_ids == cold.token_ids


@pytest.mark.parametrize("generated", [1, 20])
def test_a_restart_reuses_the_prompts_last_rows_also_when_decoding_filled_their_block(tiny, tmp_path, generated):
    """A prompt ending 2 tokens before a block boundary: 1 generated token leaves its block
    partial, 20 fill it (it
    is then saved as a full block, under a hash no shorter prompt has); the disk keeps it as
    the prefix's tail too, so the same prompt after a restart prefills only its last token."""
    base = prompt(94, seed=41)
    first = Engine(tiny, CFG)
    open_ws(first, tmp_path)
    generate(first, base, max_tokens=generated)
    first.shutdown()
    engine = Engine(tiny, CFG)
    open_ws(engine, tmp_path)
    warm = generate(engine, base)
    assert (warm.cached_tokens, warm.prefilled_tokens) == (93, 1)
    assert warm.token_ids == generate(Engine(tiny, CFG), base).token_ids

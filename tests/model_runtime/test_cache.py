"""Block manager: hash-chained prefix sharing, copy-on-write of a fully cached tail, rollback, LRU;
the cache tensors: zeroed, and on the CPU resident only where written."""

from __future__ import annotations

import os

import pytest
import torch

from model_runtime.cache import BlockManager, CacheFullError, KVCache, chain_hash, ROOT_HASH
from model_runtime.config import ModelConfig


def test_chain_hash_depends_on_the_whole_prefix():
    a = chain_hash(ROOT_HASH, [1, 2, 3, 4])
    assert chain_hash(a, [5, 6, 7, 8]) != chain_hash(chain_hash(ROOT_HASH, [1, 2, 3, 9]), [5, 6, 7, 8])
    assert chain_hash(a, [5, 6, 7, 8]) == chain_hash(chain_hash(ROOT_HASH, [1, 2, 3, 4]), [5, 6, 7, 8])


def sealed(bm: BlockManager, tokens: list[int]):
    alloc = bm.allocate(tokens)
    bm.seal_full_blocks(alloc.block_table, tokens, alloc.hashes)
    return alloc


def test_prefix_blocks_are_shared_and_ref_counted():
    bm = BlockManager(16, 4)
    a = sealed(bm, list(range(10)))
    b = bm.allocate(list(range(8)) + [99, 98, 97])
    assert b.cached_tokens == 8
    assert b.block_table[:2] == a.block_table[:2] and b.block_table[2] != a.block_table[2]
    assert bm.blocks[a.block_table[0]].ref_count == 2
    bm.release(a.block_table)
    assert bm.blocks[b.block_table[0]].ref_count == 1


def test_diverging_first_block_shares_nothing():
    bm = BlockManager(16, 4)
    sealed(bm, list(range(12)))
    assert bm.allocate([7] + list(range(1, 12))).cached_tokens == 0


def test_hash_collision_is_rechecked_token_by_token():
    bm = BlockManager(16, 4)
    a = sealed(bm, [1, 2, 3, 4, 5])
    block = bm.blocks[a.block_table[0]]
    block.token_ids = (9, 9, 9, 9)  # simulate a colliding hash with different content
    assert bm.allocate([1, 2, 3, 4, 5]).cached_tokens == 0


def test_fully_cached_prompt_gets_a_private_last_block():
    bm = BlockManager(16, 4)
    a = sealed(bm, list(range(8)))
    b = bm.allocate(list(range(8)))
    assert b.cached_tokens == 7
    assert b.block_table[0] == a.block_table[0] and b.block_table[1] != a.block_table[1]


def test_freed_blocks_stay_reusable_until_evicted_lru():
    bm = BlockManager(4, 4)
    a = sealed(bm, list(range(8)))
    bm.release(a.block_table)
    assert bm.allocate(list(range(8)) + [1]).cached_tokens == 8  # still cached after release
    bm2 = BlockManager(2, 4)
    x = sealed(bm2, [1, 2, 3, 4])
    bm2.release(x.block_table)
    y = sealed(bm2, [5, 6, 7, 8, 9, 9, 9, 9])  # needs both blocks: evicts the cached one
    bm2.release(y.block_table)
    assert bm2.allocate([1, 2, 3, 4, 0]).cached_tokens == 0


def test_truncate_releases_tail_blocks_and_hashes():
    bm = BlockManager(8, 4)
    alloc = bm.allocate(list(range(12)))
    bm.seal_full_blocks(alloc.block_table, list(range(12)), alloc.hashes)
    bm.truncate(alloc.block_table, alloc.hashes, 5)
    assert len(alloc.block_table) == 2 and len(alloc.hashes) == 1
    assert bm.num_free == 6


def test_cache_full_raises():
    bm = BlockManager(2, 4)
    with pytest.raises(CacheFullError):
        bm.allocate(list(range(9)))
    table = bm.allocate(list(range(8))).block_table
    with pytest.raises(CacheFullError):
        bm.append_slot(table, 9)


def _resident_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="needs Linux /proc to read resident memory")
def test_a_cpu_cache_takes_memory_only_for_the_blocks_written():
    """1 GiB of cache is created without touching it (zero pages on demand); it reads as zeros and
    keeps what is written."""
    cfg = ModelConfig.tiny()
    per_block = 64 * (cfg.kv_cache_dim + cfg.index_head_dim) * 4 * cfg.num_cache_layers
    num_blocks = -(-(1 << 30) // per_block)
    before = _resident_bytes()
    cache = KVCache(cfg, num_blocks, 64, torch.float32, "cpu")
    grown = _resident_bytes() - before
    assert cache.device_bytes() >= 1 << 30 and grown < 64 << 20, f"{grown >> 20} MiB resident after creating the cache"
    assert cache.kv[0][num_blocks - 1].abs().sum() == 0 and cache.index[-1][3].abs().sum() == 0
    cache.kv[0][5].fill_(2.0)
    cache.copy_block(5, 6)
    assert cache.kv[0][6].eq(2.0).all() and cache.kv[0][7].abs().sum() == 0

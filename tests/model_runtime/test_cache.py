"""Block manager: hash-chained prefix sharing, copy-on-write of a fully cached tail, rollback, LRU."""

from __future__ import annotations

import pytest

from model_runtime.cache import BlockManager, CacheFullError, chain_hash, ROOT_HASH


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

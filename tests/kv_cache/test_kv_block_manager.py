"""The block manager's tier hooks, partial-block reuse, chunked (reserved) allocation, spilling
and workspace epochs, against a recording cold store and a real (tiny) KVCache."""

from __future__ import annotations

import pytest
import torch

from model_runtime.cache import Block, BlockManager, CacheFullError, KVCache
from model_runtime.config import ModelConfig

BS = 4


class RecordingCold:
    """A cold store that remembers demoted blocks' hashes and can promote any it was given."""

    def __init__(self, broken: bool = False) -> None:
        self.demoted: list[bytes] = []
        self.known: dict[bytes, tuple[int, ...]] = {}
        self.broken = broken

    def has(self, block_hash: bytes) -> bool:
        return block_hash in self.known

    def promote(self, block_hash: bytes, token_ids: tuple[int, ...], block_id: int) -> bool:
        return not self.broken and self.known.get(block_hash) == token_ids

    def promote_tail(self, prev: bytes, rest: list[int], block_id: int) -> int:
        return 0

    def demote(self, block: Block) -> None:
        self.demoted.append(block.hash)
        self.known[block.hash] = block.token_ids


def sealed(bm: BlockManager, tokens: list[int]):
    alloc = bm.allocate(tokens)
    bm.seal_full_blocks(alloc.block_table, tokens, alloc.hashes)
    return alloc


def small_cache(num_blocks: int, spill: int = 0) -> KVCache:
    cfg = ModelConfig.tiny(num_hidden_layers=2, num_nextn_predict_layers=0)
    cache = KVCache(cfg, num_blocks, BS, torch.float32, "cpu", spill)
    for layer, (kv, index) in enumerate(zip(cache.kv, cache.index)):
        kv.copy_(torch.arange(kv.numel(), dtype=torch.float32).view_as(kv) + 1000 * layer)
        index.copy_(-torch.arange(index.numel(), dtype=torch.float32).view_as(index) - 1000 * layer)
    return cache


def test_evicted_hashed_blocks_are_demoted_and_promoted_back():
    bm = BlockManager(3, BS)
    bm.cold = cold = RecordingCold()
    first = sealed(bm, list(range(8)))
    bm.release(first.block_table)
    other = sealed(bm, [9] * 12)  # needs all three blocks: both cached ones are evicted
    assert len(cold.demoted) == 2
    bm.release(other.block_table)
    again = bm.allocate(list(range(8)) + [1])
    assert again.cached_tokens == 8  # both came back from the cold store
    assert [bm.blocks[b].hash for b in again.block_table[:2]] == first.hashes


def test_a_failed_promotion_leaks_no_block():
    bm = BlockManager(2, BS)
    bm.cold = cold = RecordingCold()
    first = sealed(bm, list(range(4)))
    bm.release(first.block_table)
    other = sealed(bm, [9] * 8)  # evicts the cached block to the cold store
    bm.release(other.block_table)
    cold.broken = True  # its copy turns out to be gone or corrupt
    alloc = bm.allocate(list(range(5)))  # needs both blocks: a leaked one would not fit
    assert alloc.cached_tokens == 0
    bm.release(alloc.block_table)
    assert bm.num_free == 2


def test_a_cached_partial_block_is_copied_not_shared():
    cache = small_cache(8)
    bm = BlockManager(8, BS, cache)
    a = sealed(bm, list(range(6)))  # one full block and a tail of two tokens
    tail_rows = [kv[a.block_table[1]].clone() for kv in cache.kv]
    b = bm.allocate(list(range(6)) + [50, 51])
    assert b.cached_tokens == 6
    assert b.block_table[0] == a.block_table[0] and b.block_table[1] != a.block_table[1]
    assert all(torch.equal(kv[b.block_table[1]], rows) for kv, rows in zip(cache.kv, tail_rows))
    c = bm.allocate(list(range(5)) + [77])  # diverges inside the tail: reuses only its matching token
    assert c.cached_tokens == 5


def test_a_prompt_diverging_inside_a_full_block_reuses_its_matching_rows():
    cache = small_cache(8)
    bm = BlockManager(8, BS, cache)
    a = sealed(bm, list(range(12)))
    b = bm.allocate(list(range(10)) + [50, 51, 52])
    assert b.cached_tokens == 10 and b.block_table[:2] == a.block_table[:2]
    assert b.block_table[2] != a.block_table[2]  # a copy: a's block stays shared and unwritten
    assert all(torch.equal(kv[b.block_table[2]], kv[a.block_table[2]]) for kv in cache.kv)
    assert len(b.hashes) == 2


def test_a_prompt_ending_inside_a_cached_tail_recomputes_only_its_last_token():
    bm = BlockManager(8, BS, small_cache(8))
    a = sealed(bm, list(range(7)))
    b = bm.allocate(list(range(6)))
    assert b.cached_tokens == 5 and b.block_table[1] != a.block_table[1]


def test_a_reused_block_is_no_longer_a_source_of_partial_reuse():
    bm = BlockManager(2, BS)
    a = sealed(bm, list(range(6)))
    bm.release(a.block_table)
    sealed(bm, [9] * 8)  # takes both blocks, overwriting the tail's
    bm.release([b.block_id for b in bm.blocks if b.ref_count])
    assert bm.allocate(list(range(6)) + [1]).cached_tokens == 0


def test_reserve_allocates_only_the_first_chunk():
    bm = BlockManager(16, BS)
    alloc = bm.allocate(list(range(30)), reserve=6)
    assert len(alloc.block_table) == 2 and bm.num_free == 14
    first = sealed(bm, list(range(100, 108)))
    again = bm.allocate(list(range(100, 108)) + list(range(20)), reserve=4)
    assert again.cached_tokens == 8 and again.block_table[:2] == first.block_table[:2]
    assert len(again.block_table) == 3  # the cached prefix and one chunk of four tokens
    with pytest.raises(CacheFullError):
        BlockManager(2, BS).allocate(list(range(100)), reserve=12)


def test_spill_moves_the_oldest_blocks_latents_to_the_host():
    cache = small_cache(8, spill=6)
    bm = BlockManager(8, BS, cache, spill_blocks=6)
    tokens = list(range(18))  # four full blocks and a tail
    alloc = sealed(bm, tokens)
    table = alloc.block_table
    before = [cache.read_block(b) for b in table]
    assert bm.spill(table, len(alloc.hashes), keep=2) == 3
    assert [cache.is_spilled(b) for b in table] == [True, True, True, False, False]
    for b, (kv, index) in zip(table, before):
        again_kv, again_index = cache.read_block(b)
        assert torch.equal(kv, again_kv) and torch.equal(index, again_index)
    assert [bm.by_hash[h] for h in alloc.hashes] == table[:4]
    assert bm.num_free == 8 - 2
    reuse = bm.allocate(tokens[:16] + [99])
    assert reuse.cached_tokens == 16 and reuse.block_table[:3] == table[:3]


def test_spill_leaves_shared_and_unsealed_blocks_on_the_device():
    bm = BlockManager(8, BS, small_cache(8, spill=8), spill_blocks=8)
    a = sealed(bm, list(range(12)))
    b = bm.allocate(list(range(8)) + [5, 5])  # shares a's first two blocks
    assert bm.spill(a.block_table, 3, keep=0) == 1  # only a's third block is unshared and sealed
    assert bm.spill(b.block_table, 0, keep=0) == 0
    assert not any(bm.cache.is_spilled(x) for x in b.block_table)


def test_registrations_and_hits_carry_the_current_epoch():
    bm = BlockManager(8, BS)
    a = sealed(bm, list(range(8)))
    assert {bm.blocks[x].epoch for x in a.block_table} == {0}
    bm.epoch = 1
    b = bm.allocate(list(range(4)) + [7])
    assert bm.blocks[b.block_table[0]].epoch == 1 and bm.blocks[a.block_table[1]].epoch == 0

"""Paged latent KV cache and its block manager, with content-hash prefix sharing.

Role: `KVCache` owns the device tensors; per cache layer (main layers, then MTP layers):
`kv[l]` is [num_blocks, block_size, kv_lora_rank + qk_rope_head_dim] (latent c | rope k_pe) and
`index[l]` is [num_blocks, block_size, index_head_dim] (DSA indexer keys). `BlockManager` hands
out blocks to sequences and shares full blocks between sequences with the same token prefix.

Invariants:
- A block's hash is a chain: blake2b(previous block's hash ‖ its token ids), so equal hashes
  mean equal prefixes; a hit is still re-checked token by token against collisions.
- Only full blocks carry a hash and can be shared. A shared block is never written: the one
  token that must be recomputed at the end of a fully cached prompt goes into a private copy.
- Freed blocks keep their contents and hash (an LRU pool of reusable prefixes) until another
  allocation needs the space.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from dataclasses import dataclass, field

import torch

from model_runtime.config import ModelConfig


class CacheFullError(RuntimeError):
    """The paged cache has no free block for a request that needs one."""


class KVCache:
    def __init__(self, cfg: ModelConfig, num_blocks: int, block_size: int, dtype: torch.dtype, device) -> None:
        self.num_blocks, self.block_size = num_blocks, block_size
        shape = (num_blocks, block_size)
        n = cfg.num_cache_layers
        self.kv = [torch.zeros(*shape, cfg.kv_cache_dim, dtype=dtype, device=device) for _ in range(n)]
        self.index = [torch.zeros(*shape, cfg.index_head_dim, dtype=dtype, device=device) for _ in range(n)]

    def copy_block(self, src: int, dst: int) -> None:
        for t in (*self.kv, *self.index):
            t[dst].copy_(t[src])

    def bytes_per_token(self) -> int:
        per_layer = self.kv[0].shape[-1] + self.index[0].shape[-1]
        return per_layer * len(self.kv) * self.kv[0].element_size()


def chain_hash(prev: bytes, tokens: list[int] | tuple[int, ...]) -> bytes:
    h = hashlib.blake2b(prev, digest_size=16)
    h.update(b"".join(t.to_bytes(4, "little", signed=False) for t in tokens))
    return h.digest()


ROOT_HASH = b"glm5-lsp-root"


@dataclass
class Block:
    block_id: int
    ref_count: int = 0
    hash: bytes | None = None
    token_ids: tuple[int, ...] = ()


@dataclass
class Allocation:
    """What `BlockManager.allocate` did for one sequence."""

    block_table: list[int]
    cached_tokens: int  # tokens whose KV is already in the cache (prefix hit)
    hashes: list[bytes] = field(default_factory=list)  # hashes of the full blocks already computed


class BlockManager:
    def __init__(self, num_blocks: int, block_size: int, cache: KVCache | None = None) -> None:
        self.block_size = block_size
        self.blocks = [Block(i) for i in range(num_blocks)]
        self.free: OrderedDict[int, None] = OrderedDict((i, None) for i in range(num_blocks))  # LRU order
        self.by_hash: dict[bytes, int] = {}
        self.cache = cache

    @property
    def num_free(self) -> int:
        return len(self.free)

    def blocks_needed(self, num_tokens: int) -> int:
        return -(-num_tokens // self.block_size)

    def can_allocate(self, num_tokens: int) -> bool:
        return self.blocks_needed(num_tokens) <= self.num_free

    def allocate(self, token_ids: list[int], reuse: bool = True) -> Allocation:
        """Blocks for a new sequence of `token_ids`, reusing cached full blocks of its prefix."""
        bs = self.block_size
        if not self.can_allocate(len(token_ids)):
            raise CacheFullError(f"{len(token_ids)} tokens need {self.blocks_needed(len(token_ids))} blocks, {self.num_free} free")
        table: list[int] = []
        hashes: list[bytes] = []
        prev, cached = ROOT_HASH, 0
        for start in range(0, len(token_ids) - len(token_ids) % bs, bs):
            chunk = tuple(token_ids[start : start + bs])
            prev = chain_hash(prev, chunk)
            hashes.append(prev)
            hit = self.by_hash.get(prev) if reuse and cached == start else None
            if hit is not None and self.blocks[hit].token_ids == chunk:
                self._take(hit)
                table.append(hit)
                cached += bs
            else:
                table.append(self._fresh())
        while len(table) < self.blocks_needed(len(token_ids)):
            table.append(self._fresh())
        if cached == len(token_ids) and cached > 0:
            cached -= 1  # the last token must run again to give logits: write it to a private copy
            last = len(table) - 1
            private = self._fresh()
            if self.cache is not None:
                self.cache.copy_block(table[last], private)
            self._release(table[last])
            table[last] = private
        return Allocation(table, cached, hashes[: cached // bs])

    def append_slot(self, table: list[int], num_tokens: int) -> None:
        """Make room for a sequence growing to `num_tokens` tokens."""
        need = self.blocks_needed(num_tokens) - len(table)
        if need > self.num_free:
            raise CacheFullError(f"no free block to grow a sequence to {num_tokens} tokens")
        table.extend(self._fresh() for _ in range(need))

    def seal_full_blocks(self, table: list[int], token_ids: list[int], hashes: list[bytes]) -> None:
        """Hash and register every block that became full (its KV is final)."""
        bs = self.block_size
        while len(hashes) < len(token_ids) // bs:
            i = len(hashes)
            chunk = token_ids[i * bs : (i + 1) * bs]
            hashes.append(chain_hash(hashes[-1] if hashes else ROOT_HASH, chunk))
            self._register(table[i], hashes[i], chunk)

    def truncate(self, table: list[int], hashes: list[bytes], num_tokens: int) -> None:
        """Roll a sequence back to its first `num_tokens` tokens (rejected speculative tokens)."""
        keep = self.blocks_needed(num_tokens)
        for block_id in table[keep:]:
            self._release(block_id)
        del table[keep:]
        del hashes[num_tokens // self.block_size :]

    def release(self, table: list[int]) -> None:
        for block_id in reversed(table):  # tail first: it is the least likely to be shared again
            self._release(block_id)
        table.clear()

    def clear_hashes(self) -> None:
        """Forget every cached prefix (used when the cache contents become invalid)."""
        for block in self.blocks:
            block.hash, block.token_ids = None, ()
        self.by_hash.clear()

    # ---- internals ------------------------------------------------------------------------
    def _fresh(self) -> int:
        if not self.free:
            raise CacheFullError("no free KV-cache block")
        block_id, _ = self.free.popitem(last=False)
        block = self.blocks[block_id]
        if block.hash is not None and self.by_hash.get(block.hash) == block_id:
            del self.by_hash[block.hash]
        block.hash, block.token_ids, block.ref_count = None, (), 1
        return block_id

    def _take(self, block_id: int) -> None:
        block = self.blocks[block_id]
        if block.ref_count == 0:
            del self.free[block_id]
        block.ref_count += 1

    def _release(self, block_id: int) -> None:
        block = self.blocks[block_id]
        block.ref_count -= 1
        if block.ref_count == 0:
            self.free[block_id] = None

    def _register(self, block_id: int, block_hash: bytes, tokens) -> None:
        block = self.blocks[block_id]
        if block.hash == block_hash:
            return
        block.hash, block.token_ids = block_hash, tuple(tokens)
        self.by_hash.setdefault(block_hash, block_id)

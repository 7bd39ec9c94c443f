"""Paged latent KV cache and its block manager, with content-hash prefix sharing.

Role: `KVCache` owns the cache tensors; per cache layer (main layers, then MTP layers):
`kv[l]` is [num_blocks, block_size, kv_lora_rank + qk_rope_head_dim] (latent c | rope k_pe) and
`index[l]` is [num_blocks + spill_blocks, block_size, index_head_dim] (DSA indexer keys). Blocks
`num_blocks ..` are *spilled* blocks (sparse residency): their indexer keys are on the device like
every other block's, their latents in `spill[l]` [spill_blocks, block_size, kv_dim] in host memory.
`BlockManager` hands out blocks to sequences, shares full blocks between sequences with the same
token prefix, copies a cached partial last block, pulls prefix blocks back from colder tiers and
pushes evicted ones down to them (`ColdStore`), and spills old blocks' latents to the host.

Invariants:
- A block's hash is a chain: blake2b(previous block's hash ‖ its token ids), so equal hashes
  mean equal prefixes; a hit is still re-checked token by token against collisions.
- Only full blocks carry a hash and can be shared, spilled or handed to a colder tier. A shared
  block is never written: the one token that must be recomputed at the end of a fully cached
  prompt goes into a private copy.
- Every block computed after a prefix (full, or the partial last block of a sequence with its
  computed tokens so far) is remembered as that prefix's latest *successor* until the block is
  reused. A sequence that shares the prefix and then some of the successor's tokens, but not the
  whole block (it diverges inside it), gets a private copy of the matching rows. Without such a
  block in the pool, the cold store may supply the persisted one (`ColdStore.promote_tail`: the
  prefix's tail written by an earlier session).
- Freed blocks keep their contents and hash (an LRU pool of reusable prefixes, one for device
  blocks and one for spilled blocks) until an allocation needs the space; a hashed block leaving
  its pool is handed to the cold store first.
- New tokens are only written into device blocks (`block_id < num_blocks`), never spilled ones.
- Every hash registration or hit stamps the block with `epoch` (the workspace binding it serves).
- The cache tensors start zeroed. On the CPU they are backed by an anonymous memory map whose
  pages the kernel zero-fills on first touch (`zeroed`), so creating a large cache costs nothing
  and only the blocks in use take memory.
"""

from __future__ import annotations

import hashlib
import math
import mmap
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Protocol

import torch

from model_runtime.config import ModelConfig


class CacheFullError(RuntimeError):
    """The paged cache has no free block for a request that needs one."""


def zeroed(shape: tuple[int, ...], dtype: torch.dtype, device) -> torch.Tensor:
    """A zero tensor. On the CPU: a view of an anonymous memory map (zero pages on first touch,
    nothing written now); elsewhere `torch.zeros`."""
    numel = math.prod(shape)
    if torch.device(device).type != "cpu" or numel == 0:
        return torch.zeros(shape, dtype=dtype, device=device)
    buffer = mmap.mmap(-1, numel * dtype.itemsize)
    return torch.frombuffer(buffer, dtype=dtype, count=numel).view(shape)


class KVCache:
    def __init__(
        self, cfg: ModelConfig, num_blocks: int, block_size: int, dtype: torch.dtype, device, spill_blocks: int = 0
    ) -> None:
        self.num_blocks, self.block_size, self.spill_blocks = num_blocks, block_size, spill_blocks
        n, shape = cfg.num_cache_layers, (num_blocks, block_size)
        self.kv = [zeroed((*shape, cfg.kv_cache_dim), dtype, device) for _ in range(n)]
        self.index = [zeroed((num_blocks + spill_blocks, block_size, cfg.index_head_dim), dtype, device) for _ in range(n)]
        pin = torch.device(device).type == "cuda"
        self.spill = [
            torch.zeros(spill_blocks, block_size, cfg.kv_cache_dim, dtype=dtype, pin_memory=pin) for _ in range(n if spill_blocks else 0)
        ]
        self.spill_rows_read = 0  # latent rows gathered from the host for attention (sparse residency)

    def is_spilled(self, block: int) -> bool:
        return block >= self.num_blocks

    def _latents(self, block: int) -> list[torch.Tensor]:
        if self.is_spilled(block):
            return [s[block - self.num_blocks] for s in self.spill]
        return [t[block] for t in self.kv]

    def copy_block(self, src: int, dst: int) -> None:
        """Copy every layer's rows of block `src` (device or spilled) into device block `dst`."""
        for t, row in zip(self.kv, self._latents(src)):
            t[dst].copy_(row)
        for t in self.index:
            t[dst].copy_(t[src])

    def spill_block(self, src: int, dst: int) -> None:
        """Move device block `src`'s rows to spilled block `dst` (keys on the device, latents to the host)."""
        for t in self.index:
            t[dst].copy_(t[src])
        for s, t in zip(self.spill, self.kv):
            s[dst - self.num_blocks].copy_(t[src])

    def read_block(self, block: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Host copies of a block's rows: latents [layers, block_size, kv_dim], keys [layers, block_size, index_dim]."""
        kv = torch.stack(self._latents(block)).to("cpu", copy=True)
        return kv, torch.stack([t[block] for t in self.index]).to("cpu", copy=True)

    def write_block(self, block: int, kv: torch.Tensor, index: torch.Tensor) -> None:
        """Fill a device or spilled block from host rows shaped like `read_block`'s."""
        for row, src in zip(self._latents(block), kv):
            row.copy_(src)
        for t, src in zip(self.index, index):
            t[block].copy_(src)

    def bytes_per_token(self) -> int:
        per_layer = self.kv[0].shape[-1] + self.index[0].shape[-1]
        return per_layer * len(self.kv) * self.kv[0].element_size()

    def device_bytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (*self.kv, *self.index))

    def host_bytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.spill)


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
    after: bytes | None = None  # the hash of the prefix this block is the latest successor of
    epoch: int = 0
    ends_prompt: bool = False  # a full block whose first tokens end a prompt (persisted as its prefix's tail too)


@dataclass
class Allocation:
    """What `BlockManager.allocate` did for one sequence."""

    block_table: list[int]
    cached_tokens: int  # tokens whose KV is already in the cache (prefix hit)
    hashes: list[bytes] = field(default_factory=list)  # hashes of the full blocks already computed


class ColdStore(Protocol):
    """Colder tiers behind the block pool (host RAM, disk): see `model_runtime.kvstore.tiers`."""

    def has(self, block_hash: bytes) -> bool: ...

    def promote(self, block_hash: bytes, token_ids: tuple[int, ...], block_id: int) -> bool:
        """Write the stored rows of this block into `block_id`; False if they are gone or invalid."""

    def promote_tail(self, prev: bytes, rest: list[int], block_id: int) -> int:
        """Write the stored partial block after prefix `prev` into `block_id` if it starts with
        `rest`; how many tokens of `rest` it holds (0: nothing usable)."""

    def demote(self, block: Block) -> None:
        """Keep a copy of a hashed block that is about to be overwritten."""


class BlockManager:
    def __init__(self, num_blocks: int, block_size: int, cache: KVCache | None = None, spill_blocks: int = 0) -> None:
        self.block_size, self.num_device = block_size, num_blocks
        self.blocks = [Block(i) for i in range(num_blocks + spill_blocks)]
        self.free: OrderedDict[int, None] = OrderedDict((i, None) for i in range(num_blocks))  # LRU order
        self.spill_free: OrderedDict[int, None] = OrderedDict((i, None) for i in range(num_blocks, num_blocks + spill_blocks))
        self.by_hash: dict[bytes, int] = {}
        self.successors: dict[bytes, int] = {}  # prefix hash -> block most recently computed after it
        self.cache = cache
        self.cold: ColdStore | None = None
        self.epoch = 0
        self.touched: set[int] = set()  # device blocks ever handed out: on the CPU, the pool's resident part

    @property
    def num_free(self) -> int:
        return len(self.free)

    def blocks_needed(self, num_tokens: int) -> int:
        return -(-num_tokens // self.block_size)

    def can_allocate(self, num_tokens: int) -> bool:
        return self.blocks_needed(num_tokens) <= self.num_free

    def allocate(self, token_ids: list[int], reuse: bool = True, reserve: int | None = None) -> Allocation:
        """Blocks for a new sequence of `token_ids`: its cached prefix (device hits, or blocks
        promoted from the cold store), a private copy of the rows it shares with the prefix's
        cached successor (where it diverges inside a block), and fresh blocks
        for the rest of the prompt, or with `reserve`, for only `reserve` tokens past the cached part."""
        total = len(token_ids)
        need = total if reserve is None else min(total, reserve)
        if not self.can_allocate(need):
            raise CacheFullError(f"{need} tokens need {self.blocks_needed(need)} blocks, {self.num_free} free")
        table: list[int] = []
        try:
            return self._allocate(token_ids, reuse, reserve, table)
        except CacheFullError:
            self.release(table)
            raise

    def _allocate(self, token_ids: list[int], reuse: bool, reserve: int | None, table: list[int]) -> Allocation:
        bs, total = self.block_size, len(token_ids)
        keep_free = 0 if reserve is None else self.blocks_needed(min(total, reserve)) + 1
        hashes = self._cached_prefix(token_ids, table, keep_free) if reuse else []
        hits = len(table)
        cached = hits * bs
        prev = hashes[-1] if hashes else ROOT_HASH
        source, matched = self._successor(prev, token_ids[cached:]) if reuse else (None, 0)
        end = total if reserve is None else min(total, cached + max(reserve, 1))
        while len(table) < self.blocks_needed(end):
            table.append(self._fresh())
        if matched and self.cache is not None:
            self.cache.copy_block(source, table[hits])
            cached += matched
        elif reuse and hashes and self.cold is not None and len(table) > hits:
            cached += self.cold.promote_tail(prev, token_ids[cached:], table[hits])
        if cached == total and cached > 0:
            cached -= 1  # the last token must run again to give logits: write it to a private copy
            if len(table) == hits:
                private = self._fresh()
                if self.cache is not None:
                    self.cache.copy_block(table[-1], private)
                self._release(table[-1])
                table[-1] = private
        return Allocation(table, cached, hashes[: cached // bs])

    def _cached_prefix(self, token_ids: list[int], table: list[int], keep_free: int) -> list[bytes]:
        """Take the blocks of the longest cached full-block prefix into `table`; their hashes."""
        bs, hashes, prev = self.block_size, [], ROOT_HASH
        for start in range(0, len(token_ids) - len(token_ids) % bs, bs):
            chunk = tuple(token_ids[start : start + bs])
            prev = chain_hash(prev, chunk)
            block_id = self._hit(prev, chunk, keep_free)
            if block_id is None:
                break
            table.append(block_id)
            hashes.append(prev)
        return hashes

    def _hit(self, block_hash: bytes, chunk: tuple[int, ...], keep_free: int) -> int | None:
        found = self.by_hash.get(block_hash)
        if found is not None and self.blocks[found].token_ids == chunk:
            self._take(found)
            self.blocks[found].epoch = self.epoch
            return found
        if found is not None or self.cold is None or not self.cold.has(block_hash):
            return None
        spill = self.num_free <= keep_free
        if spill and not self.spill_free:
            return None
        block_id = self._fresh(spill)
        if not self.cold.promote(block_hash, chunk, block_id):
            self._release(block_id, fresh=True)
            return None
        self._register(block_id, block_hash, chunk)
        return block_id

    def _successor(self, prev: bytes, rest: list[int]) -> tuple[int | None, int]:
        """(block, how many leading tokens of `rest` it holds) for the latest block after `prev`."""
        block_id = self.successors.get(prev)
        if block_id is None:
            return None, 0
        matched = 0
        for cached, wanted in zip(self.blocks[block_id].token_ids[: self.block_size - 1], rest):
            if cached != wanted:
                break
            matched += 1
        return block_id, matched

    def append_slot(self, table: list[int], num_tokens: int) -> None:
        """Make room for a sequence growing to `num_tokens` tokens."""
        need = self.blocks_needed(num_tokens) - len(table)
        if need > self.num_free:
            raise CacheFullError(f"no free block to grow a sequence to {num_tokens} tokens")
        table.extend(self._fresh() for _ in range(need))

    def seal_full_blocks(self, table: list[int], token_ids: list[int], hashes: list[bytes], prompt_len: int = 0) -> None:
        """Hash and register every block that became full (its KV is final); remember the
        partial last block as its prefix's successor. A block that `prompt_len` ends inside
        (filled up by generated tokens) is marked `ends_prompt`: the disk tier keeps it as its
        prefix's tail, so the same prompt after a restart still finds its last rows."""
        bs = self.block_size
        while len(hashes) < len(token_ids) // bs:
            i = len(hashes)
            chunk = token_ids[i * bs : (i + 1) * bs]
            prev = hashes[-1] if hashes else ROOT_HASH
            hashes.append(chain_hash(prev, chunk))
            self._register(table[i], hashes[i], chunk)
            self._succeed(table[i], prev)
            if i * bs < prompt_len < (i + 1) * bs:
                self.blocks[table[i]].ends_prompt = True
        full = len(token_ids) // bs
        if len(token_ids) > full * bs and full < len(table) and self.blocks[table[full]].hash is None:
            self.blocks[table[full]].token_ids = tuple(token_ids[full * bs :])
            self._succeed(table[full], hashes[full - 1] if full else ROOT_HASH)

    def fork(self, table: list[int], num_tokens: int) -> list[int]:
        """A new table for a sequence that shares `table`'s first `num_tokens` tokens and then
        diverges: it references the blocks full within them and gets a private copy of the
        block holding the rest (copy-on-write), so neither sequence writes a shared block."""
        full = num_tokens // self.block_size
        child = []
        for block_id in table[:full]:
            self._take(block_id)
            child.append(block_id)
        if num_tokens % self.block_size:
            try:
                private = self._fresh()
            except CacheFullError:
                self.release(child)
                raise
            if self.cache is not None:
                self.cache.copy_block(table[full], private)
            child.append(private)
        return child

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

    def spill(self, table: list[int], sealed: int, keep: int) -> int:
        """Move the latents of `table`'s oldest sealed, unshared device blocks to spilled blocks
        until at most `keep` of its blocks are on the device; returns how many moved."""
        device = [i for i, b in enumerate(table) if b < self.num_device]
        excess, moved = len(device) - keep, 0
        for i in device[: max(excess, 0)]:
            src = table[i]
            if i >= sealed or not self.spill_free or self.cache is None:
                break
            if self.blocks[src].ref_count != 1:
                continue
            dst = self._fresh(spill=True)
            self.cache.spill_block(src, dst)
            old, new = self.blocks[src], self.blocks[dst]
            new.hash, new.token_ids, new.epoch, new.ends_prompt = old.hash, old.token_ids, old.epoch, old.ends_prompt
            if self.by_hash.get(old.hash) == src:
                self.by_hash[old.hash] = dst
            if old.after is not None:
                self._succeed(dst, old.after)
            self._forget_succession(old)
            old.hash, old.token_ids = None, ()
            table[i] = dst
            self._release(src, fresh=True)
            moved += 1
        return moved

    def registered(self) -> list[Block]:
        """Every block holding a full, hashed prefix block (in use or pooled)."""
        return [self.blocks[i] for i in self.by_hash.values()]

    def clear_hashes(self) -> None:
        """Forget every cached prefix (used when the cache contents become invalid)."""
        for block in self.blocks:
            block.hash, block.token_ids, block.after = None, (), None
        self.by_hash.clear()
        self.successors.clear()

    # ---- internals ------------------------------------------------------------------------
    def _fresh(self, spill: bool = False) -> int:
        pool = self.spill_free if spill else self.free
        if not pool:
            raise CacheFullError("no free KV-cache block")
        block_id, _ = pool.popitem(last=False)
        if not spill:
            self.touched.add(block_id)
        block = self.blocks[block_id]
        if block.hash is not None and self.by_hash.get(block.hash) == block_id:
            if self.cold is not None:
                self.cold.demote(block)
            del self.by_hash[block.hash]
        self._forget_succession(block)
        block.hash, block.token_ids, block.ref_count, block.ends_prompt = None, (), 1, False
        return block_id

    def _take(self, block_id: int) -> None:
        block = self.blocks[block_id]
        if block.ref_count == 0:
            self._pool(block_id).pop(block_id)
        block.ref_count += 1

    def _release(self, block_id: int, fresh: bool = False) -> None:
        """Drop a reference; an unreferenced block joins its pool (at the LRU end if `fresh`:
        it holds nothing worth keeping)."""
        block = self.blocks[block_id]
        block.ref_count -= 1
        if block.ref_count == 0:
            pool = self._pool(block_id)
            pool[block_id] = None
            if fresh:
                pool.move_to_end(block_id, last=False)

    def _pool(self, block_id: int) -> OrderedDict[int, None]:
        return self.spill_free if block_id >= self.num_device else self.free

    def _register(self, block_id: int, block_hash: bytes, tokens) -> None:
        block = self.blocks[block_id]
        block.epoch = self.epoch
        if block.hash == block_hash:
            return
        block.hash, block.token_ids = block_hash, tuple(tokens)
        self.by_hash.setdefault(block_hash, block_id)

    def _succeed(self, block_id: int, prev: bytes) -> None:
        block = self.blocks[block_id]
        if block.after != prev:
            self._forget_succession(block)
            block.after = prev
        self.successors[prev] = block_id

    def _forget_succession(self, block: Block) -> None:
        if block.after is not None and self.successors.get(block.after) == block.block_id:
            del self.successors[block.after]
        block.after = None

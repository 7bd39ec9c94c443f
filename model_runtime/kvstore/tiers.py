"""The warm (host RAM) and cold (disk) tiers behind the device block pool.

Role: `CacheTiers` is the `BlockManager`'s `ColdStore`. A hashed block evicted from the device
pool is copied to host RAM (`demote`); one evicted from host RAM waits in `pending` until it is
written to the workspace's disk store (`flush`, called by the engine's idle path, `persist` and
shutdown). `pending` is capped (`pending_bytes`): past it the oldest pending blocks are dropped
(counted in `dropped`), never written from inside a request. A prefix-hash miss on the device is looked up in host RAM, then
`pending`, then on disk, and copied into a fresh block (`promote`) after checking its token ids
(and, from disk, its digest). `persist` writes every hashed device and host block of the current
workspace that the disk store does not have yet, and each such prefix's latest partial
*tail* block (the rows computed after its last full block, keyed by that prefix: `tail_key`), so
that a restart at the same cursor prefills only its last token; `promote_tail` copies the rows a
new prompt shares with a stored tail into its fresh block.

Invariants:
- Only blocks stamped with the current `epoch` (the workspace binding they were computed or
  used under) are written to disk: after `bind` switches workspaces, nothing cached for the old
  workspace lands in the new one's directory.
- Disk trouble never reaches the engine: the store logs and answers misses.
- No disk write (and so no fsync) happens on a request's path: `demote` and `promote` only
  copy to and from RAM and read files; only `flush`, `persist`, `bind` and `clear` write.
- Runs on the engine thread only (like the cache and the block manager).
"""

from __future__ import annotations

import hashlib
import logging
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import torch

from model_runtime.cache import Block, BlockManager, KVCache
from model_runtime.kvstore.disk import DiskStore, wipe
from model_runtime.kvstore.host import HostTier
from model_runtime.kvstore.paths import marked_workspaces

log = logging.getLogger(__name__)

PENDING_FLOOR = 64 << 20  # the pending queue holds at least this many bytes before dropping blocks
TAIL_DOMAIN = b"glm5-lsp-tail"


def tail_key(prev: bytes) -> bytes:
    """The disk key of the partial block that follows the full-block prefix hashed `prev`."""
    return hashlib.blake2b(TAIL_DOMAIN + prev, digest_size=16).digest()


@dataclass(frozen=True, slots=True)
class StoredBlock:
    """A full block's rows off the device: every cache layer's latents and indexer keys."""

    block_hash: bytes
    token_ids: tuple[int, ...]
    kv: torch.Tensor  # [layers, block_size, kv_dim], host memory
    index: torch.Tensor  # [layers, block_size, index_dim]
    epoch: int

    @property
    def nbytes(self) -> int:
        return self.kv.numel() * self.kv.element_size() + self.index.numel() * self.index.element_size()

    def payload(self) -> list[memoryview]:
        return [memoryview(t.contiguous().view(torch.uint8).numpy()).cast("B") for t in (self.kv, self.index)]


@dataclass
class TierCounters:
    host_hits: int = 0
    disk_hits: int = 0
    demoted: int = 0
    written: int = 0
    dropped: int = 0  # pending blocks dropped unwritten because the queue was full
    tail_hits: int = 0  # prompts that took rows of a stored partial tail block
    tails_written: int = 0


class CacheTiers:
    def __init__(self, cache: KVCache, blocks: BlockManager, host_bytes: int, disk_bytes: int) -> None:
        self.cache, self.blocks = cache, blocks
        self.host: HostTier[bytes, StoredBlock] = HostTier(host_bytes)
        self.pending: OrderedDict[bytes, StoredBlock] = OrderedDict()
        self.pending_bytes = max(host_bytes // 4, PENDING_FLOOR)
        self.disk_bytes = disk_bytes
        self.disk: DiskStore | None = None
        self.counters = TierCounters()
        self.saved_tails: dict[bytes, tuple[int, ...]] = {}  # tail key -> token ids this process wrote
        index = cache.index[0]
        self.kv_shape = (len(cache.kv), cache.block_size, cache.kv[0].shape[-1])
        self.index_shape = (len(cache.index), cache.block_size, index.shape[-1])
        self.dtype = index.dtype
        self.layout = {"dtype": str(self.dtype).removeprefix("torch."), "kv": list(self.kv_shape), "index": list(self.index_shape)}

    @property
    def epoch(self) -> int:
        return self.blocks.epoch

    # ---- ColdStore ------------------------------------------------------------------------
    def has(self, block_hash: bytes) -> bool:
        return block_hash in self.host or block_hash in self.pending or (self.disk is not None and block_hash in self.disk)

    def promote(self, block_hash: bytes, token_ids: tuple[int, ...], block_id: int) -> bool:
        stored = self.host.get(block_hash) or self.pending.get(block_hash)
        if stored is not None and stored.token_ids == token_ids:
            self.counters.host_hits += 1
        elif self.disk is not None and (stored := self._load(block_hash, token_ids)) is not None:
            self.counters.disk_hits += 1
        else:
            return False
        self.cache.write_block(block_id, stored.kv, stored.index)
        return True

    def promote_tail(self, prev: bytes, rest: list[int], block_id: int) -> int:
        """Copy the stored tail after prefix `prev` into `block_id` if its first tokens are
        `rest`'s; returns how many leading tokens of `rest` it holds (0: none stored, or no match)."""
        if self.disk is None:
            return 0
        found = self.disk.get_tail(tail_key(prev))
        if found is None:
            return 0
        tokens, payload = found
        matched = 0
        for stored, wanted in zip(tokens[: self.cache.block_size - 1], rest):
            if stored != wanted:
                break
            matched += 1
        if matched:
            kv, index = self._tensors(payload)
            self.cache.write_block(block_id, kv, index)
            self.counters.tail_hits += 1
        return matched

    def demote(self, block: Block) -> None:
        if block.hash is None:
            return
        known = self.host.get(block.hash) or self.pending.get(block.hash)
        if known is not None and known.token_ids == block.token_ids:
            if known.epoch != block.epoch and block.hash in self.host:  # used again since: restamp
                self.host.put(block.hash, replace(known, epoch=block.epoch))
            return
        kv, index = self.cache.read_block(block.block_id)
        self.counters.demoted += 1
        for out in self.host.put(block.hash, StoredBlock(block.hash, block.token_ids, kv, index, block.epoch)):
            if self.disk is not None and out.epoch == self.epoch and not self.disk.knows(out.block_hash):
                self.pending[out.block_hash] = out
        self._cap_pending()

    def _cap_pending(self) -> None:
        total = sum(b.nbytes for b in self.pending.values())
        while total > self.pending_bytes and self.pending:
            total -= self.pending.popitem(last=False)[1].nbytes
            self.counters.dropped += 1

    # ---- disk ------------------------------------------------------------------------------
    def bind(self, directory: Path, fingerprint: str) -> bool:
        """Use the disk store at `directory` (`paths.store_dir`); True if that bound a new store.
        Switching from another workspace first persists the old one and starts a new epoch."""
        if self.disk is not None and self.disk.dir == directory:
            return False
        store = DiskStore(directory, fingerprint, self.layout, self.disk_bytes)
        if self.disk is not None:
            self.persist()
            self.blocks.epoch += 1
        self.pending.clear()
        self.saved_tails.clear()
        self.disk = store
        return True

    def flush(self, limit: int | None = None) -> int:
        """Write up to `limit` pending (host-evicted) blocks to disk; returns how many."""
        if self.disk is None or not self.pending:
            self.pending.clear()
            return 0
        batch = []
        while self.pending and (limit is None or len(batch) < limit):
            batch.append(self.pending.popitem(last=False)[1])
        return self._write(batch)

    def persist(self, limit: int | None = None) -> int:
        """Write pending blocks, then the current workspace's hashed device and host blocks that
        the disk store lacks (up to `limit` in all); commits the disk index."""
        if self.disk is None:
            return 0
        written = self.flush(limit)
        room = None if limit is None else limit - written
        if room is None or room > 0:
            written += self._write(list(self._unsaved(room)))
        self._write_tails()
        self.disk.commit()
        return written

    def unsaved(self) -> bool:
        """Whether `persist` has anything to write."""
        return self.disk is not None and bool(self.pending or self._unsaved_device() or self._unsaved_host())

    def clear(self, every_workspace: bool = False) -> int:
        """Forget every cached prefix on the device and in host RAM, and delete the persisted
        blocks of the bound workspace (every model's), or of every workspace under its cache
        root (or the default one); returns the host and disk bytes freed."""
        self.blocks.clear_hashes()
        freed = self.host.clear() + sum(b.nbytes for b in self.pending.values())
        self.pending.clear()
        self.saved_tails.clear()
        if self.disk is not None:
            freed += self.disk.clear()
        if every_workspace:
            workspaces = marked_workspaces(None if self.disk is None else self.disk.dir.parent.parent)
        else:
            workspaces = [] if self.disk is None else [self.disk.dir.parent]
        for workspace in workspaces:
            freed += sum(wipe(store) for store in workspace.iterdir() if store.is_dir())
        return freed

    def stats(self) -> dict[str, int]:
        """Sizes and counters of every tier (plain ints)."""
        used = sum(1 for b in self.blocks.blocks if b.ref_count > 0)
        return {
            "device_blocks": self.cache.num_blocks, "spill_blocks": self.cache.spill_blocks, "blocks_in_use": used,
            "cached_blocks": len(self.blocks.by_hash), "device_bytes": self.cache.device_bytes(),
            "touched_bytes": len(self.blocks.touched) * self.blocks.block_size * self.cache.bytes_per_token(),
            "host_blocks": len(self.host), "host_bytes": self.host.total_bytes, "pending_blocks": len(self.pending),
            "disk_blocks": 0 if self.disk is None else len(self.disk),
            "disk_bytes": 0 if self.disk is None else self.disk.total_bytes,
            "spill_rows_read": self.cache.spill_rows_read, **asdict(self.counters),
        }  # fmt: skip

    # ---- internals ----------------------------------------------------------------------------
    def _unsaved_device(self) -> list[Block]:
        return [b for b in self.blocks.registered() if b.epoch == self.epoch and not self.disk.knows(b.hash)]

    def _unsaved_host(self) -> list[StoredBlock]:
        return [s for s in self.host.values() if s.epoch == self.epoch and not self.disk.knows(s.block_hash)]

    def _unsaved(self, limit: int | None) -> Iterator[StoredBlock]:
        """Unsaved device blocks (copied to the host one at a time, as the writer asks), then host ones."""
        device, host = self._unsaved_device(), self._unsaved_host()
        for block in device[:limit]:
            kv, index = self.cache.read_block(block.block_id)
            yield StoredBlock(block.hash, block.token_ids, kv, index, block.epoch)
        yield from host[: None if limit is None else max(0, limit - len(device))]

    def _write_tails(self) -> None:
        """Write the latest partial block after each full-block prefix of this workspace (one file
        per prefix, replaced when a later one differs), or the latest full one that a prompt ended
        in: a restarted prompt finds its last rows there (`promote_tail` matches a prefix)."""
        batch = []
        for prev, block_id in list(self.blocks.successors.items()):
            block = self.blocks.blocks[block_id]
            owner = self.blocks.by_hash.get(prev)
            full = block.hash is not None and not block.ends_prompt
            if full or not block.token_ids or owner is None or self.blocks.blocks[owner].epoch != self.epoch:
                continue  # a full block (saved as such), empty, or a prefix of another workspace
            key = tail_key(prev)
            if self.saved_tails.get(key) != block.token_ids:
                kv, index = self.cache.read_block(block_id)
                batch.append(StoredBlock(key, block.token_ids, kv, index, self.epoch))
        if batch and self.disk is not None:
            written = self.disk.put(((b.block_hash, b.token_ids, b.payload()) for b in batch), replace=True)
            self.counters.tails_written += written
            self.saved_tails.update((b.block_hash, b.token_ids) for b in batch[:written])

    def _write(self, batch: list[StoredBlock]) -> int:
        if not batch or self.disk is None:
            return 0
        written = self.disk.put((b.block_hash, b.token_ids, b.payload()) for b in batch)
        self.counters.written += written
        return written

    def _load(self, block_hash: bytes, token_ids: tuple[int, ...]) -> StoredBlock | None:
        payload = self.disk.get(block_hash, token_ids)
        if payload is None:
            return None
        kv, index = self._tensors(payload)
        return StoredBlock(block_hash, token_ids, kv, index, self.epoch)

    def _tensors(self, payload: memoryview) -> tuple[torch.Tensor, torch.Tensor]:
        flat = torch.frombuffer(payload, dtype=torch.uint8)
        kv_bytes = _numel(self.kv_shape) * self.dtype.itemsize
        return flat[:kv_bytes].view(self.dtype).view(self.kv_shape), flat[kv_bytes:].view(self.dtype).view(self.index_shape)


def _numel(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n

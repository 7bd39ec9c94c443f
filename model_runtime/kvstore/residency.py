"""Sparse residency: attention over sequences whose older latent blocks live in host memory.

Role: with DSA, a query attends to at most `index_topk` keys chosen by the indexer, whose keys
stay on the device for every context block. `SpilledLatents.gather` runs between a layer's
top-k selection and its attention: it copies the rows the selected slots name, from the device
pool or from the host spill pool, into one compact tensor and renumbers the slots into it, so
the attention kernels run unchanged and only the selected spilled rows cross to the device.

Invariants:
- The compact rows come in ascending order of the original slots, and a slot keeps its place in
  each query's list: the attention sees the same keys, in the same order, as over a fully
  resident cache.
- -1 ("no key") stays -1. A spilled slot is `block * block_size + offset` with
  `block >= num_blocks`; its row is `spill[layer][block - num_blocks, offset]`.
- The layer is the one whose device latent tensor (or a view of it) is passed in.
"""

from __future__ import annotations

import torch

from model_runtime.cache import KVCache


class SpilledLatents:
    def __init__(self, cache: KVCache) -> None:
        self.cache = cache
        self.device_slots = cache.num_blocks * cache.block_size
        self.layer_of = {t.data_ptr(): i for i, t in enumerate(cache.kv)}

    @classmethod
    def for_step(cls, cache: KVCache, block_tables: list[list[int]]) -> SpilledLatents | None:
        """A gatherer when some sequence of the step has spilled blocks, else None."""
        if not cache.spill_blocks or not any(b >= cache.num_blocks for t in block_tables for b in t):
            return None
        return cls(cache)

    def gather(self, kv_cache: torch.Tensor, slots: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(rows [U, 1, kv_dim], slots renumbered into them) for the slots [..] of one layer."""
        width = kv_cache.shape[-1]
        layer = self.layer_of[kv_cache.data_ptr()]
        wanted, inverse = torch.unique(slots, return_inverse=True)  # sorted; -1 (if any) first
        rows = torch.zeros(wanted.numel(), 1, width, dtype=kv_cache.dtype, device=kv_cache.device)
        on_device = (wanted >= 0) & (wanted < self.device_slots)
        rows[on_device, 0] = kv_cache.reshape(-1, width)[wanted[on_device]]
        spilled = wanted >= self.device_slots
        if bool(spilled.any()):
            host_slots = (wanted[spilled] - self.device_slots).cpu()
            fetched = self.cache.spill[layer].view(-1, width)[host_slots]
            rows[spilled, 0] = fetched.to(kv_cache.device, non_blocking=True)
            self.cache.spill_rows_read += host_slots.numel()
        renumbered = inverse.view(slots.shape).to(slots.dtype).masked_fill(slots < 0, -1)
        return rows, renumbered

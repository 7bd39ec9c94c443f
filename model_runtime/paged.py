"""The forward context of one engine step over the paged KV cache, and its two attention ops.

Role: `PagedBatch` describes a flat batch of N new tokens from B sequences (nano-vllm's
varlen layout): positions, the cache slots to write, each sequence's block table and context
length, and everything derived from them once per step and shared by all layers (RoPE tables,
key slots, causal index lists). `sparse_attention` and `indexer_topk` dispatch to `kernels/`
(Triton on CUDA, the torch reference elsewhere).

Invariants:
- A physical slot is `block * block_size + offset`; index lists use -1 for "no token".
- Queries of one sequence are contiguous in the flat batch and in position order.
- `dense` is true when every query sees at most `index_topk` keys: DSA is then exactly dense
  causal attention and the indexer need not run.
- A step in which every sequence feeds at most `LEAN_MAX_NEW` tokens (`lean_decode`, on the
  torch references: a decode step, or a speculative step verifying an MTP draft) runs `lean`'s
  per-query forms of both ops over `causal_slots`, and RoPE from one complex table
  (`Rope.rotation`), each computed once per step; when its sequences
  share most blocks (`shared_keys`), the indexer reads each shared key once.
- Slots index the indexer-key cache; attention reads latents through `attendable`, which is the
  identity unless some blocks' latents are spilled to the host (`kvstore.residency`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING

import torch

import kernels
from model_runtime import lean
from model_runtime.rope import Rope, rope_tables

if TYPE_CHECKING:
    from model_runtime.kvstore.residency import SpilledLatents


EXPANDED_BYTES = 256 << 20  # expanded keys and values per layer up to which a sparse prefill expands them
# The absorbed form's torch reference gathers its top-k latents per query: measured on the CPU
# (mid model, one thread), it spends ~4x the time per multiply-add of the expanded form's few
# large matmuls (prefills of 1,200 tokens: expanded faster; 2,400 and 3,600: absorbed faster).
ABSORBED_OVERHEAD = 4
LEAN_MAX_NEW = 4  # new tokens per sequence up to which a step runs `lean`'s per-query forms


@dataclass(frozen=True, slots=True)
class AttentionCost:
    """The MLA shape of a model, for choosing the cheaper attention form of a sparse step.

    Per layer and sequence, in multiply-adds: the expanded form expands every context latent
    to keys and values and attends densely (masked) over all of them; the absorbed form attends
    each query over its selected latents only. Expanding wins for a long prefill over a fresh
    context; absorbing wins for a few new tokens over a long cached one (a scoring forward of
    candidates after a 3.6k-token prompt: 0.4-0.7 s against 1.2-1.5 s expanded, mid model)."""

    heads: int
    kv_rank: int
    nope: int
    rope: int
    v: int
    element_size: int

    @property
    def expanded_key_bytes(self) -> int:
        """Bytes of one context token's expanded keys and values."""
        return self.heads * (self.nope + self.v) * self.element_size

    def expanded(self, new: int, keys: int) -> int:
        return keys * self.kv_rank * self.heads * (self.nope + self.v) + new * keys * self.heads * (self.nope + self.rope + self.v)

    def absorbed(self, new: int, selected: int) -> int:
        per_query = self.kv_rank * (self.nope + self.v) + 2 * selected * (self.kv_rank + self.rope)
        return ABSORBED_OVERHEAD * new * self.heads * per_query


@dataclass
class PagedBatch:
    positions: torch.Tensor  # [N] long, absolute position of each new token
    slot_mapping: torch.Tensor  # [N] long, cache slot each new token is written to
    seq_ids: torch.Tensor  # [N] long, row of block_table / context_lens
    query_starts: list[int]  # B+1 offsets into the flat batch
    context_len_list: list[int]  # per sequence: cached + new tokens after this step
    key_slots: torch.Tensor  # [B, T_max] long, slot of every context token (-1 padded)
    block_table: torch.Tensor  # [B, max_blocks] int32 (-1 = unused)
    block_size: int
    rope: Rope  # [N, dr/2] fp32 tables; their complex form too on the lean decode path
    dense: bool
    use_absorbed: bool
    lean_decode: bool  # every sequence feeds <= LEAN_MAX_NEW tokens on the torch references: `lean`'s per-query forms
    _inverse: dict[int, torch.Tensor] = field(default_factory=dict, repr=False)
    latents: SpilledLatents | None = None  # set when a sequence has latents spilled to the host

    @classmethod
    def build(
        cls,
        spans: list[tuple[int, int]],
        block_tables: list[list[int]],
        block_size: int,
        index_topk: int,
        rope: tuple[int, float],
        attention: str = "auto",
        device: torch.device | str = "cpu",
        cost: AttentionCost | None = None,
    ) -> PagedBatch:
        """spans[b] = (first new position, context length after the step) of sequence b.

        `attention="auto"` attends in the absorbed form for decode-sized steps (<= 16 new tokens
        per sequence) and sparse steps, in the expanded form otherwise; with the model's `cost`
        a sparse step on the torch references is expanded too where the longest context's
        expanded keys take <= `EXPANDED_BYTES` and expanding costs less (`AttentionCost`)."""
        positions = torch.cat([torch.arange(s, e, device=device) for s, e in spans])
        width = max(len(t) for t in block_tables)
        table = torch.full((len(spans), width), -1, dtype=torch.int32, device=device)
        for b, t in enumerate(block_tables):
            table[b, : len(t)] = torch.tensor(t, dtype=torch.int32, device=device)
        lens = [e for _, e in spans]
        t_max = max(lens)
        offsets = torch.arange(t_max, device=device)
        key_slots = table[:, offsets // block_size].long() * block_size + offsets % block_size
        key_slots = key_slots.masked_fill(offsets[None, :] >= torch.tensor(lens, device=device)[:, None], -1)
        seq_ids = torch.cat([torch.full((e - s,), b, device=device) for b, (s, e) in enumerate(spans)])
        slot_mapping = key_slots[seq_ids, positions]
        starts = [0]
        for s, e in spans:
            starts.append(starts[-1] + e - s)
        dense = t_max <= index_topk
        max_new = max(e - s for s, e in spans)
        on_triton = kernels.runs_triton(positions)
        expand = cost is not None and t_max * cost.expanded_key_bytes <= EXPANDED_BYTES and not on_triton
        if expand and not dense:
            expand = sum(cost.expanded(e - s, e) for s, e in spans) <= sum(cost.absorbed(e - s, min(e, index_topk)) for s, e in spans)
        absorbed = {"absorbed": True, "expanded": False}.get(attention, not (dense or expand) or max_new <= 16)
        lean_step = max_new <= LEAN_MAX_NEW and not on_triton
        tables = rope_tables(positions, *rope, lean_step=lean_step)
        return cls(positions, slot_mapping, seq_ids, starts, lens, key_slots, table, block_size, tables, dense, absorbed, lean_step)

    def attendable(self, kv_cache: torch.Tensor, slots: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The latent cache and slots that attention reads: `kv_cache` and `slots` themselves, or,
        with sparse residency, a compact copy of just the rows `slots` name, and slots into it."""
        return (kv_cache, slots) if self.latents is None else self.latents.gather(kv_cache, slots)

    @property
    def num_seqs(self) -> int:
        return len(self.context_len_list)

    def query_spans(self) -> list[tuple[int, int]]:
        return list(zip(self.query_starts[:-1], self.query_starts[1:]))

    @property
    def one_token_each(self) -> bool:
        """Every sequence feeds one token: a plain decode step."""
        return self.positions.shape[0] == self.num_seqs

    @cached_property
    def shared_keys(self) -> lean.SharedKeys | None:
        """For a lean decode step whose sequences share most of their blocks (one prompt's
        n-best): the distinct blocks, and each key's column among their slots, per query
        (like `causal_slots`; its -1 keys get column 0 and stay masked there). Scoring every query
        against the distinct keys gathers a shared key once instead of once per sequence. None
        where that costs more: one sequence, or sequences with blocks of their own."""
        table, bs = self.block_table, self.block_size
        if table.shape[0] == 1:
            return None
        used = table >= 0
        blocks, inverse = torch.unique(table[used].long(), return_inverse=True)
        per_row = sum(self.context_len_list)  # the keys a per-sequence gather reads
        if blocks.numel() * bs * (table.shape[0] + 1) >= 2 * per_row:
            return None
        where = torch.full(table.shape, -1, dtype=torch.long, device=table.device)
        where[used] = inverse
        t = torch.arange(self.key_slots.shape[1], device=table.device)
        columns = (where[:, t // bs] * bs + t % bs).clamp_(min=0)
        return lean.SharedKeys(blocks, columns if self.one_token_each else columns[self.seq_ids])

    @cached_property
    def causal_slots(self) -> torch.Tensor:
        """[N, K] slots of every key each query may see (keys 0..pos), -1 padded: `key_slots`
        itself when every sequence feeds one token (its query sees all its keys)."""
        if self.one_token_each:
            return self.key_slots
        width = int(self.positions.max()) + 1
        offsets = torch.arange(width, device=self.positions.device)
        slots = self.key_slots[self.seq_ids][:, :width]
        return slots.masked_fill(offsets[None, :] > self.positions[:, None], -1)

    def causal_mask(self, b: int) -> torch.Tensor:
        """[n_b, T_b] bool: query i of sequence b may see key t."""
        start, end = self.query_starts[b], self.query_starts[b + 1]
        keys = torch.arange(self.context_len_list[b], device=self.positions.device)
        return keys[None, :] <= self.positions[start:end, None]

    def selection_mask(self, b: int, slots: torch.Tensor) -> torch.Tensor:
        """[n_b, T_b] bool from physical top-k slots [n_b, K] of sequence b (-1 ignored)."""
        n_keys = self.context_len_list[b]
        pos = self._slot_positions(b)[slots.clamp(min=0)]
        pos = torch.where(slots < 0, n_keys, pos)
        mask = torch.zeros(slots.shape[0], n_keys + 1, dtype=torch.bool, device=slots.device)
        return mask.scatter(-1, pos, True)[:, :n_keys]

    def _slot_positions(self, b: int) -> torch.Tensor:
        """Inverse of key_slots[b]: a lookup table slot -> position (garbage for other slots)."""
        if b not in self._inverse:
            slots = self.key_slots[b, : self.context_len_list[b]]
            table = torch.zeros(int(slots.max()) + 1, dtype=torch.long, device=slots.device)
            table[slots] = torch.arange(slots.numel(), device=slots.device)
            self._inverse[b] = table
        return self._inverse[b]


def sparse_attention(
    q: torch.Tensor, kv_cache: torch.Tensor, indices: torch.Tensor, scale: float, d_v: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """q [N,H,C] over cached keys kv_cache [NB,BS,C] at slots indices [N,K] -> ([N,H,d_v], lse [N,H])."""
    return kernels.sparse_mla_attention(q, kv_cache, indices.to(torch.int32), scale, d_v)


def indexer_topk(
    q: torch.Tensor, w: torch.Tensor, index_cache: torch.Tensor, batch: PagedBatch, scale: float, topk: int
) -> torch.Tensor:
    """Physical slots [N, topk] of each query's top-k causal keys by indexer score (-1 padded)."""
    if batch.lean_decode:
        if torch.compiler.is_dynamo_compiling():  # a one-token step (`CompiledDecode.covers`); shared keys have data-dependent sizes
            return lean.decode_topk(q, w, index_cache, batch.key_slots, scale, topk)
        return lean.decode_topk(q, w, index_cache, batch.causal_slots, scale, topk, batch.shared_keys)
    lens = torch.tensor(batch.context_len_list, device=q.device)
    return kernels.indexer_topk(q, w, index_cache, batch.block_table, batch.seq_ids, batch.positions, lens, scale, topk)

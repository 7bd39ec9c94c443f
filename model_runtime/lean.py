"""Lean torch forms of the engine's per-step ops, for when `kernels` would run its torch reference.

Role: the CPU inference path. The references in `kernels/` validate every argument, chunk their
temporaries and recompute each sequence's key slots from the block table on every call: right
for an op library, but in a decode step that is a few thousand small operations for a handful
of tokens. These functions do the same maths without that bookkeeping, using what `PagedBatch`
computed once for the step:
- `rms_norm`, `rope`: the references' arithmetic, no validation or chunking; `rotate`: `rope`'s
  product with a complex table the caller made (a lean step makes one for all its layers);
- `decode_topk`, `decode_attention`: the DSA indexer's top-k and sparse MLA attention for a step
  in which every sequence feeds a few tokens (a decode step, or one verifying an MTP draft),
  each query over its own key slots (its sequence's keys up to its position); the top-k reads
  keys that several sequences share (an n-best's prompt) once, not once each.

Invariants:
- Same results as the references (tests pin them): same selection rule (the k best scores,
  ties at the k-th to the lowest positions, slots in key-position order, -1 padded), scores,
  softmax and weighted sums in fp32, outputs in the inputs' dtype.
- Called only by the model, with arguments it built itself; used only when
  `kernels.runs_triton` is false for the step's tensors (Triton keeps its own kernels).
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F

from kernels.indexer import best_columns
from kernels.rows import gather_rows


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """[..., D] -> [..., D]: `kernels.rms_norm_ref(x, weight, eps)[0]` without its checks."""
    if x.dtype == weight.dtype == torch.float32:  # the same maths without the dtype round trips, one op
        return F.rms_norm(x, (x.shape[-1],), weight, eps)
    normed = F.rms_norm(x.float(), (x.shape[-1],), eps=eps).to(x.dtype)
    return (normed.float() * weight.float()).to(x.dtype)


def rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x [S, H, R] interleaved pairs rotated by cos/sin [S, R/2] (fp32), in x's dtype: the
    complex product of `kernels.rope_interleaved_ref`, through `rotate` with a table made for
    this call (under `torch.compile`, whose code generation has no complex numbers, the same
    product in real arithmetic)."""
    if torch.compiler.is_dynamo_compiling():
        a, b = x.float()[..., 0::2], x.float()[..., 1::2]
        c, s = cos[:, None, :], sin[:, None, :]
        return torch.stack((a * c - b * s, b * c + a * s), dim=-1).flatten(2).to(x.dtype)
    return rotate(x, torch.complex(cos, sin))


def rotate(x: torch.Tensor, rotation: torch.Tensor) -> torch.Tensor:
    """x [S, R] or [S, H, R] interleaved pairs rotated by a complex table [S, R/2]
    (`torch.complex(cos, sin)`; a lean step makes it once, `Rope.rotation`), in x's dtype; x's
    pairs are read in place where its strides allow, else from a copy."""
    pairs = (x if x.dtype == torch.float32 else x.float()).unflatten(-1, (-1, 2))
    if pairs.storage_offset() % 2 or any(stride % 2 for stride in pairs.stride()[:-2]):
        pairs = pairs.contiguous()
    table = rotation if x.dim() == 2 else rotation[:, None, :]
    out = torch.view_as_real(torch.view_as_complex(pairs) * table).flatten(-2)
    return out if x.dtype == torch.float32 else out.to(x.dtype)


class SharedKeys(NamedTuple):
    """The keys of a decode step whose sequences share blocks (`PagedBatch.shared_keys`)."""

    blocks: torch.Tensor  # [U] long, the distinct blocks of every sequence
    columns: torch.Tensor  # [B, T] long, key t of sequence b among the U blocks' slots


def decode_topk(
    q: torch.Tensor, w: torch.Tensor, index_cache: torch.Tensor, key_slots: torch.Tensor, scale: float, topk: int,
    shared: SharedKeys | None = None,
) -> torch.Tensor:  # fmt: skip
    """Physical slots [N, topk] int32 of each query's best keys, -1 padded.

    q [N, Hi, Di] and w [N, Hi] (fp32) are the step's queries; key_slots [N, T] (long, -1
    padded) the slot of every key each query sees, its own token's included. With `shared`,
    every query is scored against the distinct blocks' keys, each gathered once, and reads its
    own columns.
    """
    dim = index_cache.shape[-1]
    if shared is None:
        keys = gather_rows(index_cache.view(-1, dim), key_slots.clamp(min=0)).float()  # [B, T, Di]
        logits = torch.matmul(q.float(), keys.transpose(1, 2)).mul_(scale).relu_()  # [B, Hi, T]
        scores = torch.matmul(w.float()[:, None, :], logits).squeeze(1)  # [B, T]
    else:
        keys = gather_rows(index_cache, shared.blocks).view(-1, dim).float()  # [U * block, Di]
        logits = torch.matmul(q.float(), keys.T).mul_(scale).relu_()  # [B, Hi, U * block]
        scores = torch.matmul(w.float()[:, None, :], logits).squeeze(1).gather(1, shared.columns)
    scores.masked_fill_(key_slots < 0, float("-inf"))
    return _best_slots(scores, key_slots, topk)


def _best_slots(scores: torch.Tensor, key_slots: torch.Tensor, topk: int) -> torch.Tensor:
    """[B, topk] int32: the slots of each row's k best finite scores in position order, ties at
    the k-th score to the lowest positions, -1 padded (`kernels.indexer.best_columns`)."""
    if min(topk, scores.shape[1]) == 0:
        return key_slots.new_full((scores.shape[0], topk), -1).int()
    columns, chosen = best_columns(scores, topk)
    slots = key_slots.gather(1, columns).masked_fill_(~chosen, -1).int()
    if columns.shape[1] == topk:  # every row has at least topk keys (the usual decode step)
        return slots
    out = slots.new_full((scores.shape[0], topk), -1)
    out[:, : columns.shape[1]] = slots
    return out


def decode_attention(q: torch.Tensor, kv: torch.Tensor, idx: torch.Tensor, scale: float, d_v: int) -> torch.Tensor:
    """q [B, H, C] over rows kv [slots, C] at idx [B, K] (-1 = none) -> out [B, H, d_v] in q's dtype.

    Each query gathers its own K rows (`kernels.sparse_mla_attention_ref`'s per-query form); a
    query always sees at least its own token, so no row is empty.
    """
    missing = idx < 0
    keys = gather_rows(kv, idx.clamp(min=0)).float()  # [B, K, C]
    scores = torch.matmul(q.float(), keys.transpose(1, 2)).mul_(scale)
    scores.masked_fill_(missing[:, None, :], float("-inf"))
    lse = torch.logsumexp(scores, dim=2)
    probs = scores.sub_(lse[..., None]).exp_()
    return torch.matmul(probs, keys[..., :d_v]).to(q.dtype)

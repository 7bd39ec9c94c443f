"""Sparse MLA attention over a paged latent KV cache (DSA; FlashMLA's sparse "MQA mode").

Role: every query head attends to its own list of cache slots. GLM-5 calls it with
q = [q_abs (512) | q_pe (64)] against cache rows [c (512) | k_pe (64)]; the values are the
first `d_v` columns of the same rows. Decode (one query per sequence) and prefill (many
queries) are the same call: causality is already encoded in the index lists.

Maths, per query s and head h over the valid j:
    out[s, h] = Σ_j softmax_j(sm_scale · q[s, h]·kv[idx[s, j]]) · kv[idx[s, j], :d_v]
    lse[s, h] = ln Σ_j exp(sm_scale · q[s, h]·kv[idx[s, j]])

Invariants:
- An index outside [0, NB·BS) (-1 by convention) is no token and is never read.
- A query with no valid index ("lonely q") gets out = 0 and lse = +inf.
- Scores, softmax and the weighted sum accumulate in fp32; `out` has q's dtype.
- The reference keeps its temporaries under `chunks.MEMORY_BUDGET` by chunking over queries.
- The Triton path splits the index list across programs when there are few queries (decode)
  and merges the partial results by their log-sum-exp.
"""

from __future__ import annotations

import math

import torch

from kernels import launch
from kernels.chunks import chunks, rows_per_chunk
from kernels.rows import gather_rows
from kernels.validate import (
    FLOAT_DTYPES,
    INDEX_DTYPES,
    check_contiguous,
    check_dim,
    check_inner_contiguous,
    check_int,
    check_positive,
    check_same_device,
    check_tensor,
)

jit = launch.LazyModule("kernels.jit.sparse_mla")  # the @triton.jit kernels: triton loads only when a Triton twin runs

OP = "sparse_mla_attention"
LOG2E = math.log2(math.e)


def split_plan(num_queries: int, head_blocks: int, k: int, block_k: int, target: int) -> tuple[int, int]:
    """(number of splits, keys per split) so that queries × head blocks × splits ≈ target.

    Splits never outnumber the key tiles, and every split but the last holds whole tiles.
    """
    tiles = launch.cdiv(k, block_k)
    if tiles == 0:
        return 1, 0
    wanted = max(1, min(tiles, launch.cdiv(target, max(1, num_queries * head_blocks))))
    tiles_per_split = launch.cdiv(tiles, wanted)
    return launch.cdiv(tiles, tiles_per_split), tiles_per_split * block_k


def _validate(
    q: torch.Tensor, kv_cache: torch.Tensor, indices: torch.Tensor, sm_scale: float, d_v: int
) -> None:
    check_tensor(OP, "q", q, dims="S, H, D", dtypes=FLOAT_DTYPES)
    check_tensor(OP, "kv_cache", kv_cache, dims="NB, BS, D", dtypes=FLOAT_DTYPES)
    check_tensor(OP, "indices", indices, dims="S, K", dtypes=INDEX_DTYPES)
    check_same_device(OP, q=q, kv_cache=kv_cache, indices=indices)
    if kv_cache.dtype != q.dtype:
        raise ValueError(f"{OP}: kv_cache dtype {kv_cache.dtype} must match q dtype {q.dtype}")
    check_dim(OP, "kv_cache", kv_cache, 2, q.shape[2], "q's head dim D")
    check_dim(OP, "indices", indices, 0, q.shape[0], "q's number of queries S")
    check_int(OP, "d_v", d_v, minimum=1)
    if d_v > q.shape[2]:
        raise ValueError(f"{OP}: d_v={d_v} exceeds the head dim D={q.shape[2]}")
    check_positive(OP, "sm_scale", sm_scale)
    check_inner_contiguous(OP, "q", q)
    check_inner_contiguous(OP, "indices", indices)
    check_contiguous(OP, "kv_cache", kv_cache)


def sparse_mla_attention_ref(
    q: torch.Tensor, kv_cache: torch.Tensor, indices: torch.Tensor, sm_scale: float, d_v: int = 512
) -> tuple[torch.Tensor, torch.Tensor]:
    """Torch reference. Shapes and maths: see `sparse_mla_attention_triton`."""
    _validate(q, kv_cache, indices, sm_scale, d_v)
    num_q, heads, dim = q.shape
    kv = kv_cache.reshape(-1, dim)
    out = q.new_empty(num_q, heads, d_v)
    lse = torch.empty(num_q, heads, dtype=torch.float32, device=q.device)
    k = indices.shape[1]
    per_query = 4 * (k * dim + 3 * heads * k + heads * (dim + d_v))
    group = min(rows_per_chunk(per_query), SHARED_GROUP) if num_q > SHARED_GROUP else num_q
    for rows in chunks(num_q, group):
        out[rows], lse[rows] = _attend_chunk(q[rows], kv, indices[rows].long(), sm_scale, d_v)
    return out, lse


# Prefill queries are handled SHARED_GROUP at a time: neighbouring queries select mostly the same
# keys, so the union of a group's keys stays small and one dense matmul over it replaces a
# per-query gather (measured on CPU: several times faster once T > top-k).
SHARED_GROUP = 64
SHARED_UNION_FACTOR = 4


def _attend_chunk(
    q: torch.Tensor, kv: torch.Tensor, idx: torch.Tensor, sm_scale: float, d_v: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """q [c, H, D] against kv [slots, D] at idx [c, K] (int64) -> (out [c, H, d_v], lse [c, H]).

    When the chunk's queries share keys (prefill: neighbouring queries select mostly the same
    prefix), the union of their U slots is gathered once and each query weighs key u by how
    often it lists it (scores + ln count: -inf for keys it does not list). Otherwise, and always
    for a single query (decode: no union to share, so no sort), each query gathers its own K rows. The shared form is used when U <= SHARED_UNION_FACTOR * K: a dense
    matmul over U keys costs less than gathering K keys per query.
    """
    valid = (idx >= 0) & (idx < kv.shape[0])
    idx = idx.where(valid, 0)
    slots, inverse = torch.unique(idx, return_inverse=True) if idx.shape[0] > 1 else (idx, None)
    if inverse is not None and slots.numel() <= SHARED_UNION_FACTOR * idx.shape[1]:
        keys = gather_rows(kv, slots).float()  # [U, D]
        counts = keys.new_zeros(idx.shape[0], slots.numel()).scatter_add_(1, inverse, valid.float())
        scores = torch.matmul(q.float(), keys.T).mul_(sm_scale).add_(counts.log_()[:, None, :])
        values = keys[:, :d_v]
    else:  # one query (decode) or disjoint lists: gather each query's own keys
        keys = gather_rows(kv, idx).float()  # [c, K, D]
        scores = torch.matmul(q.float(), keys.transpose(1, 2)).mul_(sm_scale)
        scores.masked_fill_(~valid[:, None, :], float("-inf"))
        values = keys[..., :d_v]
    lse = torch.logsumexp(scores, dim=2)
    lonely = lse == float("-inf")
    probs = scores.sub_(lse.masked_fill(lonely, 0.0)[..., None]).exp_()
    out = torch.matmul(probs, values)
    return out.to(q.dtype), lse.masked_fill(lonely, float("inf"))


def sparse_mla_attention_triton(
    q: torch.Tensor, kv_cache: torch.Tensor, indices: torch.Tensor, sm_scale: float, d_v: int = 512
) -> tuple[torch.Tensor, torch.Tensor]:
    """Sparse MLA attention of each query over its own list of paged-cache slots.

    q:        [S, H, D] fp32/fp16/bf16, last dim contiguous (GLM-5: D = 576 = 512 latent + 64 rope)
    kv_cache: [NB, BS, D] same dtype, contiguous; slot = block * BS + offset
    indices:  [S, K] int32/int64 slots, -1 (or any slot outside [0, NB·BS)) = no token
    sm_scale: softmax scale (GLM-5: 256^-½)
    d_v:      value width: the values are kv[:, :d_v]
    returns:  out [S, H, d_v] in q's dtype, lse [S, H] fp32 (natural log; +inf for a lonely q)
    out[s,h] = Σ_j softmax_j(sm_scale · q[s,h]·kv[idx[s,j]]) · kv[idx[s,j], :d_v]
    """
    _validate(q, kv_cache, indices, sm_scale, d_v)
    launch.check_launch_device(OP, jit._sparse_mla_split_kernel, q.device)
    num_q, heads, dim = q.shape
    out = q.new_empty(num_q, heads, d_v)
    lse = torch.empty(num_q, heads, dtype=torch.float32, device=q.device)
    if out.numel() == 0:
        return out, lse
    dot_fp32 = launch.dot_in_fp32(jit._sparse_mla_split_kernel, q.dtype)
    block_h, block_k = 16, 16 if dot_fp32 else 32
    head_blocks = launch.cdiv(heads, block_h)
    target = launch.target_programs(jit._sparse_mla_split_kernel, q.device)
    splits, keys_per_split = split_plan(num_q, head_blocks, indices.shape[1], block_k, target)
    if splits == 1:
        part_out, part_lse = out[:, :, None], lse[:, :, None]
    else:
        part_out = torch.empty(num_q, heads, splits, d_v, dtype=torch.float32, device=q.device)
        part_lse = torch.empty(num_q, heads, splits, dtype=torch.float32, device=q.device)
    jit._sparse_mla_split_kernel[(num_q * head_blocks * splits,)](
        q, kv_cache, indices, part_out, part_lse,
        heads, indices.shape[1], kv_cache.shape[0] * kv_cache.shape[1], sm_scale * LOG2E,
        keys_per_split, splits,
        q.stride(0), q.stride(1), kv_cache.stride(1), indices.stride(0),
        part_out.stride(0), part_out.stride(1), part_out.stride(2),
        part_lse.stride(0), part_lse.stride(1), part_lse.stride(2),
        D_V=d_v, D_R=dim - d_v, BLOCK_H=block_h, BLOCK_K=block_k,
        BLOCK_DV=launch.block(d_v), BLOCK_DR=launch.block(dim - d_v),
        DOT_FP32=dot_fp32, PRECISION="ieee" if dot_fp32 else "tf32",
        LONELY_LSE=float("inf") if splits == 1 else float("-inf"),
        num_warps=4, num_stages=2,
    )  # fmt: skip
    if splits > 1:
        jit._sparse_mla_combine_kernel[(num_q * heads,)](
            part_out, part_lse, out, lse, heads, splits,
            part_out.stride(0), part_out.stride(1), part_out.stride(2),
            part_lse.stride(0), part_lse.stride(1),
            out.stride(0), out.stride(1), lse.stride(0), lse.stride(1),
            D_V=d_v, BLOCK_DV=launch.block(d_v), BLOCK_SPLIT=launch.block(splits, minimum=2),
        )  # fmt: skip
    return out, lse

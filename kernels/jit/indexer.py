"""Triton kernels of `kernels.indexer`: DSA indexer scores.

Role: the `@triton.jit` code only; `kernels.indexer` validates, plans the launch and calls these
from its `_triton` twin, which imports this module on first use (see `kernels.jit`).
"""

import triton
import triton.language as tl


@triton.jit
def _indexer_scores_kernel(
    q_ptr, w_ptr, cache_ptr, table_ptr, seq_ids_ptr, positions_ptr, seq_lens_ptr, out_ptr,
    Hi, D, T, B, BS, num_blocks, scale,
    stride_qs, stride_qh, stride_ws, stride_slot, stride_tb, stride_os,
    BLOCK_HI: tl.constexpr, BLOCK_T: tl.constexpr, BLOCK_D: tl.constexpr,
    DOT_FP32: tl.constexpr, PRECISION: tl.constexpr,
):  # fmt: skip
    pid = tl.program_id(0)
    tiles = tl.cdiv(T, BLOCK_T)
    s = (pid // tiles).to(tl.int64)
    offs_t = (pid % tiles) * BLOCK_T + tl.arange(0, BLOCK_T)
    b = tl.load(seq_ids_ptr + s).to(tl.int64)
    b_ok = (b >= 0) & (b < B)
    b = tl.where(b_ok, b, 0)
    seq_len = tl.load(seq_lens_ptr + b, mask=b_ok, other=0).to(tl.int64)
    limit = tl.minimum(tl.minimum(tl.load(positions_ptr + s).to(tl.int64) + 1, seq_len), T)
    out = tl.full([BLOCK_T], float("-inf"), tl.float32)
    if (pid % tiles) * BLOCK_T < limit:  # tiles wholly after the query stay -inf, unread
        in_seq = offs_t < limit
        blk = tl.load(table_ptr + b * stride_tb + offs_t // BS, mask=in_seq, other=-1).to(tl.int64)
        ok = in_seq & (blk >= 0) & (blk < num_blocks)
        slot = tl.where(ok, blk * BS + offs_t % BS, 0)
        offs_h = tl.arange(0, BLOCK_HI)
        offs_d = tl.arange(0, BLOCK_D)
        d_ok = offs_d < D
        k_ptrs = cache_ptr + slot[:, None] * stride_slot + offs_d[None, :]
        k = tl.load(k_ptrs, mask=ok[:, None] & d_ok[None, :], other=0.0)
        q_mask = (offs_h[:, None] < Hi) & d_ok[None, :]
        q_ptrs = q_ptr + s * stride_qs + offs_h[:, None] * stride_qh + offs_d[None, :]
        q = tl.load(q_ptrs, mask=q_mask, other=0.0)
        if DOT_FP32:
            k = k.to(tl.float32)
            q = q.to(tl.float32)
        w = tl.load(w_ptr + s * stride_ws + offs_h, mask=offs_h < Hi, other=0.0).to(tl.float32)
        logits = tl.dot(q, tl.trans(k), input_precision=PRECISION) * scale  # [BLOCK_HI, BLOCK_T]
        score = tl.sum(tl.maximum(logits, 0.0) * w[:, None], 0)
        out = tl.where(ok, score, out)
    tl.store(out_ptr + s * stride_os + offs_t, out, mask=offs_t < T)

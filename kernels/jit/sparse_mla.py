"""Triton kernels of `kernels.sparse_mla`: sparse MLA attention (split-K partials and their combine).

Role: the `@triton.jit` code only; `kernels.sparse_mla` validates, plans the launch and calls these
from its `_triton` twin, which imports this module on first use (see `kernels.jit`).
"""

import triton
import triton.language as tl


@triton.jit
def _sparse_mla_split_kernel(
    q_ptr, kv_ptr, idx_ptr, out_ptr, lse_ptr,
    H, K, num_slots, scale_log2, keys_per_split, num_splits,
    stride_qs, stride_qh, stride_kv, stride_is,
    stride_os, stride_oh, stride_osp, stride_ls, stride_lh, stride_lsp,
    D_V: tl.constexpr, D_R: tl.constexpr,
    BLOCK_H: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_DV: tl.constexpr, BLOCK_DR: tl.constexpr,
    DOT_FP32: tl.constexpr, PRECISION: tl.constexpr, LONELY_LSE: tl.constexpr,
):  # fmt: skip
    # Adjacent programs share (query, split), so the KV rows they gather are reused from L2.
    pid = tl.program_id(0)
    head_blocks = tl.cdiv(H, BLOCK_H)
    hb = pid % head_blocks
    sp = (pid // head_blocks) % num_splits
    s = pid // (head_blocks * num_splits)

    offs_h = hb * BLOCK_H + tl.arange(0, BLOCK_H)
    offs_v = tl.arange(0, BLOCK_DV)
    offs_r = tl.arange(0, BLOCK_DR)
    h_ok = offs_h < H
    v_ok = offs_v < D_V
    r_ok = offs_r < D_R
    q_rows = q_ptr + s.to(tl.int64) * stride_qs + offs_h[:, None] * stride_qh
    q_c = tl.load(q_rows + offs_v[None, :], mask=h_ok[:, None] & v_ok[None, :], other=0.0)
    q_r = tl.load(q_rows + D_V + offs_r[None, :], mask=h_ok[:, None] & r_ok[None, :], other=0.0)
    if DOT_FP32:
        q_c = q_c.to(tl.float32)
        q_r = q_r.to(tl.float32)

    m = tl.full([BLOCK_H], float("-inf"), tl.float32)
    l = tl.zeros([BLOCK_H], tl.float32)
    acc = tl.zeros([BLOCK_H, BLOCK_DV], tl.float32)
    k_start = sp * keys_per_split
    k_end = tl.minimum(k_start + keys_per_split, K)
    for k0 in range(k_start, k_end, BLOCK_K):
        offs_k = k0 + tl.arange(0, BLOCK_K)
        idx = tl.load(idx_ptr + s.to(tl.int64) * stride_is + offs_k, mask=offs_k < k_end, other=-1)
        idx = idx.to(tl.int64)
        valid = (idx >= 0) & (idx < num_slots)
        rows = kv_ptr + tl.where(valid, idx, 0)[:, None] * stride_kv
        kc = tl.load(rows + offs_v[None, :], mask=valid[:, None] & v_ok[None, :], other=0.0)
        kr = tl.load(rows + D_V + offs_r[None, :], mask=valid[:, None] & r_ok[None, :], other=0.0)
        if DOT_FP32:
            kc = kc.to(tl.float32)
            kr = kr.to(tl.float32)
        qk = tl.dot(q_c, tl.trans(kc), input_precision=PRECISION)
        qk += tl.dot(q_r, tl.trans(kr), input_precision=PRECISION)
        qk = tl.where(valid[None, :], qk * scale_log2, float("-inf"))
        m_new = tl.maximum(m, tl.max(qk, 1))
        m_base = tl.where(m_new == float("-inf"), 0.0, m_new)  # no valid key yet: avoid inf - inf
        p = tl.exp2(qk - m_base[:, None])
        alpha = tl.exp2(m - m_base)
        l = l * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None] + tl.dot(p.to(kc.dtype), kc, input_precision=PRECISION)
        m = m_new

    lonely = l == 0.0
    out = acc / tl.where(lonely, 1.0, l)[:, None]
    lse = tl.where(lonely, LONELY_LSE, (m + tl.log2(tl.where(lonely, 1.0, l))) / 1.4426950408889634)
    out_rows = out_ptr + s.to(tl.int64) * stride_os + sp * stride_osp + offs_h[:, None] * stride_oh
    tl.store(out_rows + offs_v[None, :], out.to(out_ptr.dtype.element_ty), mask=h_ok[:, None] & v_ok[None, :])
    tl.store(lse_ptr + s.to(tl.int64) * stride_ls + sp * stride_lsp + offs_h * stride_lh, lse, mask=h_ok)


@triton.jit
def _sparse_mla_combine_kernel(
    part_out_ptr, part_lse_ptr, out_ptr, lse_ptr,
    H, num_splits,
    stride_pos, stride_poh, stride_posp, stride_pls, stride_plh,
    stride_os, stride_oh, stride_ls, stride_lh,
    D_V: tl.constexpr, BLOCK_DV: tl.constexpr, BLOCK_SPLIT: tl.constexpr,
):  # fmt: skip
    s = (tl.program_id(0) // H).to(tl.int64)
    h = tl.program_id(0) % H
    offs_sp = tl.arange(0, BLOCK_SPLIT)
    offs_v = tl.arange(0, BLOCK_DV)
    v_ok = offs_v < D_V
    lse_row = part_lse_ptr + s * stride_pls + h * stride_plh
    part_lse = tl.load(lse_row + offs_sp, mask=offs_sp < num_splits, other=float("-inf"))
    m = tl.max(part_lse, 0)
    lonely = m == float("-inf")
    m_base = tl.where(lonely, 0.0, m)
    total = tl.sum(tl.exp(part_lse - m_base), 0)
    acc = tl.zeros([BLOCK_DV], tl.float32)
    part_row = part_out_ptr + s * stride_pos + h * stride_poh
    for sp in range(0, num_splits):
        weight = tl.exp(tl.load(lse_row + sp) - m_base)
        acc += weight * tl.load(part_row + sp * stride_posp + offs_v, mask=v_ok, other=0.0)
    out = acc / tl.where(lonely, 1.0, total)
    lse = tl.where(lonely, float("inf"), m + tl.log(tl.where(lonely, 1.0, total)))
    tl.store(out_ptr + s * stride_os + h * stride_oh + offs_v, out.to(out_ptr.dtype.element_ty), mask=v_ok)
    tl.store(lse_ptr + s * stride_ls + h * stride_lh, lse)

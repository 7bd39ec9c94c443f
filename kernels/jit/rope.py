"""Triton kernels of `kernels.rope`: interleaved RoPE.

Role: the `@triton.jit` code only; `kernels.rope` validates, plans the launch and calls these
from its `_triton` twin, which imports this module on first use (see `kernels.jit`).
"""

import triton
import triton.language as tl


@triton.jit
def _rope_kernel(
    x_ptr, cos_ptr, sin_ptr, out_ptr,
    H, HALF, stride_xs, stride_xh, stride_cs, stride_ss, stride_os, stride_oh,
    BLOCK_H: tl.constexpr, BLOCK_HALF: tl.constexpr,
):  # fmt: skip
    s = tl.program_id(0).to(tl.int64)
    offs_h = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
    offs_i = tl.arange(0, BLOCK_HALF)
    i_ok = offs_i < HALF
    ok = (offs_h[:, None] < H) & i_ok[None, :]
    c = tl.load(cos_ptr + s * stride_cs + offs_i, mask=i_ok, other=0.0)[None, :]
    n = tl.load(sin_ptr + s * stride_ss + offs_i, mask=i_ok, other=0.0)[None, :]
    even = x_ptr + s * stride_xs + offs_h[:, None] * stride_xh + 2 * offs_i[None, :]
    a = tl.load(even, mask=ok, other=0.0).to(tl.float32)
    b = tl.load(even + 1, mask=ok, other=0.0).to(tl.float32)
    out_even = out_ptr + s * stride_os + offs_h[:, None] * stride_oh + 2 * offs_i[None, :]
    tl.store(out_even, (a * c - b * n).to(out_ptr.dtype.element_ty), mask=ok)
    tl.store(out_even + 1, (b * c + a * n).to(out_ptr.dtype.element_ty), mask=ok)

"""Triton kernels of `kernels.norm`: RMSNorm (+ residual add).

Role: the `@triton.jit` code only; `kernels.norm` validates, plans the launch and calls these
from its `_triton` twin, which imports this module on first use (see `kernels.jit`).
"""

import triton
import triton.language as tl


@triton.jit
def _rms_norm_kernel(
    x_ptr, res_ptr, w_ptr, y_ptr, res_out_ptr,
    D, eps, stride_x, stride_res, stride_y, stride_res_out,
    HAS_RESIDUAL: tl.constexpr, BLOCK_D: tl.constexpr,
):  # fmt: skip
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK_D)
    ok = offs < D
    x = tl.load(x_ptr + row * stride_x + offs, mask=ok, other=0.0)
    if HAS_RESIDUAL:
        r = tl.load(res_ptr + row * stride_res + offs, mask=ok, other=0.0)
        x = (x.to(tl.float32) + r.to(tl.float32)).to(x_ptr.dtype.element_ty)  # the add rounds like torch's
        tl.store(res_out_ptr + row * stride_res_out + offs, x, mask=ok)
    s = x.to(tl.float32)
    inv_rms = 1.0 / tl.sqrt(tl.sum(s * s, 0) / D + eps)
    normed = (s * inv_rms).to(x_ptr.dtype.element_ty).to(tl.float32)
    w = tl.load(w_ptr + offs, mask=ok, other=0.0).to(tl.float32)
    tl.store(y_ptr + row * stride_y + offs, (normed * w).to(y_ptr.dtype.element_ty), mask=ok)

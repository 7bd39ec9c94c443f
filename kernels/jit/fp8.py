"""Triton kernels of `kernels.fp8`: FP8 e4m3 block dequantisation.

Role: the `@triton.jit` code only; `kernels.fp8` validates, plans the launch and calls these
from its `_triton` twin, which imports this module on first use (see `kernels.jit`).
"""

import triton
import triton.language as tl


@triton.jit
def _decode_e4m3fn(bits):
    """uint8 codes (as int32) -> fp32 values."""
    sign = (bits >> 7) & 1
    exponent = (bits >> 3) & 15
    mantissa = bits & 7
    normal = (((exponent + 120) << 23) | (mantissa << 20)).to(tl.float32, bitcast=True)
    subnormal = mantissa.to(tl.float32) * 0.001953125  # mantissa · 2^-9
    magnitude = tl.where(exponent == 0, subnormal, normal)
    magnitude = tl.where((exponent == 15) & (mantissa == 7), float("nan"), magnitude)
    return (magnitude.to(tl.int32, bitcast=True) | (sign << 31)).to(tl.float32, bitcast=True)


@triton.jit
def _fp8_block_dequant_kernel(
    w_ptr, scale_ptr, out_ptr, rows, cols,
    stride_w, stride_scale, stride_out,
    QBLOCK: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr,
):  # fmt: skip
    offs_r = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    offs_c = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    ok = (offs_r[:, None] < rows) & (offs_c[None, :] < cols)
    offs_r64 = offs_r.to(tl.int64)[:, None]
    bits = tl.load(w_ptr + offs_r64 * stride_w + offs_c[None, :], mask=ok, other=0).to(tl.int32)
    scale_at = (offs_r64 // QBLOCK) * stride_scale + (offs_c // QBLOCK)[None, :]
    scale = tl.load(scale_ptr + scale_at, mask=ok, other=0.0)
    out = _decode_e4m3fn(bits) * scale
    tl.store(out_ptr + offs_r64 * stride_out + offs_c[None, :], out.to(out_ptr.dtype.element_ty), mask=ok)

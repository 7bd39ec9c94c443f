"""Block-wise FP8 (e4m3fn) weight dequantisation, as in the GLM-5-FP8 checkpoint.

Maths: W[i, j] = fp8(W)[i, j] · scale_inv[i // block, j // block]; edge blocks are cropped
when out/in are not multiples of the block.

Invariants:
- The Triton kernel reads the raw bytes and decodes e4m3fn arithmetically (sign, 4-bit exponent
  with bias 7, 3-bit mantissa, subnormals, 0x7F/0xFF = NaN, no infinities). The Triton
  interpreter decodes 0x7F as 480 instead of NaN, and a single decoding path is the one the
  CPU tests prove. The product is taken in fp32 and rounded once to the output dtype.
- The reference dequantises a band of rows at a time, so its fp32 temporaries stay bounded.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernels import launch
from kernels.chunks import chunks, rows_per_chunk
from kernels.validate import (
    FLOAT_DTYPES,
    check_contiguous,
    check_int,
    check_same_device,
    check_tensor,
)

OP = "fp8_block_dequant"


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


def _validate(w: torch.Tensor, scale_inv: torch.Tensor, block: int, dtype: torch.dtype) -> None:
    check_tensor(OP, "w", w, dims="out, in", dtypes=(torch.float8_e4m3fn,))
    check_tensor(OP, "scale_inv", scale_inv, dims="ceil(out/block), ceil(in/block)", dtypes=(torch.float32,))
    check_int(OP, "block", block, minimum=1)
    expected = (triton.cdiv(w.shape[0], block), triton.cdiv(w.shape[1], block))
    if tuple(scale_inv.shape) != expected:
        raise ValueError(
            f"{OP}: scale_inv must have shape {expected} for w {tuple(w.shape)} and block {block}, "
            f"got {tuple(scale_inv.shape)}"
        )
    if dtype not in FLOAT_DTYPES:
        raise ValueError(f"{OP}: dtype must be float32, float16 or bfloat16, got {dtype}")
    check_contiguous(OP, "w", w)
    check_contiguous(OP, "scale_inv", scale_inv)
    check_same_device(OP, w=w, scale_inv=scale_inv)


def fp8_block_dequant_ref(
    w: torch.Tensor, scale_inv: torch.Tensor, block: int = 128, dtype: torch.dtype = torch.bfloat16
) -> torch.Tensor:
    """Torch reference. Shapes and maths: see `fp8_block_dequant_triton`."""
    _validate(w, scale_inv, block, dtype)
    rows, cols = w.shape
    out = torch.empty(rows, cols, dtype=dtype, device=w.device)
    bands = rows_per_chunk(8 * cols * block) * block  # whole scale blocks of rows per chunk
    for band in chunks(rows, bands):
        scales = scale_inv[band.start // block : triton.cdiv(band.stop, block)]
        scales = scales.repeat_interleave(block, 0)[: band.stop - band.start]
        out[band] = w[band].float() * scales.repeat_interleave(block, 1)[:, :cols]
    return out


def fp8_block_dequant_triton(
    w: torch.Tensor, scale_inv: torch.Tensor, block: int = 128, dtype: torch.dtype = torch.bfloat16
) -> torch.Tensor:
    """Dequantise a block-scaled e4m3fn weight.

    w:         [out, in] float8_e4m3fn, contiguous
    scale_inv: [ceil(out/block), ceil(in/block)] fp32, contiguous
    block:     quantisation block edge (GLM-5: 128)
    dtype:     output dtype (fp32/fp16/bf16)
    returns:   [out, in] dtype; W[i,j] = fp8(W)[i,j] · scale_inv[i // block, j // block]
    """
    _validate(w, scale_inv, block, dtype)
    launch.check_launch_device(OP, _fp8_block_dequant_kernel, w.device)
    rows, cols = w.shape
    out = torch.empty(rows, cols, dtype=dtype, device=w.device)
    if out.numel() == 0:
        return out
    block_r, block_c = 32, 128
    grid = (triton.cdiv(rows, block_r), triton.cdiv(cols, block_c))
    _fp8_block_dequant_kernel[grid](
        w.view(torch.uint8), scale_inv, out, rows, cols, w.stride(0), scale_inv.stride(0), out.stride(0),
        QBLOCK=block, BLOCK_R=block_r, BLOCK_C=block_c,
    )  # fmt: skip
    return out

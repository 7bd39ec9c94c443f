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

from kernels import launch
from kernels.chunks import chunks, rows_per_chunk
from kernels.validate import (
    FLOAT_DTYPES,
    check_contiguous,
    check_int,
    check_same_device,
    check_tensor,
)

jit = launch.LazyModule("kernels.jit.fp8")  # the @triton.jit kernels: triton loads only when a Triton twin runs

OP = "fp8_block_dequant"


def _validate(w: torch.Tensor, scale_inv: torch.Tensor, block: int, dtype: torch.dtype) -> None:
    check_tensor(OP, "w", w, dims="out, in", dtypes=(torch.float8_e4m3fn,))
    check_tensor(OP, "scale_inv", scale_inv, dims="ceil(out/block), ceil(in/block)", dtypes=(torch.float32,))
    check_int(OP, "block", block, minimum=1)
    expected = (launch.cdiv(w.shape[0], block), launch.cdiv(w.shape[1], block))
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
        scales = scale_inv[band.start // block : launch.cdiv(band.stop, block)]
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
    launch.check_launch_device(OP, jit._fp8_block_dequant_kernel, w.device)
    rows, cols = w.shape
    out = torch.empty(rows, cols, dtype=dtype, device=w.device)
    if out.numel() == 0:
        return out
    block_r, block_c = 32, 128
    grid = (launch.cdiv(rows, block_r), launch.cdiv(cols, block_c))
    jit._fp8_block_dequant_kernel[grid](
        w.view(torch.uint8), scale_inv, out, rows, cols, w.stride(0), scale_inv.stride(0), out.stride(0),
        QBLOCK=block, BLOCK_R=block_r, BLOCK_C=block_c,
    )  # fmt: skip
    return out

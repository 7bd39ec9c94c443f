"""RMSNorm with an optional fused residual add, with Hugging Face's numerics.

Maths, per row:
    s = x + residual (in x's dtype) if a residual is given, else s = x
    y = (s_f32 · rsqrt(mean(s_f32²) + eps)).to(x.dtype) · weight        residual_out = s

Invariants:
- The normalisation is computed in fp32 and cast to x's dtype *before* the weight multiply
  (HF `RMSNorm`); the product is rounded once to x's dtype. With weight in x's dtype this is
  exactly HF's `weight * normed.to(dtype)`.
- Without a residual, `residual_out` is `x` itself (no copy).
- Rows may be strided views (e.g. the latent half of a [S, 576] projection); the last dim must
  be contiguous. Outputs are new contiguous tensors.
"""

from __future__ import annotations

import torch

from kernels import launch
from kernels.chunks import chunks, rows_per_chunk
from kernels.validate import (
    FLOAT_DTYPES,
    check_dim,
    check_inner_contiguous,
    check_positive,
    check_same_device,
    check_tensor,
)

jit = launch.LazyModule("kernels.jit.norm")  # the @triton.jit kernels: triton loads only when a Triton twin runs

OP = "rms_norm"


def _validate(x: torch.Tensor, weight: torch.Tensor, eps: float, residual: torch.Tensor | None) -> None:
    check_tensor(OP, "x", x, dims="N, D", dtypes=FLOAT_DTYPES)
    check_tensor(OP, "weight", weight, dims="D", dtypes=FLOAT_DTYPES)
    check_dim(OP, "weight", weight, 0, x.shape[1], "x's row width D")
    check_positive(OP, "eps", eps)
    check_inner_contiguous(OP, "x", x)
    check_inner_contiguous(OP, "weight", weight)
    if residual is None:
        check_same_device(OP, x=x, weight=weight)
        return
    check_tensor(OP, "residual", residual, dims="N, D", dtypes=(x.dtype,))
    if residual.shape != x.shape:
        raise ValueError(f"{OP}: residual shape {tuple(residual.shape)} must equal x shape {tuple(x.shape)}")
    check_inner_contiguous(OP, "residual", residual)
    check_same_device(OP, x=x, weight=weight, residual=residual)


def rms_norm_ref(
    x: torch.Tensor, weight: torch.Tensor, eps: float, residual: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Torch reference. Shapes and maths: see `rms_norm_triton`."""
    _validate(x, weight, eps, residual)
    s = x if residual is None else x + residual
    if s.numel() <= _SMALL:  # decode-sized: one fused op, no chunk bookkeeping
        normed = torch.nn.functional.rms_norm(s.float(), (s.shape[1],), eps=eps)
        return (normed.to(x.dtype).float() * weight.float()).to(x.dtype), s
    y = torch.empty_like(x, memory_format=torch.contiguous_format)
    w = weight.float()
    for rows in chunks(x.shape[0], rows_per_chunk(20 * x.shape[1])):
        s32 = s[rows].float()
        normed = s32 * torch.rsqrt(s32.pow(2).mean(dim=1, keepdim=True) + eps)
        y[rows] = normed.to(x.dtype).float() * w
    return y, s


_SMALL = 1 << 16


def rms_norm_triton(
    x: torch.Tensor, weight: torch.Tensor, eps: float, residual: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """RMSNorm of each row, after adding `residual` when given.

    x:        [N, D] fp32/fp16/bf16, last dim contiguous
    weight:   [D] any float dtype
    residual: [N, D] x's dtype, or None
    returns:  (y [N, D] x's dtype, residual_out [N, D]: x + residual, or x itself)
    y = (s_f32 · rsqrt(mean(s_f32²) + eps)).to(x.dtype) · weight, s = x (+ residual)
    """
    _validate(x, weight, eps, residual)
    launch.check_launch_device(OP, jit._rms_norm_kernel, x.device)
    y = torch.empty_like(x, memory_format=torch.contiguous_format)
    res_out = x if residual is None else torch.empty_like(y)
    if y.numel() == 0:
        return y, res_out
    res_in = x if residual is None else residual
    block_d = launch.next_power_of_2(x.shape[1])
    jit._rms_norm_kernel[(x.shape[0],)](
        x, res_in, weight, y, res_out,
        x.shape[1], eps, x.stride(0), res_in.stride(0), y.stride(0), res_out.stride(0),
        HAS_RESIDUAL=residual is not None, BLOCK_D=block_d,
        num_warps=min(16, max(1, block_d // 256)),
    )  # fmt: skip
    return y, res_out

"""Rotary position embedding in the interleaved-pair (GPT-J) layout, as GLM-5 uses everywhere.

Maths, for each token s, head h and pair i < R/2, with (a, b) = (x[s,h,2i], x[s,h,2i+1]):
    out[s,h,2i] = a·cos[s,i] − b·sin[s,i]        out[s,h,2i+1] = b·cos[s,i] + a·sin[s,i]

Invariants:
- The output keeps the interleaved layout of the input (HF de-interleaves; dot products between
  q and k rotated the same way are identical, and the KV cache stores this layout).
- Each output is computed in fp32 from fp32 cos/sin and rounded once to x's dtype.
- x may be a strided view (e.g. the rope tail of a [S, H, 256] query); its last dim must be
  contiguous. The output is a new contiguous tensor.
"""

from __future__ import annotations

import torch

from kernels import launch
from kernels.chunks import chunks, rows_per_chunk
from kernels.validate import (
    FLOAT_DTYPES,
    check_dim,
    check_inner_contiguous,
    check_same_device,
    check_tensor,
)

jit = launch.LazyModule("kernels.jit.rope")  # the @triton.jit kernels: triton loads only when a Triton twin runs

OP = "rope_interleaved"


def _validate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> None:
    check_tensor(OP, "x", x, dims="S, H, R", dtypes=FLOAT_DTYPES)
    check_tensor(OP, "cos", cos, dims="S, R/2", dtypes=(torch.float32,))
    check_tensor(OP, "sin", sin, dims="S, R/2", dtypes=(torch.float32,))
    if x.shape[2] % 2:
        raise ValueError(f"{OP}: the rotary dim R must be even, got x shape {tuple(x.shape)}")
    for name, t in (("cos", cos), ("sin", sin)):
        check_dim(OP, name, t, 0, x.shape[0], "x's number of tokens S")
        check_dim(OP, name, t, 1, x.shape[2] // 2, "half of x's rotary dim R")
        check_inner_contiguous(OP, name, t)
    check_inner_contiguous(OP, "x", x)
    check_same_device(OP, x=x, cos=cos, sin=sin)


def rope_interleaved_ref(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Torch reference. Shapes and maths: see `rope_interleaved_triton`.

    Each pair is one complex number: (a + ib)(cos + i sin) = (a·cos − b·sin) + i(b·cos + a·sin).
    """
    _validate(x, cos, sin)
    num_tokens, heads, rot = x.shape
    out = torch.empty(num_tokens, heads, rot, dtype=x.dtype, device=x.device)
    for rows in chunks(num_tokens, rows_per_chunk(16 * heads * rot)):
        pairs = torch.view_as_complex(x[rows].float().unflatten(2, (rot // 2, 2)).contiguous())
        turn = torch.complex(cos[rows], sin[rows])[:, None, :]
        out[rows] = torch.view_as_real(pairs * turn).flatten(2)
    return out


def rope_interleaved_triton(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate each interleaved pair (x[2i], x[2i+1]) of every head by its token's angle.

    x:       [S, H, R] fp32/fp16/bf16, last dim contiguous, R even
    cos/sin: [S, R/2] fp32 (cos/sin of position · inv_freq[i])
    returns: [S, H, R] x's dtype, interleaved like x
    (a, b) -> (a·cos − b·sin, b·cos + a·sin), in fp32, rounded once
    """
    _validate(x, cos, sin)
    launch.check_launch_device(OP, jit._rope_kernel, x.device)
    num_tokens, heads, rot = x.shape
    out = torch.empty(num_tokens, heads, rot, dtype=x.dtype, device=x.device)
    if out.numel() == 0:
        return out
    block_h = min(16, launch.next_power_of_2(heads))
    jit._rope_kernel[(num_tokens, launch.cdiv(heads, block_h))](
        x, cos, sin, out,
        heads, rot // 2, x.stride(0), x.stride(1), cos.stride(0), sin.stride(0),
        out.stride(0), out.stride(1),
        BLOCK_H=block_h, BLOCK_HALF=launch.next_power_of_2(rot // 2),
    )  # fmt: skip
    return out

"""Rotary position embedding, GLM-5 style: interleaved pairs (x[2i], x[2i+1]), theta from config.

Invariant: the rotated output keeps the interleaved layout, so q, k and the KV cache agree; every
dot product equals that of HF's de-interleaved layout (both sides are permuted identically).
"""

from __future__ import annotations

import torch

import kernels
from model_runtime import lean


def rope_tables(positions: torch.Tensor, dim: int, theta: float) -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin of shape [*positions.shape, dim/2] in fp32."""
    inv_freq = 1.0 / theta ** (torch.arange(0, dim, 2, device=positions.device, dtype=torch.float32) / dim)
    angles = positions.to(torch.float32)[..., None] * inv_freq
    return angles.cos(), angles.sin()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Interleaved rotation of the last dim; cos/sin broadcast against x[..., ::2].

    Without autograd and for per-row tables ([S, R] or [S, H, R] x with [S, R/2] or [S, 1, R/2]
    tables) this is the `kernels.rope_interleaved` op on Triton, else its lean torch form
    (`lean.rope`); the torch form below is the autograd path used in training.
    """
    if not torch.is_grad_enabled() and cos.dtype == torch.float32 and x.shape[0] == cos.shape[0]:
        rotate = kernels.rope_interleaved if kernels.runs_triton(x) else lean.rope
        if x.dim() == 2 and cos.dim() == 2:
            return rotate(x[:, None], cos, sin)[:, 0]
        if x.dim() == 3 and cos.dim() == 3 and cos.shape[1] == 1:
            return rotate(x, cos[:, 0], sin[:, 0])
    cos, sin = cos.to(x.dtype), sin.to(x.dtype)
    a, b = x[..., 0::2], x[..., 1::2]
    return torch.stack((a * cos - b * sin, b * cos + a * sin), dim=-1).flatten(-2)

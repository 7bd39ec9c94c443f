"""Rotary position embedding, GLM-5 style: interleaved pairs (x[2i], x[2i+1]), theta from config.

Invariant: the rotated output keeps the interleaved layout, so q, k and the KV cache agree; every
dot product equals that of HF's de-interleaved layout (both sides are permuted identically).
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import torch

import kernels
from model_runtime import lean


class Rope(NamedTuple):
    """The rotation of one batch's tokens: cos/sin tables [..., R/2] (fp32) per token and, for an
    inference step on the lean CPU path, the same rotation as one complex table [N, R/2],
    computed once per step and shared by every layer (None elsewhere)."""

    cos: torch.Tensor
    sin: torch.Tensor
    rotation: torch.Tensor | None = None

    def rows(self, index) -> Rope:
        """The tables of the tokens `index` picks along the token dimension after the batch's."""
        return Rope(self.cos[:, index], self.sin[:, index])


def rope_tables(positions: torch.Tensor, dim: int, theta: float, lean_step: bool = False) -> Rope:
    """The tables of shape [*positions.shape, dim/2] in fp32; with `lean_step`, their complex
    form too (`Rope.rotation`)."""
    angles = positions.to(torch.float32)[..., None] * _inverse_frequencies(dim, theta, positions.device)
    cos, sin = angles.cos(), angles.sin()
    return Rope(cos, sin, torch.complex(cos, sin) if lean_step else None)


@functools.lru_cache(maxsize=8)
def _inverse_frequencies(dim: int, theta: float, device: torch.device) -> torch.Tensor:
    """theta^(-2i/dim) for i < dim/2, fp32: the same few per model, made once (read-only)."""
    return 1.0 / theta ** (torch.arange(0, dim, 2, device=device, dtype=torch.float32) / dim)


def apply_rope(x: torch.Tensor, rope: Rope) -> torch.Tensor:
    """Interleaved rotation of the last dim of x: its tokens' rows [..., R], or heads [..., H, R]
    (x has one dimension more than the tables, which broadcast over the heads).

    Without autograd this is, for per-row tables ([S, R] or [S, H, R] x with [S, R/2] tables),
    the `kernels.rope_interleaved` op on Triton, else its lean torch form (`lean.rope`, or
    `lean.rotate` with the step's complex table); the torch form below is the autograd path
    used in training.
    """
    cos, sin = rope.cos, rope.sin
    heads = x.dim() > cos.dim()
    if not torch.is_grad_enabled() and cos.dtype == torch.float32 and x.shape[0] == cos.shape[0] and cos.dim() == 2:
        if rope.rotation is not None and not torch.compiler.is_dynamo_compiling():
            return lean.rotate(x, rope.rotation)
        rotate = kernels.rope_interleaved if kernels.runs_triton(x) else lean.rope
        if x.dim() == 2:
            return rotate(x[:, None], cos, sin)[:, 0]
        if x.dim() == 3:
            return rotate(x, cos, sin)
    if heads:
        cos, sin = cos.unsqueeze(-2), sin.unsqueeze(-2)
    cos, sin = cos.to(x.dtype), sin.to(x.dtype)
    a, b = x[..., 0::2], x[..., 1::2]
    return torch.stack((a * cos - b * sin, b * cos + a * sin), dim=-1).flatten(-2)

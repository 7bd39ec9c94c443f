"""Deterministic top-k key selection for DSA, as a mask.

Invariant: among keys tied at the k-th score the lowest positions win, whatever the row width,
so a query selects the same keys in a full prefill, a chunked prefill and a one-token decode
step (ReLU makes exact-zero indexer scores common; `torch.topk` alone breaks such ties
differently for different widths). `kernels.indexer_topk` follows the same rule.
"""

from __future__ import annotations

import torch


def topk_mask(scores: torch.Tensor, k: int) -> torch.Tensor:
    """Bool mask of the k largest finite entries along the last dim (k clipped to the width)."""
    k = min(k, scores.shape[-1])
    kth = scores.topk(k, dim=-1).values[..., -1:]
    finite = scores > float("-inf")
    above = (scores > kth) & finite
    ties = (scores == kth) & finite
    room = k - above.sum(-1, keepdim=True)
    return above | (ties & (ties.cumsum(-1) <= room))

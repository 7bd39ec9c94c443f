"""Deterministic top-k for DSA key selection.

Invariant: ties are broken toward the lower index whatever the row length, so a query selects
the same keys in a full prefill, a chunked prefill and a one-token decode step (ReLU makes
exact-zero indexer scores common; `torch.topk` breaks such ties differently for different widths).
"""

from __future__ import annotations

import torch


def stable_topk(scores: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(values, indices) of the k largest entries along the last dim, k clipped to its size."""
    values, indices = scores.sort(dim=-1, descending=True, stable=True)
    k = min(k, scores.shape[-1])
    return values[..., :k], indices[..., :k]

"""Token selection: greedy, temperature, top-k and top-p, deterministic under a seed.

Invariant: temperature 0 is exact argmax (ties go to the lowest id, like torch.argmax);
sampled rows draw from their own seeded `torch.Generator` when the request gave a seed.
"""

from __future__ import annotations

import torch

from model_runtime.api import SamplingParams


def sample(logits: torch.Tensor, params: list[SamplingParams], generators: list[torch.Generator | None]) -> list[int]:
    """logits [B, V] fp32 -> one token id per row."""
    out = logits.argmax(-1).tolist()
    for row, (p, gen) in enumerate(zip(params, generators)):
        if p.temperature > 0:
            out[row] = _sample_row(logits[row].float(), p, gen)
    return out


def _sample_row(logits: torch.Tensor, p: SamplingParams, gen: torch.Generator | None) -> int:
    logits = logits / p.temperature
    if 0 < p.top_k < logits.numel():
        kth = logits.topk(p.top_k).values[-1]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    probs = logits.softmax(-1)
    if p.top_p < 1.0:
        sorted_probs, order = probs.sort(descending=True)
        keep = sorted_probs.cumsum(-1) - sorted_probs < p.top_p  # always keeps the top token
        sorted_probs = sorted_probs * keep
        probs = torch.zeros_like(probs).scatter(-1, order, sorted_probs)
    return int(torch.multinomial(probs, 1, generator=gen).item())

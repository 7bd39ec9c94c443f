"""Auxiliary-loss-free MoE load balancing (DeepSeek-V3): nudge each expert's routing bias.

Role: after every optimizer step, for each MoE layer, raise `e_score_correction_bias` of the
experts that received fewer tokens than the layer's mean and lower it for those that received
more, by a fixed `rate` (the paper's bias update speed). The bias only affects which experts are
selected, never the weights of their outputs, so balancing adds no gradient.

Invariants:
- Loads are summed over all micro-batches of a step (read from each MoE's `last_load` right
  after each forward), then applied once per optimizer step.
- The update is `rate * sign(mean_load - load)`; an expert exactly at the mean is left alone.
"""

from __future__ import annotations

import torch
from torch import nn

from model_runtime.model import MoE


class BiasBalancer:
    def __init__(self, model: nn.Module, rate: float = 1e-3) -> None:
        self.rate = rate
        self.moes = [m for m in model.modules() if isinstance(m, MoE)]
        self._load = [torch.zeros(m.gate.e_score_correction_bias.numel(), dtype=torch.float64) for m in self.moes]

    def observe(self) -> None:
        """Add the loads of the forward pass that just ran."""
        for acc, moe in zip(self._load, self.moes):
            if moe.last_load is not None:
                acc += moe.last_load.detach().to("cpu", torch.float64)
                moe.last_load = None

    @torch.no_grad()
    def step(self) -> dict[str, float]:
        """Apply one bias update from the loads observed since the last step; returns the mean
        max/mean load ratio across layers (1.0 is perfectly balanced)."""
        ratios = []
        for acc, moe in zip(self._load, self.moes):
            if acc.sum() == 0:
                continue
            mean = acc.mean()
            bias = moe.gate.e_score_correction_bias
            bias += (self.rate * torch.sign(mean - acc)).to(bias.device, bias.dtype)
            ratios.append(float(acc.max() / mean))
            acc.zero_()
        return {"max_load_ratio": sum(ratios) / len(ratios)} if ratios else {}

"""Auxiliary-loss-free MoE load balancing (DeepSeek-V3): nudge each expert's routing bias.

Role: after every optimizer step, for each MoE layer, raise `e_score_correction_bias` of the
experts that received fewer tokens than the layer's mean and lower it for those that received
more, by a fixed `rate` (the paper's bias update speed). The bias only affects which experts are
selected, never the weights of their outputs, so balancing adds no gradient.

Invariants:
- Loads are summed over all micro-batches of a step (read from each MoE's `last_load` right
  after each forward), then applied once per optimizer step.
- The update is `rate * sign(mean_load - load)`; an expert exactly at the mean is left alone
  (so a layer that saw no tokens is left alone too).
- Loads stay on the model's device and the update runs there: no step waits for the GPU. The
  statistics (max/mean load ratio, share of routed pairs dropped over an expert's capacity) are
  summed there too and read only when `step(read=True)` asks for them.
"""

from __future__ import annotations

import torch
from torch import nn

from model_runtime.model import MoE


class BiasBalancer:
    def __init__(self, model: nn.Module, rate: float = 1e-3) -> None:
        self.rate = rate
        self.moes = [m for m in model.modules() if isinstance(m, MoE)]
        self._load: list[torch.Tensor | None] = [None] * len(self.moes)
        self._dropped: torch.Tensor | None = None
        self._ratio_sum: torch.Tensor | None = None
        self._ratio_steps = 0
        self._pairs: torch.Tensor | None = None

    def observe(self) -> None:
        """Add the loads (and the dropped pairs) of the forward pass that just ran."""
        for i, moe in enumerate(self.moes):
            if moe.last_load is None:
                continue
            load = moe.last_load.detach().to(torch.float64)
            self._load[i] = load if self._load[i] is None else self._load[i] + load
            self._pairs = load.sum() if self._pairs is None else self._pairs + load.sum()
            if moe.last_dropped is not None:
                dropped = moe.last_dropped.detach().to(torch.float64)
                self._dropped = dropped if self._dropped is None else self._dropped + dropped
            moe.last_load = moe.last_dropped = None

    @torch.no_grad()
    def step(self, read: bool = True) -> dict[str, float]:
        """Apply one bias update from the loads observed since the last step. With `read`,
        returns the mean max/mean load ratio across layers and steps since the last read (1.0
        is perfectly balanced) and, where experts have a capacity, the share of routed
        (token, slot) pairs dropped; {} when nothing was observed since the last read."""
        ratios = []
        for i, (load, moe) in enumerate(zip(self._load, self.moes)):
            if load is None:
                continue
            mean = load.mean()
            bias = moe.gate.e_score_correction_bias
            bias += (self.rate * torch.sign(mean - load)).to(bias.device, bias.dtype)
            ratios.append(load.max() / mean)
            self._load[i] = None
        if ratios:
            ratio = torch.stack(ratios).mean()
            self._ratio_sum = ratio if self._ratio_sum is None else self._ratio_sum + ratio
            self._ratio_steps += 1
        return self.read() if read else {}

    def read(self) -> dict[str, float]:
        """The statistics since the last read (one host sync), then start them again."""
        if not self._ratio_steps:
            return {}
        stats = {"max_load_ratio": float(self._ratio_sum) / self._ratio_steps}
        if self._dropped is not None:
            stats["moe_dropped"] = float(self._dropped / self._pairs.clamp_min(1))
        self._ratio_sum, self._ratio_steps, self._dropped, self._pairs = None, 0, None, None
        return stats

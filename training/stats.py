"""Training statistics kept on the training device and read every few steps.

Role: `training.train` adds each step's loss terms and gradient norm here as device tensors;
converting each to a Python float every step (as first written) made the host wait for the GPU
to finish the step before it could queue the next, so the GPU idled between steps. `read()`
returns each statistic's mean over the steps since the last read that produced it, with one
host sync for all of them.

Invariant: within a step, values of one key add up (micro-batches of a step are summed, as
their losses are pre-divided by the accumulation count); across steps they are averaged.
"""

from __future__ import annotations

import torch


class StepStats:
    def __init__(self) -> None:
        self._step: dict[str, torch.Tensor] = {}
        self._total: dict[str, torch.Tensor] = {}
        self._count: dict[str, int] = {}

    def add(self, key: str, value: torch.Tensor) -> None:
        """Add `value` (a 0-d tensor) to this step's `key`."""
        self._step[key] = value if key not in self._step else self._step[key] + value

    def end_step(self) -> None:
        for key, value in self._step.items():
            self._total[key] = value.float() if key not in self._total else self._total[key] + value.float()
            self._count[key] = self._count.get(key, 0) + 1
        self._step = {}

    def read(self) -> dict[str, float]:
        """Each key's mean per step since the last read; then start again."""
        if not self._total:
            return {}
        keys = list(self._total)
        values = torch.stack([self._total[k].detach().to(torch.float64) for k in keys]).tolist()
        stats = {k: v / self._count[k] for k, v in zip(keys, values)}
        self._total, self._count = {}, {}
        return stats

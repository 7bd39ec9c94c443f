"""Training schedules: learning rate (linear warm-up, cosine decay) and the DSA two-phase plan.

DSA is trained as in the DeepSeek-V3.2 paper, adapted to a model trained from scratch:
1. dense warm-up: attention is dense and the lightning indexer learns to match the
   attention distribution (KL(attention || indexer), the indexer's inputs detached so the KL
   only moves the indexer). The paper freezes the rest of a pretrained model here; from scratch
   the language-model loss trains the rest at the same time.
2. sparse training: each query attends only to its top-k keys chosen by the indexer, which
   keeps learning from the KL restricted to the selected keys.

Invariants: pure functions of the step and the run's progress, no torch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class LrSchedule:
    """Linear warm-up over the first steps, times a cosine from the peak down to
    `min_ratio * peak` over the run's progress (a fraction of its step or time budget)."""

    peak: float
    warmup_steps: int
    min_ratio: float = 0.1

    def __post_init__(self) -> None:
        if self.peak <= 0 or self.warmup_steps < 0 or not 0 <= self.min_ratio <= 1:
            raise ValueError(f"bad lr schedule: {self}")

    def at(self, step: int, progress: float) -> float:
        """Learning rate of optimizer step `step` (0-based) at `progress` in [0, 1]."""
        warm = min(1.0, (step + 1) / self.warmup_steps) if self.warmup_steps else 1.0
        cosine = 0.5 * (1 + math.cos(math.pi * min(1.0, max(0.0, progress))))
        return self.peak * warm * (self.min_ratio + (1 - self.min_ratio) * cosine)


@dataclass(frozen=True, slots=True)
class Phase:
    name: str  # "dense-warmup" or "sparse"
    sparse: bool
    train_indexer: bool


DENSE_WARMUP = Phase("dense-warmup", sparse=False, train_indexer=True)
SPARSE = Phase("sparse", sparse=True, train_indexer=True)


def dsa_phase(progress: float, dense_fraction: float) -> Phase:
    """The DSA phase at `progress`: dense warm-up for the first `dense_fraction`, then sparse."""
    return DENSE_WARMUP if progress < dense_fraction else SPARSE

"""When to stop decoding a request early: its latency budget is spent, or the model lost confidence.

Role: the engine asks after every step. A request's `SamplingParams.max_decode_ms` (like
llama.vim's `t_max_predict_ms`) bounds the time from its first token to its last; prefill is not
counted (without it there is nothing to show). A step is not started when it would end past
the budget, as long as the last decode step took. `min_confidence` cuts a multi-line completion
where the model stops being sure: once the output holds a complete line, a token the model
gives less probability than that ends the request instead of being appended.

Invariants:
- The budget is checked after each step against the engine's clock, predicting the next step
  from the last decode step: a request ends within its budget once it has decoded one step, and
  at most one step past it when a step takes longer than the one before.
- The first line is never cut for confidence; greedy output up to the cut is unchanged.
"""

from __future__ import annotations

import torch

from model_runtime.api import SamplingParams


def budget_spent(sampling: SamplingParams, first_token_at: float | None, now: float, next_step_s: float = 0.0) -> bool:
    """Whether the decode budget (from the first token) is used up at `now` (seconds), or would
    be overrun by a next step that takes `next_step_s` (the last decode step's time)."""
    if not sampling.max_decode_ms or first_token_at is None:
        return False
    return (now - first_token_at + next_step_s) * 1000.0 > sampling.max_decode_ms


def confidence_collapsed(sampling: SamplingParams, text: str, logits: torch.Tensor, token: int) -> bool:
    """Whether `token` (picked from `logits` [V]) is too unlikely to continue past a complete line."""
    if not sampling.min_confidence or "\n" not in text.lstrip("\n"):
        return False
    return float(torch.softmax(logits.float(), -1)[token]) < sampling.min_confidence

"""One request's life in the engine: its tokens, cache blocks, sampling state and text.

Invariants:
- `token_ids` = prompt + generated tokens; `num_computed` of them have their KV in the cache.
  A running sequence always has `len(token_ids) - num_computed >= 1` tokens still to feed.
- `block_table` covers at least `num_computed` tokens; `block_hashes` lists the hashes of its
  full blocks whose KV is final (they may be shared with other sequences).
- Status only moves forward: WAITING -> RUNNING -> FINISHED | ABORTED (preemption sends a
  RUNNING sequence back to WAITING with its blocks released and `num_computed = 0`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from enum import Enum

import torch

from model_runtime.api import DoneCallback, EventCallback, FinishReason, GenerationRequest, SamplingParams


class SequenceStatus(Enum):
    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"
    ABORTED = "aborted"


@dataclass(eq=False)
class Sequence:
    request: GenerationRequest
    on_event: EventCallback | None
    on_done: DoneCallback | None
    stop_ids: frozenset[int]
    token_ids: list[int] = field(default_factory=list)
    status: SequenceStatus = SequenceStatus.WAITING
    block_table: list[int] = field(default_factory=list)
    block_hashes: list[bytes] = field(default_factory=list)
    num_computed: int = 0
    cached_tokens: int = 0
    prefilled_tokens: int = 0
    decode_steps: int = 0
    draft: int | None = None  # MTP proposal for the token after the pending one
    generator: torch.Generator | None = None
    text: str = ""
    emitted: int = 0  # output tokens already reported in a StreamEvent
    finish_reason: FinishReason | None = None
    error: str | None = None
    arrival: float = field(default_factory=time.perf_counter)
    first_token_at: float | None = None
    last_step_at: float = 0.0

    def __post_init__(self) -> None:
        self.token_ids = list(self.request.prompt_ids)
        self.prompt_len = len(self.token_ids)
        seed = self.request.sampling.seed
        if seed is not None and self.request.sampling.temperature > 0:
            self.generator = torch.Generator().manual_seed(seed)

    @property
    def request_id(self) -> str:
        return self.request.request_id

    @property
    def sampling(self) -> SamplingParams:
        return self.request.sampling

    @property
    def output_ids(self) -> list[int]:
        return self.token_ids[self.prompt_len :]

    @property
    def num_pending(self) -> int:
        """Tokens not yet fed through the model."""
        return len(self.token_ids) - self.num_computed

    @property
    def in_prefill(self) -> bool:
        return self.num_pending > 1

    @property
    def is_finished(self) -> bool:
        return self.status in (SequenceStatus.FINISHED, SequenceStatus.ABORTED)

"""Decides what each engine step runs: a prefill chunk, or a decode batch from one length bucket.

Role: admission (blocks with prefix reuse), chunked prefill under a token budget, decode
batching per length bucket (short and long contexts want different batch sizes:
`EngineConfig.batch_buckets`), preemption when the cache is full, and abort. With sparse
residency (`EngineConfig.resident_latent_tokens`), blocks are allocated chunk by chunk and each
sequence's oldest full blocks are spilled to the host before every step.

Invariants:
- Prefill has priority: a step is either all-prefill or all-decode (nano-vllm's shape).
- A decode batch only holds sequences from one length bucket; buckets take turns by the
  oldest `last_step_at` so no bucket starves.
- An aborted or finished sequence has released its blocks before `schedule` returns.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from model_runtime.cache import BlockManager, CacheFullError
from model_runtime.config import EngineConfig
from model_runtime.sequence import Sequence, SequenceStatus


@dataclass
class Step:
    """One scheduled engine step: per sequence, how many of its pending tokens to feed."""

    seqs: list[Sequence]
    num_tokens: list[int]
    is_prefill: bool


class Scheduler:
    def __init__(self, config: EngineConfig, blocks: BlockManager) -> None:
        self.config = config
        self.blocks = blocks
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []

    def add(self, seq: Sequence) -> None:
        self.waiting.append(seq)

    @property
    def has_work(self) -> bool:
        return bool(self.waiting or self.running)

    def find(self, request_id: str) -> Sequence | None:
        for seq in (*self.waiting, *self.running):
            if seq.request_id == request_id:
                return seq
        return None

    def remove(self, seq: Sequence) -> None:
        """Take a sequence out of the queues and free its blocks (finish or abort)."""
        if seq in self.running:
            self.running.remove(seq)
        elif seq in self.waiting:
            self.waiting.remove(seq)
        self.blocks.release(seq.block_table)
        seq.block_hashes.clear()

    def schedule(self) -> Step | None:
        if self.config.resident_latent_tokens:
            keep = self.config.resident_latent_tokens // self.config.block_size
            for seq in self.running:
                self.blocks.spill(seq.block_table, len(seq.block_hashes), keep)
        self._admit()
        prefill = [s for s in self.running if s.in_prefill]
        if prefill:
            return self._prefill_step(prefill)
        return self._decode_step()

    # ---- admission and prefill -------------------------------------------------------------
    def _admit(self) -> None:
        order = sorted(self.waiting, key=lambda s: (-s.request.priority, s.arrival))
        reserve = self.config.max_prefill_tokens if self.config.resident_latent_tokens else None
        for seq in order:
            if not self.blocks.can_allocate(min(len(seq.token_ids), reserve or len(seq.token_ids)) + 1):
                break
            alloc = self.blocks.allocate(seq.token_ids, reuse=self.config.prefix_caching, reserve=reserve)
            seq.block_table, seq.block_hashes = alloc.block_table, alloc.hashes
            seq.num_computed = alloc.cached_tokens
            if seq.prefilled_tokens == 0:
                seq.cached_tokens = alloc.cached_tokens
            seq.status = SequenceStatus.RUNNING
            self.waiting.remove(seq)
            self.running.append(seq)

    def _prefill_step(self, prefill: list[Sequence]) -> Step:
        budget = self.config.max_prefill_tokens
        seqs, counts = [], []
        for seq in sorted(prefill, key=lambda s: (-s.request.priority, s.arrival)):
            if budget <= 0:
                break
            if seq.status is not SequenceStatus.RUNNING:  # preempted to make room for another
                continue
            n = min(seq.num_pending, budget)
            if not self._ensure_room(seq, seq.num_computed + n, protected=seqs):
                continue
            seqs.append(seq)
            counts.append(n)
            budget -= n
        return Step(seqs, counts, is_prefill=True)

    # ---- decode --------------------------------------------------------------------------
    def _decode_step(self) -> Step | None:
        if not self.running:
            return None
        oldest = min(self.running, key=lambda s: s.last_step_at)
        bucket = self._bucket(oldest)
        limit = self.config.max_batch_for(len(oldest.token_ids))
        members = sorted((s for s in self.running if self._bucket(s) == bucket), key=lambda s: s.last_step_at)
        seqs: list[Sequence] = []
        for seq in members[:limit]:
            grow = len(seq.token_ids) + (1 if seq.draft is not None else 0)
            if not self._ensure_room(seq, grow):
                continue
            seqs.append(seq)
        if not seqs:
            return None
        return Step(seqs, [1 + (s.draft is not None) for s in seqs], is_prefill=False)

    def _bucket(self, seq: Sequence) -> int:
        n = len(seq.token_ids)
        for i, (bound, _) in enumerate(self.config.batch_buckets):
            if n <= bound:
                return i
        return len(self.config.batch_buckets) - 1

    def _ensure_room(self, seq: Sequence, num_tokens: int, protected: list[Sequence] | None = None) -> bool:
        """Grow `seq` to `num_tokens`, preempting the newest other sequences (not `protected`) if needed."""
        while True:
            try:
                self.blocks.append_slot(seq.block_table, num_tokens)
                return True
            except CacheFullError:
                victims = [s for s in self.running if s is not seq and s not in (protected or ())]
                if not victims:
                    return False
                self._preempt(max(victims, key=lambda s: (-s.request.priority, s.arrival)))

    def _preempt(self, seq: Sequence) -> None:
        self.running.remove(seq)
        self.blocks.release(seq.block_table)
        seq.block_hashes.clear()
        seq.num_computed, seq.draft = 0, None
        seq.status = SequenceStatus.WAITING
        self.waiting.appendleft(seq)

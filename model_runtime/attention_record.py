"""What the model looked at: per request, the DSA selections of its prompt tokens and its expert load.

Role: optional instrumentation of the engine, off unless a request sets
`GenerationRequest.record_attention`. A `RequestRecord` accumulates one request's counts across
steps; a `StepRecorder` is built by the engine for one step that has at least one recorded
sequence, and the `ModelRunner` hands it to the model, which reports each layer's top-k slots
(`on_layer`); router choices come from observers on the MoE gates (`Gate.observe`), attached only for that step.

What is counted:
- selections: for every prompt token, how many times a *generating* query selected it, summed
  over layers and steps. Generating queries are the rows whose logits the engine computed: the
  last prompt position (it yields the first new token) and one per decode step (two with an MTP
  draft). A layer that runs dense (every query sees at most `index_topk` keys, so DSA is exactly
  dense attention) selects every visible key; a shared DSA layer counts the top-k it reuses.
- expert load: per layer, how many of the request's tokens the router sent to each routed
  expert, over every token the request ran through the model (prompt tokens served from the
  prefix cache were not run and are not counted); () for dense-MLP layers.

Invariants: recording never changes what the model computes (it only reads the top-k slots and
the router's indices); a step without recorded sequences gets no recorder and no observers.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch

from model_runtime.api import AttentionRecord
from model_runtime.config import ModelConfig
from model_runtime.model import MoE, Transformer
from model_runtime.paged import PagedBatch


class RequestRecord:
    """One request's running counts (int64 tensors on the CPU)."""

    def __init__(self, cfg: ModelConfig, prompt_len: int) -> None:
        self.cfg = cfg
        self.selections = torch.zeros(prompt_len, dtype=torch.long)
        experts = cfg.n_routed_experts
        self.expert_load = [torch.zeros(experts if cfg.is_moe_layer(i) else 0, dtype=torch.long) for i in range(cfg.num_hidden_layers)]
        self.queries = 0

    def result(self) -> AttentionRecord:
        return AttentionRecord(
            selections=tuple(self.selections.tolist()),
            queries=self.queries,
            layers=self.cfg.num_hidden_layers,
            index_topk=self.cfg.index_topk,
            expert_load=tuple(tuple(load.tolist()) for load in self.expert_load),
        )


@dataclass
class _Slot:
    """A recorded sequence's place in the step: its batch row and its generating query rows."""

    b: int
    record: RequestRecord
    first_logit_row: int  # index into the sequence's fed tokens


class StepRecorder:
    """Collects one step's selections and router choices for the recorded sequences in it."""

    def __init__(self, slots: list[tuple[int, RequestRecord, int]]) -> None:
        self.slots = [_Slot(*slot) for slot in slots]
        self.batch: PagedBatch | None = None

    @contextmanager
    def recording(self, model: Transformer, batch: PagedBatch) -> Iterator[None]:
        """Observers on every MoE gate of the main layers, for the duration of one forward."""
        self.batch = batch
        for slot in self.slots:
            start, end = batch.query_starts[slot.b], batch.query_starts[slot.b + 1]
            slot.record.queries += max(0, end - start - slot.first_logit_row)
        removers = [layer.mlp.gate.observe(self._router_observer(i)) for i, layer in enumerate(model.layers) if isinstance(layer.mlp, MoE)]
        try:
            yield
        finally:
            for remove in removers:
                remove()
            self.batch = None

    def on_layer(self, layer: int, indices: torch.Tensor | None) -> None:
        """Layer `layer` attended to physical slots `indices` [N, K] (-1 padded), or densely (None)."""
        batch = self.batch
        assert batch is not None, "on_layer outside recording()"
        for slot in self.slots:
            start, end = batch.query_starts[slot.b], batch.query_starts[slot.b + 1]
            rows = slice(slot.first_logit_row, end - start)
            if rows.start >= rows.stop:
                continue
            if indices is None:
                seen = batch.causal_mask(slot.b)[rows]
            else:
                seen = batch.selection_mask(slot.b, indices[start:end][rows])
            counts = seen.sum(0).cpu()
            n = min(len(counts), len(slot.record.selections))
            slot.record.selections[:n] += counts[:n]

    def _router_observer(self, layer: int):
        def observe(_weights: torch.Tensor, experts: torch.Tensor) -> None:
            batch = self.batch
            assert batch is not None
            for slot in self.slots:
                start, end = batch.query_starts[slot.b], batch.query_starts[slot.b + 1]
                load = slot.record.expert_load[layer]
                load += torch.bincount(experts[start:end].flatten().cpu(), minlength=len(load))

        return observe

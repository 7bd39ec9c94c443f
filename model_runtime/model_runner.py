"""Runs one engine step through the model over the paged cache.

Role: turn scheduled sequences into a flat `PagedBatch`, run the main model (and the MTP layer
for speculative drafts), and return hidden states and the logits the engine asked for.

Invariants:
- The runner never changes a sequence: it reads `token_ids`, `num_computed`, `block_table`;
  the engine applies the outcome.
- All tensors of a step are built here, once, and shared by every layer.
- The model's projections that share an input are fused once, when the first runner is built
  (`Transformer.fuse_for_inference`), and a small fp32 model's decode weights are stored
  input-major for the CPU (`Transformer.lay_out_for_decode`): the weights are frozen from then on.
- With `compiled` set (the engine's `compile_decode`), the decode steps it covers run compiled
  once its background compile has finished; every other step, and every step before, eager.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from model_runtime.attention_record import StepRecorder
from model_runtime.cache import KVCache
from model_runtime.config import EngineConfig, ModelConfig
from model_runtime.kvstore.residency import SpilledLatents
from model_runtime.model import Transformer
from model_runtime.paged import AttentionCost, PagedBatch

if TYPE_CHECKING:
    from model_runtime.compiled import CompiledDecode


@dataclass
class Feed:
    """Tokens fed for one sequence in a step, starting at absolute position `start`."""

    start: int
    tokens: list[int]
    block_table: list[int]
    logits_from: int  # first fed token (index into `tokens`) whose logits are needed


@dataclass
class StepOutput:
    hidden: torch.Tensor  # [N, D] final-normed hidden of every fed token
    logits: list[torch.Tensor]  # per feed: [tokens - logits_from, V] fp32
    offsets: list[int]  # per feed: row of its first token in `hidden`


class ModelRunner:
    def __init__(self, model: Transformer, cache: KVCache, engine_config: EngineConfig, device) -> None:
        self.model, self.cache, self.engine_config, self.device = model, cache, engine_config, device
        self.cfg: ModelConfig = model.cfg
        model.ensure_fused()
        cfg = self.cfg
        self._attention_cost = AttentionCost(
            cfg.num_attention_heads, cfg.kv_lora_rank, cfg.qk_nope_head_dim, cfg.qk_rope_head_dim, cfg.v_head_dim,
            model.lm_head.weight.element_size(),
        )
        self.compiled: CompiledDecode | None = None  # set by the engine with `compile_decode`
        self.compiled_counts = {"compiled_steps": 0, "compiled_fallbacks": 0}

    def _batch(self, feeds: list[Feed]) -> PagedBatch:
        batch = PagedBatch.build(
            [(f.start, f.start + len(f.tokens)) for f in feeds],
            [f.block_table for f in feeds],
            self.cache.block_size,
            self.cfg.index_topk,
            (self.cfg.qk_rope_head_dim, self.cfg.rope_theta),
            self.engine_config.attention,
            self.device,
            self._attention_cost,
        )
        batch.latents = SpilledLatents.for_step(self.cache, [f.block_table for f in feeds])
        return batch

    @torch.inference_mode()
    def run(self, feeds: list[Feed], recorder: StepRecorder | None = None) -> StepOutput:
        batch = self._batch(feeds)
        ids = torch.tensor([t for f in feeds for t in f.tokens], dtype=torch.long, device=self.device)
        if recorder is None:
            hidden = self._compiled_forward(ids, batch)
            if hidden is None:
                hidden = self.model.forward_paged(ids, batch, self.cache)
        else:
            with recorder.recording(self.model, batch):
                hidden = self.model.forward_paged(ids, batch, self.cache, recorder.on_layer)
        offsets = batch.query_starts[:-1]
        counts = [len(f.tokens) - f.logits_from for f in feeds]
        if sum(counts) == hidden.shape[0]:  # every fed token's logits (a decode step): no gather
            wanted = hidden
        else:
            rows = [torch.arange(o + f.logits_from, o + len(f.tokens)) for f, o in zip(feeds, offsets)]
            wanted = hidden[torch.cat(rows).to(self.device)] if rows else hidden[:0]
        logits = self.model.lm_head(wanted).float().split(counts)
        return StepOutput(hidden, list(logits), offsets)

    def _compiled_forward(self, ids: torch.Tensor, batch: PagedBatch) -> torch.Tensor | None:
        """The step through the compiled graphs when they are ready and cover it, else None."""
        if self.compiled is None or not self.compiled.ready or not self.compiled.covers(batch) or self.model.observed:
            return None
        hidden = self.compiled.forward(ids, batch, self.cache)
        self.compiled_counts["compiled_steps" if hidden is not None else "compiled_fallbacks"] += 1
        return hidden

    @torch.inference_mode()
    def run_mtp(self, feeds: list[Feed], hidden: list[torch.Tensor]) -> list[torch.Tensor]:
        """MTP over `feeds` (tokens = the *next* token of each position) with main hidden states;
        returns per feed the draft logits of its last position [V]."""
        batch = self._batch(feeds)
        ids = torch.tensor([t for f in feeds for t in f.tokens], dtype=torch.long, device=self.device)
        z = self.model.mtp_paged(torch.cat(hidden), ids, batch, self.cache)
        last = torch.tensor([e - 1 for e in batch.query_starts[1:]], device=self.device)
        return list(self.model.lm_head(z[last]).float())

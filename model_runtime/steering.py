"""Engine hooks for steered requests: constraint monitors, log-probabilities, n-best branches.

Role: the engine calls `Steering` at four points: `prepare` when a request is added, `pick`
instead of the plain sampler, `accepted` after tokens are appended, and `deliver` instead of
calling `on_done`. It fills `GenerationResult.candidates` and `.constraint`.

Invariants:
- A request without a constraint and with `num_candidates == 1` picks exactly as the plain
  sampler does; its candidate's log-probability is read from logits the engine already has.
- Every candidate's `logprob` is the sum over its tokens of log p(token) under the model's own,
  unconstrained distribution.
- n-best (`num_candidates = n > 1`, `model_runtime.nbest`): at the first decode step past the
  heal prefix with two legal tokens or more, the request branches into the n best legal tokens
  (greedy) or n distinct draws (sampled); each branch is a child sequence that references the
  parent's KV blocks so far (`BlockManager.fork`: the prompt's and the heal tokens') and
  decodes on in the same batches:
  greedy branches as a beam search (the result's text is the best beam, streamed once at the
  end), sampled ones independently (the parent streams as usual). The request's `on_done` runs
  once, after the parent and every child ended; an abort ends them all.
- MTP drafts (greedy only) also serve constrained sequences: the monitor verifies a step's two
  rows in order, the draft's row only once it picked the draft, so the tokens are those of
  decoding one token a step. n-best sequences get no drafts.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import TYPE_CHECKING

import torch

from model_runtime.api import Candidate, FinishReason, GenerationRequest, GenerationResult, StreamEvent
from model_runtime.cache import CacheFullError
from model_runtime.constraint.monitor import Monitor, compile_constraint
from model_runtime.constraint.vocab import Vocab
from model_runtime.nbest import Group, Proposal, rank, reshuffle
from model_runtime.sampler import sample
from model_runtime.sequence import Sequence, SequenceStatus
from model_runtime.text import TextState

if TYPE_CHECKING:
    from model_runtime.engine import Engine

log = logging.getLogger(__name__)

CONTEXT_TOKENS = 512  # prompt tokens decoded to find the text before the cursor (no FIM prefix token)


class HealedText(TextState):
    """Output text with the heal prefix stripped (held back while it is still being produced)."""

    def __init__(self, tokenizer, stop_strings: tuple[str, ...], heal_prefix: str) -> None:
        super().__init__(tokenizer, stop_strings)
        self.heal_prefix = heal_prefix

    def update(self, output_ids: list[int]) -> bool:
        stopped = super().update(output_ids)
        self.text, self.streamable = self._strip(self.text), self._strip(self.streamable)
        return stopped

    def _strip(self, text: str) -> str:
        if text.startswith(self.heal_prefix):
            return text[len(self.heal_prefix) :]
        return "" if self.heal_prefix.startswith(text) else text


class Steering:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.monitors: dict[str, Monitor] = {}
        self.logprobs: dict[str, float] = {}
        self.groups: dict[str, Group] = {}
        self.parent_of: dict[str, str] = {}
        self.branches: dict[str, list[int]] = {}
        self.proposed: dict[str, list[int]] = {}
        self.verified: dict[str, Monitor] = {}  # a draft step's monitor after the draft, before its second pick

    # ---- request set-up -----------------------------------------------------------------------
    def text_state(self, request: GenerationRequest) -> TextState:
        spec = request.constraint
        if spec is None:
            return TextState(self.engine.loaded.tokenizer, request.sampling.stop_strings)
        stops = request.sampling.stop_strings + (("\n",) if spec.single_line else ())
        return HealedText(self.engine.loaded.tokenizer, stops, spec.heal_prefix)

    def prepare(self, seq: Sequence) -> str | None:
        """Set up a new request's monitor and group; an error message if its constraint is unusable."""
        request, tokenizer = seq.request, self.engine.loaded.tokenizer
        self.logprobs[seq.request_id] = 0.0
        if request.constraint is not None:
            if tokenizer is None:
                return "a constraint needs the model's tokenizer, and this checkpoint has none"
            try:
                context = self._context(request.prompt_ids)
                self.monitors[seq.request_id] = compile_constraint(request.constraint, Vocab.of(tokenizer), seq.stop_ids, context)
            except ValueError as exc:
                return f"bad constraint: {exc}"
        if request.num_candidates > 1:
            beam = request.sampling.temperature == 0
            self.groups[seq.request_id] = Group(seq, request.num_candidates, beam, seq.on_event if beam else None)
            if beam:  # beams may be re-pointed: only the final text is streamed
                seq.on_event = None
        return None

    def _context(self, prompt_ids: tuple[int, ...]) -> str:
        """The text before the cursor: after the last `<|code_prefix|>` up to the next special
        token (a FIM prompt), else the prompt's last tokens."""
        tokenizer = self.engine.loaded.tokenizer
        marker = tokenizer.special.code_prefix
        ids = list(prompt_ids)
        if marker is not None and marker in ids:
            start = len(ids) - 1 - ids[::-1].index(marker)
            specials = {i for i in (getattr(tokenizer.special, n) for n in tokenizer.special.__dataclass_fields__) if isinstance(i, int)}
            end = next((i for i in range(start + 1, len(ids)) if ids[i] in specials), len(ids))
            return tokenizer.decode(ids[start + 1 : end])
        return tokenizer.decode(ids[-CONTEXT_TOKENS:])

    # ---- decode steps -------------------------------------------------------------------------
    def may_draft(self, seq: Sequence) -> bool:
        return seq.request_id not in self.groups and seq.request_id not in self.parent_of

    def pick(self, seq: Sequence, logits: torch.Tensor) -> list[int]:
        """This step's token(s) for `seq` from its logits rows (one row unless an MTP draft was fed)."""
        monitor, group = self.monitors.get(seq.request_id), self.groups.get(self.parent_of.get(seq.request_id, seq.request_id))
        if monitor is not None and seq.draft is not None and len(logits) == 2:
            return self._verify(seq, monitor, logits)
        healing = monitor is not None and monitor.active and bool(monitor.state.heal)
        branching = group is not None and not group.spawned and not healing and seq is group.parent
        proposing = group is not None and group.beam and group.spawned
        if monitor is None and not branching and not proposing:
            return sample(logits, [seq.sampling] * len(logits), [seq.generator] * len(logits))
        row, k = logits[-1], group.n if branching or proposing else 1
        picks = monitor.choose(row, k, seq.sampling, seq.generator) if monitor is not None else None
        if picks is None:
            picks = _free_picks(row, k, seq)
        if branching and len(picks) > 1:  # with one legal token there is nothing to branch into yet
            group.spawned = True
            self.branches[seq.request_id] = picks[1:]
        elif proposing:
            self.proposed[seq.request_id] = picks
        return picks[:1]

    def _verify(self, seq: Sequence, monitor: Monitor, logits: torch.Tensor) -> list[int]:
        """A constrained draft step: the legal pick of the first row; where that is the draft, also
        the pick of the second row by the monitor advanced over it, which becomes the sequence's
        monitor (`accepted` does not advance it over the draft again, and goes back to its state
        before the second pick where the engine does not take that token)."""
        first = (monitor.choose(logits[0], 1, seq.sampling, seq.generator) or _free_picks(logits[0], 1, seq))[0]
        if first != seq.draft:
            return [first]
        ahead = monitor.fork()
        ahead.advance(first)
        self.verified[seq.request_id] = ahead.fork()
        second = (ahead.choose(logits[1], 1, seq.sampling, seq.generator) or _free_picks(logits[1], 1, seq))[0]
        self.monitors[seq.request_id] = ahead
        return [first, second]

    def accepted(self, seq: Sequence, logits: torch.Tensor, tokens: list[int]) -> None:
        """Record the log-probabilities and monitor state of tokens just appended; spawn branches."""
        after_draft = self.verified.pop(seq.request_id, None)
        if after_draft is not None and len(tokens) < 2:  # the pick after the draft was not taken
            self.monitors[seq.request_id] = after_draft
        if not tokens:  # the step ended the sequence without a token (a confidence cut)
            self.branches.pop(seq.request_id, None)
            self.proposed.pop(seq.request_id, None)
            return
        rows = logits[: len(tokens)].float()
        lse = rows.logsumexp(-1)
        before = self.logprobs[seq.request_id]
        self.logprobs[seq.request_id] += float((rows.gather(1, torch.tensor(tokens)[:, None]).squeeze(1) - lse).sum())
        monitor = self.monitors.get(seq.request_id)
        base = monitor.fork() if monitor is not None else None
        if monitor is not None:
            for token in tokens[1 if after_draft is not None else 0 :]:
                monitor.advance(token)
        stem = seq.token_ids[: len(seq.token_ids) - len(tokens)]
        for index, token in enumerate(self.branches.pop(seq.request_id, ()), start=1):
            self._spawn(seq, stem, token, index, base, before + float(rows[0, token] - lse[0]))
        proposed = self.proposed.pop(seq.request_id, None)
        if proposed is not None:
            group = self.groups[self.parent_of.get(seq.request_id, seq.request_id)]
            step = self.engine.stats().decode_steps  # the same for every sequence of one step
            scored = [(t, float(rows[0, t] - lse[0])) for t in proposed]
            group.proposals[seq.request_id] = Proposal(step, len(seq.token_ids), before, base, scored)
            for moved in reshuffle(group, step, self.engine.blocks, self.logprobs, self.monitors):
                self.engine._seal(moved)

    def _spawn(self, parent: Sequence, stem: list[int], token: int, index: int, base: Monitor | None, logprob: float) -> None:
        """A child of `parent` that continues `stem` (the parent's tokens before this step, all
        computed) with `token`, on the parent's shared blocks."""
        engine, group = self.engine, self.groups[parent.request_id]
        request = dataclasses.replace(parent.request, request_id=f"{parent.request_id}#{index}", num_candidates=1)
        child = Sequence(request, None, None, parent.stop_ids)
        try:
            child.block_table = engine.blocks.fork(parent.block_table, len(stem))
        except CacheFullError:
            log.info("no KV-cache room for branch %d of %s", index, parent.request_id)
            return
        child.token_ids = list(stem)
        child.block_hashes = list(parent.block_hashes[: len(stem) // engine.blocks.block_size])
        child.num_computed, child.status, child.arrival = len(stem), SequenceStatus.RUNNING, parent.arrival
        child.last_step_at = parent.last_step_at
        if parent.sampling.temperature > 0:
            seed = parent.sampling.seed
            child.generator = torch.Generator().manual_seed(seed + index) if seed is not None else None
        self.parent_of[child.request_id] = parent.request_id
        self.logprobs[child.request_id] = logprob
        if base is not None:
            monitor = self.monitors[child.request_id] = base.fork()
            monitor.advance(token)
        group.children.append(child)
        engine.scheduler.running.append(child)
        engine._texts[child.request_id] = self.text_state(request)
        engine._append(child, [token])
        engine._seal(child)
        engine._after_tokens(child)

    # ---- the end ------------------------------------------------------------------------------
    def is_child(self, seq: Sequence) -> bool:
        return seq.request_id in self.parent_of

    def live_children(self, request_id: str) -> list[Sequence]:
        group = self.groups.get(request_id)
        return [c for c in group.children if not c.is_finished] if group is not None else []

    def deliver(self, seq: Sequence, result: GenerationResult) -> None:
        """Complete `seq`'s result with its candidate(s) and constraint report; call `on_done`
        once per request (an n-best request: when its last sequence ended)."""
        rid = seq.request_id
        monitor = self.monitors.pop(rid, None)
        self.verified.pop(rid, None)
        logprob = self.logprobs.pop(rid, 0.0)
        candidate = None if result.finish_reason is FinishReason.ERROR else Candidate(result.text, result.token_ids, logprob, result.finish_reason)
        parent_id = self.parent_of.pop(rid, rid)
        group = self.groups.get(parent_id)
        if rid == parent_id:
            result = dataclasses.replace(result, constraint=monitor.report() if monitor is not None else None)
        if group is None:
            _call(seq, dataclasses.replace(result, candidates=(candidate,) if candidate else ()))
            return
        group.results[rid] = (result, candidate)
        if parent_id not in group.results or len(group.results) < 1 + len(group.children):
            return
        del self.groups[parent_id]
        self.branches.pop(parent_id, None)
        merged = group.results[parent_id][0]
        ranked = rank([c for _, c in group.results.values() if c is not None])
        if group.beam and ranked:  # the best beam is the answer; its text is streamed once, at the end
            best = ranked[0]
            merged = dataclasses.replace(merged, token_ids=best.token_ids, text=best.text)
            if group.on_event is not None:
                _emit(group.on_event, StreamEvent(parent_id, best.token_ids, best.text, True, merged.finish_reason))
        _call(group.parent, dataclasses.replace(merged, candidates=ranked))


def _free_picks(row: torch.Tensor, k: int, seq: Sequence) -> list[int]:
    """k distinct tokens without a constraint: the best k (greedy) or k draws (sampled)."""
    if k == 1:
        return sample(row[None], [seq.sampling], [seq.generator])
    if seq.sampling.temperature == 0:
        return row.topk(min(k, row.numel())).indices.tolist()
    probs = (row.float().cpu() / seq.sampling.temperature).softmax(-1)  # the generator lives on the CPU
    return torch.multinomial(probs, min(k, int((probs > 0).sum())), replacement=False, generator=seq.generator).tolist()


def _call(seq: Sequence, result: GenerationResult) -> None:
    if seq.on_done is None:
        return
    try:
        seq.on_done(result)
    except Exception:
        log.exception("on_done callback of %s failed", seq.request_id)


def _emit(on_event, event: StreamEvent) -> None:
    try:
        on_event(event)
    except Exception:
        log.exception("on_event callback of %s failed", event.request_id)

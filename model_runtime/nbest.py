"""n-best groups: the branches of one request, beam search over them, and the candidate ranking.

Role: `model_runtime.steering` keeps a `Group` per request with `num_candidates = n > 1`. The
request branches once (after its heal prefix, where two tokens or more are legal) into n
sequences on shared KV blocks. A greedy
group then runs beam search: every beam proposes its n best legal tokens with their
log-probabilities, and once every live beam has proposed at the same length, `reshuffle` keeps
the n best (cumulative log-probability) extensions: a beam whose proposals all lost is
re-pointed at a winning one (its blocks released, the winner's forked, its pending token
replaced). A sampled group keeps its branches independent (diverse sampling).

Invariants:
- A beam's last token is never computed when it is reshuffled (it is fed next step), so
  replacing it and its history only touches the block table, never a written KV row.
- Scores are sums of unconstrained log-probabilities; a beam that ended (a stop token that won)
  leaves the beam and keeps its candidate.
- Beams only reshuffle when every live beam proposed in the same engine step (so the step's own
  bookkeeping finishes and decodes the re-pointed ones); if the scheduler split them they
  continue as independent branches (nothing is lost, the search is narrower).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from model_runtime.api import Candidate, EventCallback, FinishReason, GenerationResult
from model_runtime.constraint.monitor import Monitor
from model_runtime.sequence import Sequence

if TYPE_CHECKING:
    from model_runtime.cache import BlockManager


@dataclass
class Proposal:
    """A beam's proposals in one engine step at one length: its score and monitor before them,
    (token, log-prob) best first."""

    step: int
    length: int
    score: float
    monitor: Monitor | None
    tokens: list[tuple[int, float]]


@dataclass
class Group:
    """An n-best request: the parent sequence, its children, and the results so far."""

    parent: Sequence
    n: int
    beam: bool  # greedy: beam search; sampled: independent branches
    on_event: EventCallback | None = None  # the parent's stream, held back while beams may change
    spawned: bool = False
    children: list[Sequence] = field(default_factory=list)
    results: dict[str, tuple[GenerationResult, Candidate | None]] = field(default_factory=dict)
    proposals: dict[str, Proposal] = field(default_factory=dict)

    def live(self) -> list[Sequence]:
        return [s for s in (self.parent, *self.children) if not s.is_finished]


def reshuffle(group: Group, step: int, blocks: BlockManager, logprobs: dict[str, float], monitors: dict[str, Monitor]) -> list[Sequence]:
    """Keep the best extensions once every live beam proposed in engine step `step`; returns the re-pointed beams."""
    live = group.live()
    stamps = {(p.step, p.length) if (p := group.proposals.get(s.request_id)) else None for s in live}
    if len(stamps) != 1 or None in stamps or next(iter(stamps))[0] != step:
        return []
    by_id = {s.request_id: s for s in live}
    ranked = sorted(((p.score + lp, sid, token) for sid, p in group.proposals.items() if sid in by_id for token, lp in p.tokens), reverse=True)
    winners = ranked[: len(live)]
    keeps = {sid for _, sid, _ in winners}
    extras, seen = [], set()
    for entry in winners:
        if entry[1] in seen:
            extras.append(entry)
        seen.add(entry[1])
    losers = [s for s in live if s.request_id not in keeps]
    for (score, sid, token), target in zip(extras, losers):
        _repoint(target, by_id[sid], token, score, group.proposals[sid].monitor, blocks, logprobs, monitors)
    group.proposals.clear()
    return losers[: len(extras)]


def _repoint(target: Sequence, source: Sequence, token: int, score: float, monitor: Monitor | None,
             blocks: BlockManager, logprobs: dict[str, float], monitors: dict[str, Monitor]) -> None:
    stem = source.token_ids[:-1]
    blocks.release(target.block_table)
    target.block_table = blocks.fork(source.block_table, len(stem))
    target.block_hashes = list(source.block_hashes[: len(stem) // blocks.block_size])
    target.token_ids, target.num_computed = [*stem, token], len(stem)
    logprobs[target.request_id] = score
    if monitor is not None:
        monitors[target.request_id] = monitor.fork()
        monitors[target.request_id].advance(token)
    target.finish_reason = None
    if token in target.stop_ids:
        target.finish_reason = FinishReason.STOP
    elif len(target.output_ids) >= target.sampling.max_tokens:
        target.finish_reason = FinishReason.LENGTH


def rank(candidates: list[Candidate]) -> tuple[Candidate, ...]:
    """Distinct texts, best first: finished before aborted, then by mean log-probability per token."""
    best: dict[str, Candidate] = {}
    for c in candidates:
        if c.text not in best or c.logprob > best[c.text].logprob:
            best[c.text] = c
    return tuple(sorted(best.values(), key=lambda c: (c.finish_reason is not FinishReason.ABORT, c.logprob / max(1, len(c.token_ids))), reverse=True))

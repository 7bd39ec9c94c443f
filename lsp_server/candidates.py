"""The IDE state steers and checks the model: constraint, candidates, reranking, abstaining.

Role: for one prepared completion, `make_plan` builds the cursor's `Site` (context.constraints),
the decode-time `ConstraintSpec` (with token healing: the prompt backed off to a token boundary
before the typed word), and the retrieval candidates (context.retrieval). The engine then runs
one request with the constraint and `num_candidates` (its n-best share the prompt's KV blocks);
`pool` merges its n-best with the retrieval candidates, `score_request` asks the engine for the
log-likelihood of every distinct candidate in one batched forward over the shared prompt, and
`decide` reranks them (context.rerank) and shows the best, or nothing when not confident. An
engine that scores beside its decode steps (the in-process one: a score's forward runs on the
caller's thread, so on the core the engine thread leaves free) gets the retrieval candidates
scored while the model decodes (`score_retrieved`), and the model's own beside the end of that
(`settle`): on a restart's first completion (mid model, 4k-token prompt) settling took 127-140
against 341-417 ms.

Each component follows a setting (`constraints`, `numCandidates`, `retrieval`, `rerank`,
`abstain`), so a benchmark can run each alone.

Streaming: when the answer can only be the model's own greedy text (one candidate, no
retrieval, no reranking), partial text streams as before. Otherwise (`Plan.gated`) nothing is
streamed until the decision, then the final text is published once: a ghost text that the
reranker then replaces, or an abstention then retracts, flickers a wrong suggestion in front of
the user, which is worse than waiting the ~one batched forward the decision costs.

Skipping what cannot change the answer (with abstaining on, `skipUnreachable`): the model adds
only likelihoods to the features, and whether its n-best proposes a retrieval candidate too.
`make_plan` bounds, over both, the probability each retrieval candidate could reach
(`context.rerank.ceiling`), and that of any text of the model's own (`novel_ceiling`); when the
latter is under the threshold only retrieval candidates can be shown (`Reach.contenders`). Then:
1. no contender: abstain at once, with no decode and no scoring (`Plan.out_of_reach`);
2. else `prescore` scores the contenders alone (one batched forward, which also fills the
   prompt's KV) and bounds them again with their likelihoods known: none in reach, abstain
   without decoding; one whose lowest probability (`floor`, over the ways the model could
   join it) reaches the threshold and beats every other's highest, show it without decoding;
3. else the n-best is decoded (it only tells which contenders the model proposes too) and the
   reranker chooses among the contenders with those scores.
The answer is the full pipeline's (the others cannot reach the threshold), except for an engine
whose scoring fails at run time: without skipping it would fall back to the model's own text.

Whose weights: the reranker's weights belong to the model they were fitted for
(`context.rerank.reranker_for`, by `weights_identity`). A model without them (another checkpoint,
a remote engine) shows its own best candidate that passes the text checks, unscored, and never
abstains on another model's threshold. Only an automatic request abstains: an explicit one (the
user asked) shows the best candidate.

Degrading: an engine without candidates gives one (its text); an engine whose `score` raises
leaves the candidates unscored, and the model's own best that passes the checks is shown.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from context.constraints import Site, build_site, constraint_spec
from context.document import DocumentSnapshot
from context.index import WorkspaceIndex
from context.members import disk_reader
from context.rerank import Choice, Features, Reranker, Scored, ceiling, choose, floor, novel_ceiling, own_best, reranker_for
from context.retrieval import Retrieved, retrieve
from model_runtime.api import (
    ConstraintSpec,
    ContinuationScore,
    FinishReason,
    GenerationRequest,
    GenerationResult,
    SamplingParams,
    ScoreRequest,
)
from model_runtime.healing import heal

from . import pipeline
from .errors import GenerationFailed
from .settings import ServerSettings

log = logging.getLogger(__name__)

# A score beside the decode prefills at most this many prompt tokens itself (about a block: the
# completion's own uncached tail); more means the completion is still prefilling its prompt.
BESIDE_MAX_PREFILL = 64


@dataclass(frozen=True, slots=True)
class Reach:
    """What could be shown, bounded before the model runs."""

    ceiling: float  # the best probability any candidate could reach, whatever the model says
    threshold: float
    contenders: tuple[str, ...]  # the retrieval texts whose bound reaches the threshold


@dataclass(frozen=True, slots=True)
class Prescored:
    """The contenders scored before decoding."""

    scores: dict[str, ContinuationScore]  # by text
    in_reach: bool  # some contender could still reach the threshold, its likelihood known
    certain: str | None = None  # the contender shown however the model's n-best turns out


@dataclass(frozen=True, slots=True)
class Plan:
    """What one completion request asks of the engine, and what it will rerank."""

    site: Site | None
    constraint: ConstraintSpec | None
    prompt_ids: tuple[int, ...]  # backed off to a token boundary when healing
    num_candidates: int
    retrieved: tuple[Retrieved, ...]
    rerank: bool
    abstain: bool  # only an automatic request with weights fitted for the model abstains
    can_score: bool = True
    reranker: Reranker | None = None  # the weights fitted for this model, when `rerank` and there are any
    unranked: str = ""  # why `rerank` found no weights for this model
    explicit: bool = False  # the user asked (an explicit request always shows its best candidate)
    reach: Reach | None = None  # None: nothing is skipped (see the module docstring)

    @property
    def out_of_reach(self) -> bool:
        """Whether the answer is an abstention whatever the model says."""
        return self.reach is not None and not self.reach.contenders

    @property
    def gated(self) -> bool:
        """Whether the final text may differ from the model's streamed best (see the module docstring)."""
        return self.can_score and (self.num_candidates > 1 or bool(self.retrieved) or self.rerank)

    @property
    def heal_prefix(self) -> str:
        return self.constraint.heal_prefix if self.constraint is not None else ""

    def request(self, request_id: str, sampling: SamplingParams) -> GenerationRequest:
        return GenerationRequest(request_id, self.prompt_ids, sampling, constraint=self.constraint, num_candidates=self.num_candidates)


@dataclass(frozen=True, slots=True)
class Decision:
    text: str  # what to show ("" when abstaining or nothing fits)
    abstained: bool
    scored: bool  # the engine scored the candidates
    candidates: tuple[Scored, ...]
    choice: Choice
    features: tuple[Features, ...]
    why: str = ""  # why nothing is shown ("" when something is)

    def report(self) -> list[dict[str, Any]]:
        """The candidates, their scores and features, for `glm5.explainContext` and benchmarks."""
        return [
            {
                "text": c.text, "sources": list(c.sources), "modelRank": c.model_rank,
                "logprob": _finite(c.logprob), "tokens": c.tokens,
                "score": _finite(self.choice.scores[i]) if i < len(self.choice.scores) else None,
                "features": self.features[i].as_dict() if i < len(self.features) else None,
                "chosen": self.choice.index == i,
            }
            for i, c in enumerate(self.candidates)
        ]


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


def make_plan(
    prepared: pipeline.Prepared,
    settings: ServerSettings,
    tokenizer: Any,
    index: WorkspaceIndex | None,
    open_docs: Sequence[DocumentSnapshot],
    can_score: bool = True,
    model: str = "",
    explicit: bool = False,
) -> Plan:
    """The plan for `prepared` (which has a prompt) under `settings`, for the model whose
    `weights_identity` is `model`. Only an automatic request abstains (`explicit`: the user asked,
    so the best candidate is shown), and only with reranker weights fitted for `model`; without
    them the model's own best candidate that passes the text checks is shown (`context.rerank.
    own_best`), unscored. An engine that cannot score gets neither retrieval nor reranking
    (nothing could rank them)."""
    if not can_score:
        settings = replace(settings, retrieval=False, rerank=False, abstain=False)
    reranker, unranked = reranker_for(model, settings.rerank_weights) if settings.rerank else (None, "")
    assert prepared.prompt is not None, "plan only completions that have a prompt"
    ids = tuple(prepared.prompt.ids)
    uses_site = settings.constraints or settings.retrieval or settings.rerank
    site = build_site(prepared.snapshot, prepared.position, prepared.kind, index, open_docs) if uses_site else None
    constraint = None
    if settings.constraints and site is not None:
        constraint = constraint_spec(site)
        if site.typed:
            healed, prefix = _heal(tokenizer, ids, site.typed)
            if prefix:
                ids, constraint = healed, replace(constraint, heal_prefix=prefix)
    retrieved: tuple[Retrieved, ...] = ()
    if settings.retrieval and site is not None:
        texts = {d.path: d.text for d in open_docs if d.path}
        retrieved = tuple(retrieve(site, index, disk_reader(texts)))
    abstain = settings.abstain and reranker is not None and not explicit
    plan = Plan(
        site, constraint, ids, settings.num_candidates, retrieved, settings.rerank, abstain, can_score, reranker, unranked, explicit
    )
    if reranker is None or not (abstain and settings.skip_unreachable and site is not None):
        return plan
    novel = novel_ceiling(reranker)
    if novel >= reranker.threshold:
        return plan
    entries = _merge_retrieved(plan, prepared, {})
    bounds = _ceilings(plan, entries, tokenizer, reranker, model_may_join=True)
    contenders = tuple(e.text for e, bound in zip(entries, bounds, strict=True) if bound >= reranker.threshold)
    return replace(plan, reach=Reach(max([novel, *bounds]), reranker.threshold, contenders))


def _heal(tokenizer: Any, ids: tuple[int, ...], typed: str) -> tuple[tuple[int, ...], str]:
    try:
        healed, prefix = heal(getattr(tokenizer, "inner", tokenizer), list(ids), typed)
    except ValueError as exc:
        log.debug("no token healing: %s", exc)
        return ids, ""
    return tuple(healed), prefix


@dataclass(frozen=True, slots=True)
class _Entry:
    text: str
    sources: list[str]
    model_rank: int | None
    logprob: float  # the engine's, for model candidates (no end token); -inf otherwise
    tokens: int
    finished: bool = True
    evidence: dict[str, float] = field(default_factory=dict)  # retrieval's: Scored's similar_rank, similarity, ...


def pool(plan: Plan, prepared: pipeline.Prepared, result: GenerationResult) -> list[_Entry]:
    """Distinct post-processed candidates: the model's n-best (best first), then retrieval's."""
    model = list(result.candidates)
    entries: dict[str, _Entry] = {}
    if not model:
        text = pipeline.finish(prepared, result.text)
        entries[text] = _Entry(text, ["model"], 0, -math.inf, len(result.token_ids), result.finish_reason is not FinishReason.LENGTH)
    for rank, candidate in enumerate(model):
        text = pipeline.finish(prepared, candidate.text)
        if text not in entries:
            finished = candidate.finish_reason is not FinishReason.LENGTH
            entries[text] = _Entry(text, ["model"], rank, candidate.logprob, len(candidate.token_ids), finished)
    return _merge_retrieved(plan, prepared, entries)


def _merge_retrieved(plan: Plan, prepared: pipeline.Prepared, entries: dict[str, _Entry]) -> list[_Entry]:
    """`entries` (the model's, by text) then retrieval's candidates, each text once, with its
    sources and evidence."""
    ranks = {"similar-line": 0, "similar-window": 0}
    for item in plan.retrieved:
        text = pipeline.finish(prepared, item.text)
        if text in entries:
            entries[text].sources.append(item.source)
        elif text.strip():
            entries[text] = _Entry(text, [item.source], None, -math.inf, 0)
        else:
            continue
        _add_evidence(entries[text].evidence, item, ranks)
    return list(entries.values())


def _add_evidence(evidence: dict[str, float], item: Retrieved, ranks: dict[str, int]) -> None:
    """Retrieval's evidence for one candidate (`Scored`'s fields), the best over its sources."""
    if item.source == "similar-line":
        evidence.setdefault("similar_rank", ranks["similar-line"])
        ranks["similar-line"] += 1
        evidence["similarity"] = max(evidence.get("similarity", 0.0), item.similarity)
        evidence["support"] = max(evidence.get("support", 0), item.support)
    elif item.source == "similar-window":
        evidence.setdefault("window_rank", ranks["similar-window"])
        ranks["similar-window"] += 1
        evidence["window_similarity"] = max(evidence.get("window_similarity", 0.0), item.similarity)
    elif item.source == "similar-context":
        evidence["context_similarity"] = max(evidence.get("context_similarity", 0.0), item.similarity)


def score_request(plan: Plan, entries: Sequence[_Entry], tokenizer: Any, request_id: str) -> ScoreRequest:
    """One batched scoring of every candidate (heal prefix + text + end of middle)."""
    return ScoreRequest(f"{request_id}-score", plan.prompt_ids, tuple(_continuation(plan, e.text, tokenizer) for e in entries))


def _continuation(plan: Plan, text: str, tokenizer: Any) -> tuple[int, ...]:
    return tuple(tokenizer.encode(plan.heal_prefix + text)) + (tokenizer.special.eos_ids[0],)


def _ceilings(plan: Plan, entries: Sequence[_Entry], tokenizer: Any, reranker: Reranker, model_may_join: bool) -> list[float]:
    """Each entry's `context.rerank.ceiling` before scoring, at the length its scoring would have."""
    assert plan.site is not None
    return [
        ceiling(plan.site, _scored(e, 0.0, len(_continuation(plan, e.text, tokenizer))), reranker, model_may_join)
        for e in entries
    ]


def _contenders(plan: Plan, prepared: pipeline.Prepared) -> list[_Entry]:
    assert plan.reach is not None
    return [e for e in _merge_retrieved(plan, prepared, {}) if e.text in plan.reach.contenders]


def _prescored(plan: Plan, entries: Sequence[_Entry], scores: Sequence[ContinuationScore]) -> Prescored | None:
    """The contenders' bounds with their likelihoods known; None without weights."""
    reranker = plan.reranker
    if reranker is None or plan.site is None:
        return None
    scored = [_scored(e, s.logprob, s.num_tokens) for e, s in zip(entries, scores, strict=True)]
    highs = [ceiling(plan.site, c, reranker, True, scored=True) for c in scored]
    lows = [floor(plan.site, c, reranker) for c in scored]
    certain = next(
        (c.text for i, c in enumerate(scored)
         if lows[i] >= reranker.threshold and all(lows[i] > high for j, high in enumerate(highs) if j != i)),
        None,
    )
    return Prescored({e.text: s for e, s in zip(entries, scores)}, max(highs, default=0.0) >= reranker.threshold, certain)


async def prescore(engine: Any, plan: Plan, prepared: pipeline.Prepared, tokenizer: Any, request_id: str) -> Prescored | None:
    """Score the plan's contenders before decoding (step 2 of the module docstring); None when
    the engine cannot (the full pipeline then runs)."""
    entries = _contenders(plan, prepared)
    try:
        scores = await engine.score(score_request(plan, entries, tokenizer, f"{request_id}-pre"))
    except (NotImplementedError, TimeoutError, RuntimeError, GenerationFailed) as exc:
        log.info("contenders not scored (%s): running the full pipeline", exc)
        return None
    return await asyncio.to_thread(_prescored, plan, entries, scores)


def prescore_sync(engine: Any, plan: Plan, prepared: pipeline.Prepared, tokenizer: Any) -> Prescored | None:
    """`prescore` for a caller that owns its thread (the headless command)."""
    entries = _contenders(plan, prepared)
    try:
        scores = engine.score(score_request(plan, entries, tokenizer, "headless-pre"))
    except (NotImplementedError, AttributeError, TimeoutError, RuntimeError) as exc:
        log.info("contenders not scored (%s): running the full pipeline", exc)
        return None
    return _prescored(plan, entries, scores)


def settled_early(plan: Plan, prescored: Prescored | None) -> str | None:
    """The answer when it is settled without decoding (steps 1 and 2 of the module docstring):
    "" for an abstention, the certain contender's text; None when the model must decode."""
    if plan.out_of_reach or (prescored is not None and not prescored.in_reach):
        return ""
    return prescored.certain if prescored is not None else None


def early_why(plan: Plan, prescored: Prescored | None, text: str) -> str:
    """Why `settled_early`'s answer `text` shows nothing ("" when it shows something)."""
    if text or plan.reach is None:
        return ""
    threshold = f"threshold {plan.reach.threshold:.2f}"
    if plan.out_of_reach:
        return f"no candidate could reach the reranker's threshold (at best {plan.reach.ceiling:.2f}, {threshold}); the model was not run"
    scored = len(prescored.scores) if prescored is not None else 0
    return f"no candidate could reach the reranker's threshold ({threshold}) with the likelihoods of its {scored} scored candidates"


def _among_contenders(plan: Plan, entries: Sequence[_Entry], prescored: Prescored) -> Decision:
    """The reranker's choice among the prescored contenders (step 3): no other entry can reach
    the threshold, so the full pipeline would choose the same."""
    kept = [e for e in entries if e.text in prescored.scores]
    return decide(plan, kept, [prescored.scores[e.text] for e in kept])


def needs_scores(plan: Plan, entries: Sequence[_Entry]) -> bool:
    """Whether choosing needs the engine's scores: the reranker's features and the likelihood
    ranking do; the model's own best (`rerank` on, no weights for this model) does not."""
    if plan.rerank and plan.reranker is None:
        return False
    return len(entries) > 1 or plan.abstain


def decide(plan: Plan, entries: Sequence[_Entry], scores: Sequence[ContinuationScore] | None) -> Decision:
    """Rerank `entries` with the engine's `scores` and choose; without scores (the engine cannot
    score, or there are no weights for this model), the model's own best that passes the checks."""
    if scores is None:
        return _own_best(plan, entries)
    scored = [_scored(e, s.logprob, s.num_tokens) for e, s in zip(entries, scores, strict=True)]
    site = plan.site
    reranker = plan.reranker
    if site is None:
        best = max(range(len(scored)), key=lambda i: scored[i].logprob / max(1, scored[i].tokens)) if scored else None
        choice = Choice(best, tuple(s.logprob / max(1, s.tokens) for s in scored), False)
        return Decision(scored[best].text if best is not None else "", False, True, tuple(scored), choice, ())
    choice, feats = choose(site, scored, reranker, plan.abstain)
    text = scored[choice.index].text if choice.index is not None else ""
    why = ""
    if choice.abstained and reranker is not None:
        why = f"no candidate reached the reranker's threshold (best {max(choice.scores, default=0.0):.2f} < {reranker.threshold:.2f})"
    return Decision(text, choice.abstained, True, tuple(scored), choice, tuple(feats), why)


def _own_best(plan: Plan, entries: Sequence[_Entry]) -> Decision:
    """The model's best candidate (by its n-best rank) that passes the text checks, else
    retrieval's first that does; an explicit request shows the model's best if none passes."""
    own = sorted((e for e in entries if e.model_rank is not None), key=lambda e: e.model_rank or 0)
    ordered = [*own, *(e for e in entries if e.model_rank is None)]
    scored = tuple(_scored(e, e.logprob, e.tokens) for e in ordered)
    ranks = tuple(float(-i) for i in range(len(scored)))
    if plan.site is None:
        best = 0 if own else None
    else:
        best = own_best(plan.site, scored, always=plan.explicit)
    if best is None:
        why = "no candidate passed the syntax checks" if scored else "the model proposed nothing"
        return Decision("", bool(scored), False, scored, Choice(None, ranks, bool(scored)), (), why)
    return Decision(scored[best].text, False, False, scored, Choice(best, ranks, False), ())


def _scored(entry: _Entry, logprob: float, tokens: int) -> Scored:
    return Scored(entry.text, tuple(entry.sources), entry.model_rank, logprob, tokens, entry.finished, **entry.evidence)


@dataclass(frozen=True, slots=True)
class Beside:
    """Scores started while the model decodes (`score_retrieved`): the texts, and the task that
    gives {text: score}, or None where the engine could not score them."""

    texts: frozenset[str]
    scores: asyncio.Future[dict[str, ContinuationScore] | None]


def score_retrieved(engine: Any, plan: Plan, prepared: pipeline.Prepared, tokenizer: Any, request_id: str) -> Beside | None:
    """Start scoring the retrieval candidates while the model decodes (the engine runs a score's
    forward on the caller's thread, so on the spare core): `settle` then scores only the model's
    own candidates. None where nothing would be scored after decoding, or it is already
    (`prescore`)."""
    if plan.reach is not None or not (plan.gated and plan.retrieved) or not getattr(engine, "scores_beside_steps", False):
        return None
    entries = _merge_retrieved(plan, prepared, {})
    if not entries:
        return None
    task = asyncio.ensure_future(_scores_by_text(engine, plan, entries, tokenizer, f"{request_id}-retrieved", BESIDE_MAX_PREFILL))
    task.add_done_callback(lambda t: t.cancelled() or t.exception())  # a result nobody awaits (an abort) is not an error
    return Beside(frozenset(e.text for e in entries), task)


async def _scores_by_text(
    engine: Any, plan: Plan, entries: Sequence[_Entry], tokenizer: Any, request_id: str, max_prefill: int | None = None
) -> dict[str, ContinuationScore] | None:
    if not entries:
        return {}
    try:
        scores = await engine.score(replace(score_request(plan, entries, tokenizer, request_id), max_prefill=max_prefill))
    except (NotImplementedError, TimeoutError, RuntimeError, GenerationFailed) as exc:
        log.info("candidates not scored (%s)", exc)
        return None
    return {e.text: s for e, s in zip(entries, scores, strict=True)}


async def settle(
    engine: Any, plan: Plan, prepared: pipeline.Prepared, result: GenerationResult, tokenizer: Any, prescored: Prescored | None = None,
    beside: Beside | None = None,
) -> Decision:
    """Pool (on the event loop), score (one batched engine call, unless `prescored`) and decide
    (the reranker's features parse and scan the file: on a worker thread). The candidates
    `beside` started scoring during the decode are not scored again: the others' scoring runs
    beside the end of theirs (where that failed, they are scored after it)."""
    entries = pool(plan, prepared, result)
    if prescored is not None:
        return await asyncio.to_thread(_among_contenders, plan, entries, prescored)
    if not needs_scores(plan, entries):
        return decide(plan, entries, None)
    early = beside.texts if beside is not None else frozenset()
    late = _scores_by_text(engine, plan, [e for e in entries if e.text not in early], tokenizer, result.request_id)
    scored, known = await asyncio.gather(late, beside.scores if beside is not None else _no_scores())
    known = known or {}
    missed = [e for e in entries if e.text in early and e.text not in known]
    if missed and scored is not None:
        again = await _scores_by_text(engine, plan, missed, tokenizer, f"{result.request_id}-again")
        scored = None if again is None else scored | again
    if scored is None:
        log.info("showing the model's best")
    scores = None if scored is None else [known[e.text] if e.text in known else scored[e.text] for e in entries]
    return await asyncio.to_thread(decide, plan, entries, scores)


async def _no_scores() -> dict[str, ContinuationScore]:
    return {}


def settle_sync(
    engine: Any, plan: Plan, prepared: pipeline.Prepared, result: GenerationResult, tokenizer: Any, prescored: Prescored | None = None
) -> Decision:
    """`settle` for a caller that owns its thread (the headless command)."""
    entries = pool(plan, prepared, result)
    if prescored is not None:
        return _among_contenders(plan, entries, prescored)
    if not needs_scores(plan, entries):
        return decide(plan, entries, None)
    try:
        scores = engine.score(score_request(plan, entries, tokenizer, result.request_id))
    except (NotImplementedError, AttributeError, TimeoutError, RuntimeError) as exc:
        log.info("candidates not scored (%s): showing the model's best", exc)
        scores = None
    return decide(plan, entries, scores)

"""Constrained decoding, token healing, n-best and batched scoring through the real engine."""

from __future__ import annotations

import pytest
import torch

from model_runtime.api import (
    ConstraintSpec, FinishReason, GenerationRequest, MemberScope, SamplingParams, ScoreRequest,
)
from model_runtime.config import EngineConfig
from model_runtime.engine import Engine
from model_runtime.healing import heal

from steer_support import fim_ids, run

CFG = EngineConfig(block_size=16, max_cache_tokens=2048)
PREFIX = "import math\n\n\ndef centroid(points):\n    xs = [p[0] for p in points]\n    return sum(xs) / len(xs)\n\n\ndef main(points):\n    middle = "


def assert_all_blocks_free(engine: Engine) -> None:
    assert all(b.ref_count == 0 for b in engine.blocks.blocks)
    assert engine.blocks.num_free == engine.blocks.num_device


def test_token_healing_reproduces_a_prefix_typed_mid_token(embedded):
    tok = embedded.tokenizer
    typed = "centr"
    full = fim_ids(tok, PREFIX + typed)
    ids, heal_prefix = heal(tok, full, typed)
    assert heal_prefix.endswith(typed) and ids != full
    engine = Engine(embedded, CFG)
    spec = ConstraintSpec(heal_prefix=heal_prefix, defined_names=("math", "centroid", "points", "sum", "len", "main"))
    result = run(engine, GenerationRequest("heal", tuple(ids), SamplingParams(max_tokens=8), constraint=spec))
    produced = tok.decode(list(result.token_ids))
    assert produced.startswith(heal_prefix)
    assert result.text == produced[len(heal_prefix):]
    assert result.candidates[0].text == result.text
    assert "heal" in result.constraint.fired or result.constraint.masked_steps == 0
    assert_all_blocks_free(engine)


def test_a_constraint_with_no_legal_continuation_releases_and_still_answers(embedded):
    tok = embedded.tokenizer
    spec = ConstraintSpec(member_scopes=(MemberScope("math", ()),), defined_names=("math",))
    result = run(Engine(embedded, CFG), GenerationRequest(
        "rel", tuple(fim_ids(tok, "import math\nvalue = math.")), SamplingParams(max_tokens=4), constraint=spec))
    assert result.finish_reason is not FinishReason.ERROR
    assert result.constraint.released and result.token_ids


def test_constrained_output_keeps_to_the_members(embedded):
    tok = embedded.tokenizer
    spec = ConstraintSpec(single_line=True, member_scopes=(MemberScope("math", ("sqrt", "floor")),), defined_names=("math", "x"))
    result = run(Engine(embedded, CFG), GenerationRequest(
        "mem", tuple(fim_ids(tok, "import math\nx = 4\nvalue = math.")), SamplingParams(max_tokens=6), constraint=spec))
    assert not result.constraint.released
    assert result.text.startswith(("sqrt", "floor")), result.text
    assert "\n" not in result.text


def test_a_plain_request_still_reports_its_candidate_logprob(tiny):
    engine = Engine(tiny, CFG)
    prompt = tuple(range(3, 40))
    result = run(engine, GenerationRequest("plain", prompt, SamplingParams(max_tokens=6)))
    assert result.constraint is None and len(result.candidates) == 1
    (scored,) = engine.score(ScoreRequest("s", prompt, (result.token_ids,)))
    assert result.candidates[0].logprob == pytest.approx(scored.logprob, abs=1e-3)


@pytest.mark.parametrize("temperature", [0.0, 0.8])
def test_n_best_candidates_are_distinct_sorted_and_scored_unconstrained(tiny, temperature):
    engine = Engine(tiny, CFG)
    prompt = tuple(range(5, 45))
    sampling = SamplingParams(max_tokens=6, temperature=temperature, seed=3)
    result = run(engine, GenerationRequest("nb", prompt, sampling, num_candidates=4))
    cands = result.candidates
    assert len(cands) == 4 and len({c.text for c in cands}) == 4 and len({c.token_ids for c in cands}) == 4
    means = [c.logprob / len(c.token_ids) for c in cands]
    assert means == sorted(means, reverse=True)
    scores = engine.score(ScoreRequest("s", prompt, tuple(c.token_ids for c in cands)))
    assert [c.logprob for c in cands] == pytest.approx([s.logprob for s in scores], abs=1e-3)
    assert result.token_ids == cands[0].token_ids if temperature == 0 else True
    assert engine.stats().requests_finished == 1
    assert_all_blocks_free(engine)


def test_greedy_n_best_is_a_beam_search(tiny):
    engine = Engine(tiny, EngineConfig(block_size=16, max_cache_tokens=32768))
    prompt, n, vocab = tuple(range(20, 60)), 3, tiny.config.vocab_size  # its 3 best first tokens are no stop token
    result = run(engine, GenerationRequest("beam", prompt, SamplingParams(max_tokens=2), num_candidates=n))
    first = engine.score(ScoreRequest("first", prompt, tuple((t,) for t in range(vocab))))
    top_first = sorted(range(vocab), key=lambda t: -first[t].logprob)[:n]
    assert not set(top_first) & set(tiny.config.eos_token_id)
    pairs = [(t, u) for t in top_first for u in range(vocab)]
    scores = engine.score(ScoreRequest("pairs", prompt, tuple(pairs)))
    best, texts = [], set()
    for logprob, pair in sorted(zip((s.logprob for s in scores), pairs), reverse=True)[:n]:
        if tiny.tokenizer.decode(list(pair)) not in texts:  # candidates are distinct texts
            best.append((logprob, pair))
            texts.add(tiny.tokenizer.decode(list(pair)))
    assert [c.token_ids for c in result.candidates] == [p for _, p in best]
    assert [c.logprob for c in result.candidates] == pytest.approx([lp for lp, _ in best], abs=1e-3)
    assert result.token_ids == best[0][1]
    assert_all_blocks_free(engine)


def _start_branches(engine: Engine, request: GenerationRequest):
    done: list = []
    engine.add(request, None, done.append)
    while not engine._steer.groups[request.request_id].children:
        engine.step()
    group = engine._steer.groups[request.request_id]
    return group.parent, group.children, done


def test_n_best_branches_share_the_prompt_blocks_and_free_them_at_the_end(tiny):
    engine = Engine(tiny, CFG)
    prompt = tuple(range(5, 5 + 3 * CFG.block_size + 7))
    parent, children, done = _start_branches(engine, GenerationRequest("share", prompt, SamplingParams(max_tokens=5), num_candidates=3))
    full = len(prompt) // CFG.block_size
    assert len(children) == 2
    for child in children:
        assert child.block_table[:full] == parent.block_table[:full]
        assert child.block_table[full] != parent.block_table[full]  # private copy of the partial block
    assert all(engine.blocks.blocks[b].ref_count == 3 for b in parent.block_table[:full])
    engine.run_until_idle()
    assert len(done) == 1 and len(done[0].candidates) == 3
    assert_all_blocks_free(engine)


def test_aborting_an_n_best_request_ends_every_branch_and_frees_all_blocks(tiny):
    engine = Engine(tiny, CFG)
    _, children, done = _start_branches(engine, GenerationRequest("ab", tuple(range(5, 50)), SamplingParams(max_tokens=40), num_candidates=3))
    engine.abort("ab")
    engine._drain(block=False)
    assert len(done) == 1 and done[0].finish_reason is FinishReason.ABORT
    assert all(c.is_finished for c in children) and not engine.scheduler.has_work
    assert engine.stats().requests_aborted == 1
    assert_all_blocks_free(engine)


def test_batched_scoring_equals_scoring_each_continuation_alone(tiny):
    engine = Engine(tiny, CFG)
    prompt = tuple(range(7, 7 + 2 * CFG.block_size))  # ends on a block boundary: the last block is shared
    conts = ((11, 12, 13), (40,), (), (11, 12, 99, 100, 101))
    batched = engine.score(ScoreRequest("b", prompt, conts))
    alone = [engine.score(ScoreRequest(f"a{i}", prompt, (c,)))[0] for i, c in enumerate(conts)]
    fresh = [Engine(tiny, CFG).score(ScoreRequest("f", prompt, (c,)))[0] for c in conts]
    for b, a, f, c in zip(batched, alone, fresh, conts):
        assert b.num_tokens == len(c) == len(b.token_logprobs)
        assert b.token_logprobs == pytest.approx(a.token_logprobs, abs=1e-4)
        assert b.logprob == pytest.approx(f.logprob, abs=1e-4)
    assert batched[2].logprob == 0.0
    assert batched[0].token_logprobs[:2] == pytest.approx(batched[3].token_logprobs[:2], abs=1e-4)
    assert_all_blocks_free(engine)


def test_score_rejects_ids_outside_the_vocabulary(tiny):
    with pytest.raises(ValueError, match="outside the vocabulary"):
        Engine(tiny, CFG).score(ScoreRequest("bad", (1, 2), ((10**6,),)))


def test_mtp_engine_gives_constrained_and_n_best_requests_the_same_output(tiny):
    import dataclasses

    prompt = tuple(range(5, 45))
    requests = [
        GenerationRequest("c", prompt, SamplingParams(max_tokens=8), constraint=ConstraintSpec(open_brackets="(")),
        GenerationRequest("n", prompt, SamplingParams(max_tokens=8), num_candidates=3),
        GenerationRequest("p", prompt, SamplingParams(max_tokens=8)),
    ]
    plain = [run(Engine(tiny, CFG), r) for r in requests]
    mtp_engine = Engine(tiny, dataclasses.replace(CFG, use_mtp=True))
    with_mtp = [run(mtp_engine, r) for r in requests]
    for a, b in zip(plain, with_mtp):
        assert a.token_ids == b.token_ids
        assert [c.token_ids for c in a.candidates] == [c.token_ids for c in b.candidates]
    assert_all_blocks_free(mtp_engine)


def test_n_best_with_healing_branches_after_the_heal_prefix(embedded):
    tok = embedded.tokenizer
    ids, heal_prefix = heal(tok, fim_ids(tok, PREFIX + "c"), "c")
    engine = Engine(embedded, CFG)
    names = ("math", "centroid", "center", "count", "compute", "points", "sum", "len", "main")
    spec = ConstraintSpec(heal_prefix=heal_prefix, single_line=True, defined_names=names)
    result = run(engine, GenerationRequest("hb", tuple(ids), SamplingParams(max_tokens=10), constraint=spec, num_candidates=3))
    assert len(result.candidates) >= 2 and len({c.text for c in result.candidates}) == len(result.candidates)
    for cand in result.candidates:
        produced = tok.decode(list(cand.token_ids))
        assert produced.startswith(heal_prefix) and cand.text == produced[len(heal_prefix):].split("\n")[0]
    healed = next(i for i in range(1, len(result.token_ids) + 1) if tok.decode(list(result.token_ids[:i])).startswith(heal_prefix))
    assert len({c.token_ids[:healed] for c in result.candidates}) == 1  # the branches share the heal tokens
    scores = engine.score(ScoreRequest("s", tuple(ids), tuple(c.token_ids for c in result.candidates)))
    assert [c.logprob for c in result.candidates] == pytest.approx([s.logprob for s in scores], abs=1e-3)
    assert_all_blocks_free(engine)


def test_a_beam_request_streams_only_its_final_best_text(tiny):
    engine = Engine(tiny, CFG)
    events, done = [], []
    engine.add(GenerationRequest("bs", tuple(range(20, 60)), SamplingParams(max_tokens=5), num_candidates=3), events.append, done.append)
    engine.run_until_idle()
    assert len(events) == 1 and events[0].finished
    assert events[0].text == done[0].text == done[0].candidates[0].text


def _oracle_drafts(engine: Engine, prompt_len: int, reference: tuple[int, ...], right: bool, vocab: int) -> None:
    """Replace the engine's MTP layer: each draft is the reference's next token (or a wrong one)."""

    def run_mtp(feeds, hidden):
        drafts = []
        for feed in feeds:
            at = feed.start + len(feed.tokens) + 1 - prompt_len  # the output index the draft is for
            token = reference[at] if 0 <= at < len(reference) else 0
            drafts.append(torch.nn.functional.one_hot(torch.tensor(token if right else (token + 1) % vocab), vocab).float())
        return drafts

    engine.runner.run_mtp = run_mtp


@pytest.mark.parametrize("right", [True, False])
def test_constrained_requests_verify_drafts_and_keep_their_output(embedded, right):
    """A constrained greedy request takes MTP drafts: the monitor checks them in order, so right
    drafts halve the steps and wrong ones are rolled back, with the same tokens, text, score and
    constraint report as decoding one token a step."""
    import dataclasses

    tok = embedded.tokenizer
    spec = ConstraintSpec(single_line=True, member_scopes=(MemberScope("math", ("sqrt", "floor")),), defined_names=("math", "x"))
    request = GenerationRequest("mem", tuple(fim_ids(tok, "import math\nx = 4\nvalue = math.")), SamplingParams(max_tokens=12), constraint=spec)
    plain = run(Engine(embedded, CFG), request)
    engine = Engine(embedded, dataclasses.replace(CFG, use_mtp=True))
    _oracle_drafts(engine, len(request.prompt_ids), plain.token_ids, right, embedded.config.vocab_size)
    spec_run = run(engine, request)
    assert spec_run.token_ids == plain.token_ids and spec_run.text == plain.text and spec_run.text.startswith(("sqrt", "floor"))
    assert spec_run.candidates[0].logprob == pytest.approx(plain.candidates[0].logprob, abs=1e-4)
    a, b = spec_run.constraint, plain.constraint
    assert (a.steps, a.masked_steps, a.released, a.fired) == (b.steps, b.masked_steps, b.released, b.fired)
    stats = engine.stats()
    assert stats.spec_drafted > 0 and stats.spec_accepted == (stats.spec_drafted if right else 0)
    assert spec_run.decode_steps < plain.decode_steps if right else spec_run.decode_steps == plain.decode_steps
    assert_all_blocks_free(engine)


def test_an_accepted_draft_that_ends_the_output_takes_no_token_after_it(embedded):
    """Right drafts everywhere; the output ends at each of several stop strings in turn, or where
    confidence collapses after the first line: the tokens are plain decoding's, never one more."""
    import dataclasses

    tok = embedded.tokenizer
    prompt = tuple(tok.encode(PREFIX.replace("    middle = ", "    total = 0\n    for p in points:\n")))
    free = run(Engine(embedded, CFG), GenerationRequest("free", prompt, SamplingParams(max_tokens=16)))
    pieces = [tok.decode(list(free.token_ids[: i + 1])) for i in range(len(free.token_ids))]
    stops = {p[-2:] for p in pieces[2:8] if len(p) >= 2 and p[-2:].strip()}  # each ends a different token
    samplings = [SamplingParams(max_tokens=16, stop_strings=(s,)) for s in sorted(stops)]
    samplings.append(SamplingParams(max_tokens=16, min_confidence=0.9))
    cut = 0
    for sampling in samplings:
        request = GenerationRequest("s", prompt, sampling)
        plain = run(Engine(embedded, CFG), request)
        engine = Engine(embedded, dataclasses.replace(CFG, use_mtp=True))
        _oracle_drafts(engine, len(prompt), free.token_ids, True, embedded.config.vocab_size)
        spec_run = run(engine, request)
        assert spec_run.token_ids == plain.token_ids, sampling
        assert (spec_run.text, spec_run.finish_reason) == (plain.text, plain.finish_reason)
        cut += len(plain.token_ids) < len(free.token_ids)
    assert cut >= 3  # the stops really ended outputs early

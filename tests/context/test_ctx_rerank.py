"""Reranking: the checks (parses, undefined names, repeats), the shipped weights, the choice."""

from __future__ import annotations

import json
import random
from dataclasses import replace
from pathlib import Path

import pytest

from context.classify import CompletionKind
from context.constraints import build_site
from context.document import Document
from context.index import WorkspaceIndex
from context.positions import Position
from context import rerank
from context.rerank import (
    FEATURES, Reranker, Scored, ceiling, choose, features, floor, load_reranker, novel_ceiling, own_best, parses, repeats,
    reranker_for, undefined_names,
)

GEOMETRY = "class Point:\n    def __init__(self, x):\n        self.x = x\n\n\ndef centroid(points):\n    return Point(sum(points))\n"
APP = "from geometry import Point, centroid\n\n\ndef main(points):\n    center = \n    print(center.x)\n"


@pytest.fixture
def site(tmp_path: Path):
    (tmp_path / "geometry.py").write_text(GEOMETRY)
    (tmp_path / "app.py").write_text(APP)
    index = WorkspaceIndex([tmp_path])
    index.build()
    snapshot = Document((tmp_path / "app.py").as_uri(), "python", 1, APP).snapshot()
    return build_site(snapshot, Position(4, 13), CompletionKind.SINGLE_LINE, index)


def test_parses_checks_the_completed_line(site) -> None:
    assert parses(site, "centroid(points)")
    assert not parses(site, "centroid(points")
    assert not parses(site, "centroid(points))")
    assert not parses(site, "= =")


def _parses_from_scratch(site, text: str) -> bool:
    """The check by its definition: parse the whole file with the cursor line completed, and
    look for an error or missing node on that line."""
    lines = site.snapshot.text.split("\n")
    row = site.position.line
    lines[row] = site.line_prefix + text + site.line_suffix
    stack = [site.snapshot.language.parse("\n".join(lines).encode()).root_node]
    while stack:
        node = stack.pop()
        if node.start_point[0] <= row <= node.end_point[0]:
            if node.is_error or node.is_missing:
                return False
            stack.extend(node.children)
    return True


def test_parses_edits_one_parse_of_the_block_and_agrees_with_a_parse_from_scratch(tmp_path: Path) -> None:
    """Inside a long class (the check's window is the whole class), at a line's start and
    mid-line: every candidate (valid, broken, multi-line, non-ASCII) gets the answer a parse of
    the completed file from scratch gives, and the block as typed is parsed once per site."""
    body = "".join(f"    def m{i}(self, x):\n        return x + {i}\n\n" for i in range(60))
    text = f"import os\n\n\nclass Big:\n{body}    def last(self, é):\n        value = \n        return value\n\n\ndef after():\n    pass\n"
    snapshot = Document((tmp_path / "big.py").as_uri(), "python", 1, text).snapshot()
    row = text.split("\n").index("        value = ")
    texts = ["os.path.join(é, 'x')", "(1, 2", "é + 1", "[\n            1,\n            2]", "1)\n", "' unterminated", "", "f(ünï) if é else None"]
    for position in (Position(row, 16), Position(row, 8)):
        site = build_site(snapshot, position, CompletionKind.SINGLE_LINE)
        rerank._typed_tree.cache_clear()
        got = [parses(site, t) for t in texts]
        assert got == [_parses_from_scratch(site, t) for t in texts]
        assert rerank._typed_tree.cache_info().misses == 1
    assert True in got and False in got


def test_undefined_names_and_unknown_members(site) -> None:
    assert undefined_names(site, "centroid(points)") == 0
    assert undefined_names(site, "centre(points)") == 1
    assert undefined_names(site, "Point(points).x") == 0  # `x` is a member of an expression, not checked
    assert undefined_names(site, "[p for p in points if p]") == 0  # comprehension variables
    assert undefined_names(site, "centroid(points, key=size)") == 1  # `key` is an argument name, `size` a use
    assert undefined_names(site, "len('undefined_in_a_string')") == 0


def test_repeats_the_next_line(site) -> None:
    assert repeats(site, "print(center.x)") is False  # the next line is `    print(center.x)` but this is `center = ...`
    site_blank = build_site(site.snapshot, Position(4, 0), CompletionKind.SINGLE_LINE)
    assert repeats(site_blank, "    print(center.x)") is True
    assert repeats(site_blank, "    center = centroid(points)") is False


def test_the_shipped_weights_load_and_match_the_features() -> None:
    reranker = load_reranker()
    assert len(reranker.weights) == len(FEATURES)
    assert 0.0 < reranker.threshold <= 1.0
    if reranker.threshold == 1.0:  # the fit found no threshold worth showing at: it must say it showed nothing
        assert reranker.meta["tuning"]["show_rate"] == 0.0
    assert reranker.meta["items"] > 0 and reranker.meta["packages"]


def test_the_shipped_weights_are_the_embedded_models_only(tmp_path: Path) -> None:
    """They name the embedded model's weights; any other model gets none (and says why), and a
    file of the user's that names no model is taken at its word."""
    from model_runtime.embedded import default_model_path
    from model_runtime.fingerprint import weights_identity

    shipped, why = reranker_for(weights_identity(default_model_path()))
    assert shipped is not None and why == ""
    other, why = reranker_for("0123456789abcdef0123456789abcdef")
    assert other is None and "no reranker weights were fitted for this model" in why
    unnamed = tmp_path / "mine.json"
    unnamed.write_text(Reranker(shipped.weights, shipped.bias, 0.5, {"note": "fitted by hand"}).to_json())
    mine, why = reranker_for("0123456789abcdef0123456789abcdef", str(unnamed))
    assert mine is not None and mine.threshold == 0.5 and why == ""
    named = tmp_path / "theirs.json"
    named.write_text(Reranker(shipped.weights, shipped.bias, 0.5, {"model_identity": "feed"}).to_json())
    assert reranker_for("0123456789abcdef0123456789abcdef", str(named))[0] is None
    assert reranker_for("feed", str(named))[0] is not None


def test_own_best_is_the_models_first_candidate_that_passes_the_checks(site) -> None:
    """Without weights: the model's n-best in rank order, then retrieval's, each judged by the
    checks (parses, not blank, does not re-type the next line); nothing passes, nothing shown,
    unless the user asked."""
    broken = Scored("centroid(points", ("model",), 0, -1.0, 5)
    blank = Scored("   ", ("model",), 1, -1.0, 1)
    good = Scored("centroid(points)", ("model",), 2, -5.0, 6)
    retrieved = Scored("Point(0)", ("similar-line",), None, float("-inf"), 0)
    assert own_best(site, [broken, blank, good, retrieved], always=False) == 2
    assert own_best(site, [broken, blank, retrieved], always=False) == 2
    assert own_best(site, [broken, blank], always=False) is None
    assert own_best(site, [blank, broken], always=True) == 1


def test_a_blank_candidate_wins_only_when_every_candidate_is_blank(site) -> None:
    candidates = [Scored("", ("model",), 0, -0.01, 1), Scored("zzz(", ("model",), 1, -80.0, 8)]
    choice, _ = choose(site, candidates, load_reranker(), abstain=False)
    assert choice.index == 1


def test_weights_for_other_features_are_refused(tmp_path: Path) -> None:
    bad = tmp_path / "rerank.json"
    bad.write_text(json.dumps({"features": ["mean_logprob"], "weights": [1.0], "bias": 0.0, "threshold": 0.5}))
    with pytest.raises(ValueError, match="expected"):
        load_reranker(bad)


def test_reranking_prefers_the_parsing_candidate_over_a_likelier_one_that_does_not_parse(site) -> None:
    broken = Scored("centroid(points", ("model",), 0, logprob=-3.0, tokens=6)
    right = Scored("centroid(points)", ("model",), 1, logprob=-4.2, tokens=7)
    assert broken.logprob / broken.tokens > right.logprob / right.tokens
    choice, feats = choose(site, [broken, right], load_reranker(), abstain=False)
    assert choice.index == 1
    assert feats[0].as_dict()["parses"] == 0.0 and feats[1].as_dict()["parses"] == 1.0


def test_without_weights_the_likeliest_non_blank_candidate_wins_and_nothing_abstains(site) -> None:
    candidates = [Scored("", ("model",), 0, -0.1, 1), Scored("centroid(points)", ("call",), None, -14.0, 7), Scored("e", ("model",), 1, -9.0, 2)]
    choice, _ = choose(site, candidates, None, abstain=True)
    assert choice.index == 1 and not choice.abstained


def test_abstains_when_the_best_candidate_is_unlikely(site) -> None:
    candidates = [Scored("zzz(", ("model",), 0, -80.0, 8), Scored("qq qq", ("model",), 1, -90.0, 9)]
    choice, _ = choose(site, candidates, load_reranker(), abstain=True)
    assert choice.index is None and choice.abstained
    choice, _ = choose(site, candidates, load_reranker(), abstain=False)
    assert choice.index is not None


def test_retrieval_evidence_becomes_features(site) -> None:
    """The baseline's answer (rank 0 among similar-line candidates), its match's similarity and
    support, and the similar-context match's similarity reach the reranker as features."""
    top = Scored("centroid(points)", ("similar-line",), None, -4.0, 7, similar_rank=0, similarity=0.9, support=6)
    second = Scored("Point(points)", ("similar-line", "similar-context"), None, -4.0, 7, similar_rank=1, similarity=0.5,
                    support=1, context_similarity=0.75)
    choice, feats = choose(site, [top, second], None, abstain=False)
    first, other = feats[0].as_dict(), feats[1].as_dict()
    assert (first["similar_top"], first["similarity"], first["support"], first["context_similarity"]) == (1.0, 0.9, 1.0, 0.0)
    assert (other["similar_top"], other["similarity"], other["support"], other["context_similarity"]) == (0.0, 0.5, 0.25, 0.75)
    assert choice.index is not None


LOGPROBS = (0.0, -0.01, -0.5, -3.0, -20.0, -59.9, -60.0, -60.1, -75.0, -400.0, -1e6)
RETRIEVED = (
    Scored("centroid(points)", ("call",), None, 0.0, 7),
    Scored("centroid(points)", ("similar-line", "similar-window"), None, 0.0, 7, similar_rank=0, similarity=0.95, support=5,
           window_rank=0, window_similarity=0.9),
    Scored("Point(points).x + centroid(points) - 1", ("similar-context",), None, 0.0, 33, context_similarity=0.8),
    Scored("centroid(points", ("identifier",), None, 0.0, 1),
    Scored("    " + "x + " * 30 + "x", ("similar-line",), None, 0.0, 64, similar_rank=2, similarity=0.4, support=1),
)


def _rerankers() -> list[Reranker]:
    """The shipped weights, and random ones (any sign) with a non-negative mean-likelihood weight."""
    shipped = load_reranker()
    rng = random.Random(7)
    out = [shipped]
    for _ in range(20):
        weights = tuple(rng.uniform(-3, 3) for _ in FEATURES)
        weights = (abs(weights[0]), *weights[1:])
        out.append(Reranker(weights, rng.uniform(-3, 3), 0.9, {}))
    return out


@pytest.mark.parametrize("candidate", RETRIEVED, ids=lambda c: ",".join(c.sources))
def test_the_ceiling_bounds_every_likelihood_and_every_way_the_model_can_join(site, candidate: Scored) -> None:
    """Whatever the model's scoring (any log-likelihood) and n-best (it proposes the text or not,
    first or later, finished or cut off), the probability stays at or under the ceiling, and the
    ceiling is reached by one of them (it is the maximum, not a loose bound)."""
    for reranker in _rerankers():
        bound = ceiling(site, candidate, reranker, model_may_join=True)
        alone = ceiling(site, candidate, reranker, model_may_join=False)
        joined = [replace(candidate, sources=(*candidate.sources, "model"), model_rank=rank, finished=done)
                  for rank in (0, 3) for done in (True, False)]
        reached = 0.0
        for variant in (candidate, *joined):
            for logprob in LOGPROBS:
                p = reranker.probability(features(site, replace(variant, logprob=logprob)))
                assert p <= bound + 1e-12
                if variant is candidate:
                    assert p <= alone + 1e-12
                reached = max(reached, p)
        assert reached == pytest.approx(bound, abs=1e-9)
        assert alone <= bound


def test_the_novel_ceiling_bounds_any_model_candidate_no_retrieval_proposed(site) -> None:
    texts = ("", "e", "centroid(points)", "centroid(points", "print(center.x)", "zzz qq", "# TODO", "x" * 200)
    for reranker in _rerankers():
        bound = novel_ceiling(reranker)
        for text in texts:
            for tokens in (1, 2, 7, 39, 40, 41, 64, 500):
                for rank, done in ((0, True), (2, False)):
                    for logprob in LOGPROBS:
                        scored = Scored(text, ("model",), rank, logprob, tokens, done)
                        assert reranker.probability(features(site, scored)) <= bound + 1e-12


def test_with_the_shipped_weights_the_models_own_text_alone_can_never_be_shown() -> None:
    """What makes skipping the model possible: a candidate with no retrieval evidence stays under
    the shipped threshold whatever the model thinks of it."""
    reranker = load_reranker()
    assert novel_ceiling(reranker) < reranker.threshold


def test_a_negative_mean_likelihood_weight_has_no_ceiling(site) -> None:
    shipped = load_reranker()
    inverted = Reranker((-abs(shipped.weights[0]), *shipped.weights[1:]), shipped.bias, shipped.threshold, {})
    top = inverted.probability(features(site, replace(RETRIEVED[0], logprob=-1e9, model_rank=0)))  # the clamp's maximum
    assert ceiling(site, RETRIEVED[0], inverted, model_may_join=True) == top == pytest.approx(1.0)
    assert novel_ceiling(inverted) == top


@pytest.mark.parametrize("candidate", RETRIEVED, ids=lambda c: ",".join(c.sources))
def test_with_the_likelihood_known_floor_and_ceiling_are_the_extremes_over_how_the_model_joins(site, candidate: Scored) -> None:
    for reranker in _rerankers():
        for logprob in LOGPROBS:
            scored = replace(candidate, logprob=logprob)
            joined = [replace(scored, sources=(*scored.sources, "model"), model_rank=rank, finished=done)
                      for rank in (0, 3) for done in (True, False)]
            probabilities = [reranker.probability(features(site, v)) for v in (scored, *joined)]
            assert floor(site, scored, reranker) == pytest.approx(min(probabilities), abs=1e-12)
            assert ceiling(site, scored, reranker, model_may_join=True, scored=True) == pytest.approx(max(probabilities), abs=1e-12)


BRACE_SOURCES = {
    "javascript": "// totals\nfunction total(items) {\n  let sum = 0;\n  for (const item of items) {\n    sum += item.price;\n  }\n  return \n}\n\nfunction other() {\n  return 1;\n}\n",
    "typescript": "interface Item { price: number }\n\nexport function total(items: Item[]): number {\n  let sum = 0;\n  return \n}\n",
    "go": "package totals\n\n// Total sums.\nfunc Total(items []Item) int {\n\tsum := 0\n\tfor _, item := range items {\n\t\tsum += item.Price\n\t}\n\treturn \n}\n\nfunc Other() int {\n\treturn 1\n}\n",
    "rust": "// totals\nfn total(items: &[Item]) -> u32 {\n    let mut sum = 0;\n    for item in items {\n        sum += item.price;\n    }\n    return \n}\n\nfn other() -> u32 { 1 }\n",
}


@pytest.mark.parametrize("language", sorted(BRACE_SOURCES))
def test_parses_reads_each_language_with_its_grammar(tmp_path: Path, language: str) -> None:
    """A hole inside a function whose closing brace is on its own line: the check parses the
    block with that brace, so a good line parses and a broken one does not."""
    text = BRACE_SOURCES[language]
    lines = text.split("\n")
    row = next(i for i, line in enumerate(lines) if line.strip() == "return")
    snapshot = Document((tmp_path / f"totals.{language}").as_uri(), language, 1, text).snapshot()
    site = build_site(snapshot, Position(row, len(lines[row])), CompletionKind.SINGLE_LINE)
    good = "sum" if language in ("go", "rust") else "sum;"
    assert parses(site, good) and parses(site, "sum + 1;")
    assert not parses(site, "sum)") and not parses(site, "(sum") and not parses(site, "= =")
    assert undefined_names(site, "nowhere_defined") == 0  # names are checked for Python only

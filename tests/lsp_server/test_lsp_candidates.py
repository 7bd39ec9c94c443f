"""Candidates, reranking and abstaining through the real server (scripted engines over stdio).

The scripted model always writes `MODEL`; the scoring engine gives each candidate a per-token
log-likelihood by rule, so these tests decide what the model "believes" and check what the
server shows: the right retrieval candidate over the model's own text, nothing at all when no
candidate is likely, and today's behaviour when the components are off or the engine cannot score.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from lsprotocol import types

from lsp_harness import Session

pytestmark = pytest.mark.asyncio

GEOMETRY = "def centroid(points):\n    return sum(points) / len(points)\n"
APP = "from geometry import centroid\n\n\ndef main(points):\n    center = \n    return center\n"
MODEL = "cent"
LIKELY = -0.05
UNLIKELY = -9.0
WEIGHTS = Path(__file__).parent / "data" / "rerank-weights.json"  # these tests' weights, not the shipped ones
OFF = {"numCandidates": 1, "retrieval": False, "rerank": False, "abstain": False, "constraints": False}


async def _session(
    tmp_path: Path, scores: list[list[object]] | None, options: dict[str, object] | None = None, beside: bool = False,
    refuse: str | None = None,
) -> tuple[Session, str]:
    root = tmp_path / "ws"
    root.mkdir()
    (root / "geometry.py").write_text(GEOMETRY)
    fake: dict[str, object] = {"text": MODEL}
    if scores is not None:
        fake |= {"scores": scores, "score_default": UNLIKELY, "beside": beside, "refuse": refuse}
    settings = {"debounceMs": 0, "rerankWeights": str(WEIGHTS), **(options or {})}
    session = await Session.start_fake(root, fake, settings)
    await session.wait_ready()
    return session, session.create("app.py", APP)


def _texts(answer) -> list[str]:
    return [item.insert_text for item in answer.items]


async def test_reranking_shows_the_likely_retrieval_candidate_over_the_models_text(tmp_path: Path) -> None:
    session, uri = await _session(tmp_path, [["centroid(points)", LIKELY]], {"abstain": False})
    try:
        assert _texts(await session.inline(uri, 4, 13)) == ["centroid(points)"]
    finally:
        assert await session.stop() == 0


@pytest.mark.parametrize("beside", [False, True], ids=["after the decode", "beside the decode"])
async def test_an_engine_scoring_beside_the_decode_gets_the_retrieval_candidates_first_and_each_once(tmp_path: Path, beside: bool) -> None:
    """With an engine that scores beside its decode steps, the retrieval candidates are scored
    while the model decodes and only the model's own after it (the fake refuses a second score of
    one continuation, which would leave the model's text shown): the answer is the same."""
    session, uri = await _session(tmp_path, [["centroid(points)", LIKELY]], {"abstain": False}, beside=beside)
    try:
        assert _texts(await session.inline(uri, 4, 13)) == ["centroid(points)"]
    finally:
        assert await session.stop() == 0
    calls = [line for line in (tmp_path / "ws.log").read_text().splitlines() if "fake scored" in line]
    early = [line for line in calls if "-retrieved-score" in line]
    assert len(early) == beside and len(calls) == 1 + beside
    if beside:
        assert "centroid(points)" in early[0] and "centroid(points)" not in calls[-1]


async def test_retrieval_candidates_whose_scoring_beside_the_decode_failed_are_scored_after_it(tmp_path: Path) -> None:
    session, uri = await _session(tmp_path, [["centroid(points)", LIKELY]], {"abstain": False}, beside=True, refuse="-retrieved")
    try:
        assert _texts(await session.inline(uri, 4, 13)) == ["centroid(points)"]
    finally:
        assert await session.stop() == 0
    calls = [line for line in (tmp_path / "ws.log").read_text().splitlines() if "fake scored" in line]
    assert len(calls) == 3 and "-retrieved-score" in calls[0] and "-again-score" in calls[2]
    assert "centroid(points)" in calls[2] and "centroid(points)" not in calls[1]


def _weights(tmp_path: Path, threshold: float, **changed: float) -> dict[str, object]:
    """The `rerankWeights` setting for these tests' weights at another threshold, with some
    features' weights `changed`."""
    from context.rerank import FEATURES, load_reranker

    base = load_reranker(WEIGHTS)
    weights = tuple(changed.get(name, w) for name, w in zip(FEATURES, base.weights))
    path = tmp_path / f"rerank-{threshold}-{len(changed)}.json"
    path.write_text(type(base)(weights, base.bias, threshold, {"note": "test"}).to_json())
    return {"rerankWeights": str(path)}


async def test_abstains_with_no_item_when_no_candidate_is_likely(tmp_path: Path) -> None:
    """At threshold 0.3 the call candidate could be shown if the model found it likely; it
    scores it unlikely, so the server abstains after scoring."""
    session, uri = await _session(tmp_path, [], _weights(tmp_path, 0.3))
    try:
        assert _texts(await session.inline(uri, 4, 13, automatic=True)) == []
        explained = await session.command("glm5.explainContext", {"uri": uri, "position": {"line": 4, "character": 13}})
        assert explained["abstained"] is True and explained["completion"] == ""
        assert explained["scored"] is True and explained["outOfReach"] is False
        assert {"centroid(points)", MODEL} <= {c["text"] for c in explained["candidates"]}
        assert not any(c["chosen"] for c in explained["candidates"])
    finally:
        assert await session.stop() == 0


async def test_an_explicit_request_shows_the_best_candidate_where_an_automatic_one_abstains(tmp_path: Path) -> None:
    """The same place and weights as above: typing (Automatic) shows nothing and the client's
    status says why, quietly; asking (Invoked, the manual-trigger key) shows the best candidate."""
    session, uri = await _session(tmp_path, [], _weights(tmp_path, 0.3))
    try:
        assert _texts(await session.inline(uri, 4, 13, automatic=True)) == []
        status = await session.wait_for(
            lambda: next((m for m in session.messages("glm5/status") if "nothing shown" in (_get(m, "message") or "")), None), 10, "a status"
        )
        assert _get(status, "state") == "ready" and "threshold" in _get(status, "message")
        assert not session.messages("window/showMessage")  # no pop-up
        shown = _texts(await session.inline(uri, 4, 13, automatic=False))
        assert len(shown) == 1 and shown[0].strip()
        explained = await session.command("glm5.explainContext", {"uri": uri, "position": {"line": 4, "character": 13}, "explicit": True})
        assert explained["abstained"] is False and explained["completion"] == shown[0]
    finally:
        assert await session.stop() == 0


async def test_weights_fitted_for_another_model_are_not_used(tmp_path: Path) -> None:
    """Weights that name another model would abstain here (threshold 0.99); the model in use has
    none fitted, so it shows its own best candidate that passes the checks, unscored."""
    weights = _weights(tmp_path, 0.99)
    path = Path(weights["rerankWeights"])
    raw = json.loads(path.read_text())
    raw["meta"]["model_identity"] = "0123456789abcdef"
    path.write_text(json.dumps(raw))
    session, uri = await _session(tmp_path, [["centroid(points)", LIKELY]], weights)
    try:
        assert _texts(await session.inline(uri, 4, 13, automatic=True)) == [MODEL]
        explained = await session.command("glm5.explainContext", {"uri": uri, "position": {"line": 4, "character": 13}})
        assert explained["reranker"] == {"fitted": False, "why": "no reranker weights were fitted for this model"}
        assert explained["completion"] == MODEL and explained["scored"] is False
    finally:
        assert await session.stop() == 0


def _get(params: object, key: str) -> object:
    return params.get(key) if isinstance(params, dict) else getattr(params, key, None)


async def test_out_of_reach_abstains_without_running_the_model(tmp_path: Path) -> None:
    """With these weights' own threshold no candidate here could be shown even if the model gave it
    probability 1: the answer is empty, the model is not run (no decode step, no generation
    time), and `glm5.explainContext` says so and still runs it to show the candidates."""
    session, uri = await _session(tmp_path, [["centroid(points)", LIKELY]])
    try:
        answer = await asyncio.wrap_future(session.inline_request(uri, 4, 13, msg_id="unreachable"))
        assert _texts(answer) == []
        stats = await session.stats(recent=5)
        record = next(r for r in stats["recent"] if r["request_id"] == "unreachable")
        assert record["outcome"] == "out_of_reach"
        assert record["decode_steps"] == 0 and record["generate_s"] == 0.0 and record["settle_s"] == 0.0
        assert stats["completions"].get("out_of_reach") == 1
        explained = await session.command("glm5.explainContext", {"uri": uri, "position": {"line": 4, "character": 13}})
        assert explained["outOfReach"] is True and explained["abstained"] is True and explained["scored"] is True
        assert explained["reach"]["ceiling"] < explained["reach"]["threshold"] and explained["reach"]["contenders"] == []
        assert {"centroid(points)", MODEL} <= {c["text"] for c in explained["candidates"]}
    finally:
        assert await session.stop() == 0


async def test_with_skip_unreachable_off_the_model_runs_and_the_answer_is_the_same(tmp_path: Path) -> None:
    session, uri = await _session(tmp_path, [["centroid(points)", LIKELY]], {"skipUnreachable": False})
    try:
        answer = await asyncio.wrap_future(session.inline_request(uri, 4, 13, msg_id="always-run"))
        assert _texts(answer) == []
        record = next(r for r in (await session.stats(recent=5))["recent"] if r["request_id"] == "always-run")
        assert record["outcome"] == "empty" and record["decode_steps"] > 0 and record["settle_s"] > 0
        explained = await session.command("glm5.explainContext", {"uri": uri, "position": {"line": 4, "character": 13}})
        assert explained["outOfReach"] is False and explained["reach"] is None and explained["scored"] is True
    finally:
        assert await session.stop() == 0


async def _contender_session(tmp_path: Path, model_text: str, scores: list[list[object]]) -> tuple[Session, str]:
    """These tests' weights with calls worth +2 and threshold 0.9: the model's own text cannot be
    shown (at most ~0.79), and the call candidate only if the model proposes it too (it is the
    one contender)."""
    root = tmp_path / "ws"
    root.mkdir()
    (root / "geometry.py").write_text(GEOMETRY)
    fake = {"text": model_text, "scores": scores, "score_default": UNLIKELY}
    session = await Session.start_fake(root, fake, {"debounceMs": 0, **_weights(tmp_path, 0.9, call=2.0)})
    await session.wait_ready()
    return session, session.create("app.py", APP)


async def _ask(session: Session, uri: str, msg_id: str) -> tuple[list[str], dict]:
    answer = await asyncio.wrap_future(session.inline_request(uri, 4, 13, msg_id=msg_id))
    record = next(r for r in (await session.stats(recent=5))["recent"] if r["request_id"] == msg_id)
    return _texts(answer), record


async def test_an_unlikely_contender_is_scored_and_the_model_not_decoded(tmp_path: Path) -> None:
    session, uri = await _contender_session(tmp_path, "centroid(points)", [])
    try:
        explained = await session.command("glm5.explainContext", {"uri": uri, "position": {"line": 4, "character": 13}})
        assert explained["reach"]["contenders"] == ["centroid(points)"]
        texts, record = await _ask(session, uri, "unlikely")
        assert texts == [] and record["outcome"] == "out_of_reach"
        assert record["decode_steps"] == 0 and record["settle_s"] > 0  # scored, not decoded
    finally:
        assert await session.stop() == 0


async def test_a_likely_contender_the_model_also_proposes_is_shown(tmp_path: Path) -> None:
    session, uri = await _contender_session(tmp_path, "centroid(points)", [["centroid(points)", LIKELY]])
    try:
        texts, record = await _ask(session, uri, "likely")
        assert texts == ["centroid(points)"] and record["outcome"] == "answered" and record["decode_steps"] > 0
    finally:
        assert await session.stop() == 0


async def test_a_contender_certain_whatever_the_model_decodes_is_shown_without_decoding(tmp_path: Path) -> None:
    """Calls worth +4 and threshold 0.85: scored likely, the call candidate reaches the threshold
    even if the model proposed it cut off (its lowest probability), so the server shows it
    without decoding."""
    root = tmp_path / "ws"
    root.mkdir()
    (root / "geometry.py").write_text(GEOMETRY)
    fake = {"text": MODEL, "scores": [["centroid(points)", LIKELY]], "score_default": UNLIKELY}
    session = await Session.start_fake(root, fake, {"debounceMs": 0, **_weights(tmp_path, 0.85, call=4.0)})
    try:
        await session.wait_ready()
        uri = session.create("app.py", APP)
        texts, record = await _ask(session, uri, "certain")
        assert texts == ["centroid(points)"] and record["outcome"] == "answered"
        assert record["decode_steps"] == 0 and record["settle_s"] > 0
    finally:
        assert await session.stop() == 0


async def test_a_likely_contender_the_model_does_not_propose_is_not_shown(tmp_path: Path) -> None:
    """The same likely candidate, but the model writes something else: the decode ran, and the
    reranker (which would need the model's vote) abstains, as the full pipeline does."""
    session, uri = await _contender_session(tmp_path, MODEL, [["centroid(points)", LIKELY]])
    try:
        texts, record = await _ask(session, uri, "alone")
        assert texts == [] and record["outcome"] == "empty" and record["decode_steps"] > 0
        session.client.workspace_did_change_configuration(types.DidChangeConfigurationParams(settings={"glm5": {"skipUnreachable": False}}))
        explained = await session.command("glm5.explainContext", {"uri": uri, "position": {"line": 4, "character": 13}})
        assert explained["abstained"] is True and explained["scored"] is True
    finally:
        assert await session.stop() == 0


async def test_explain_reports_candidates_scores_and_the_constraint(tmp_path: Path) -> None:
    session, uri = await _session(tmp_path, [["centroid(points)", LIKELY]], {"abstain": False})
    try:
        explained = await session.command("glm5.explainContext", {"uri": uri, "position": {"line": 4, "character": 13}})
        by_text = {c["text"]: c for c in explained["candidates"]}
        right = by_text["centroid(points)"]
        assert right["chosen"] and "call" in right["sources"] and right["modelRank"] is None
        assert by_text[MODEL]["modelRank"] == 0 and by_text[MODEL]["sources"] == ["model"]
        assert right["score"] > by_text[MODEL]["score"]
        assert right["features"]["parses"] == 1.0 and right["features"]["undefined"] == 0.0
        constraint = explained["constraint"]
        assert constraint["singleLine"] is True and constraint["openBrackets"] == ""
        assert constraint["definedNames"] > 0 and "centroid" not in constraint["memberScopes"]
        assert "prompt" in explained  # what the model saw is still there
    finally:
        assert await session.stop() == 0


async def test_components_off_show_the_models_text_as_today(tmp_path: Path) -> None:
    session, uri = await _session(tmp_path, [], OFF)
    try:
        assert _texts(await session.inline(uri, 4, 13)) == [MODEL]
    finally:
        assert await session.stop() == 0


async def test_an_engine_that_cannot_score_shows_the_models_text(tmp_path: Path) -> None:
    session, uri = await _session(tmp_path, None)
    try:
        assert _texts(await session.inline(uri, 4, 13)) == [MODEL]
        explained = await session.command("glm5.explainContext", {"uri": uri, "position": {"line": 4, "character": 13}})
        assert explained["scored"] is False and explained["completion"] == MODEL
    finally:
        assert await session.stop() == 0


async def test_stats_break_a_completion_into_its_phases(tmp_path: Path) -> None:
    """`glm5.stats` records where one completion's time went: the engine's generation (4 decode
    steps of 50 ms here) apart from scoring and deciding (a 300 ms scoring call)."""
    root = tmp_path / "ws"
    root.mkdir()
    (root / "geometry.py").write_text(GEOMETRY)
    fake = {"text": MODEL, "scores": [["centroid(points)", LIKELY]], "score_default": UNLIKELY, "step_s": 0.05, "score_s": 0.3}
    session = await Session.start_fake(root, fake, {"debounceMs": 0, "abstain": False, "rerankWeights": str(WEIGHTS)})
    try:
        await session.wait_ready()
        uri = session.create("app.py", APP)
        answer = await asyncio.wrap_future(session.inline_request(uri, 4, 13, msg_id="phased"))
        assert _texts(answer) == ["centroid(points)"]
        record = next(r for r in (await session.stats(recent=5))["recent"] if r["request_id"] == "phased")
        assert record["decode_steps"] >= len(MODEL)
        assert record["generate_s"] >= 0.05 * len(MODEL)
        assert 0.3 <= record["settle_s"] < record["total_s"]
        assert 0 < record["plan_s"] <= record["prepare_s"]
        assert record["prepare_s"] + record["generate_s"] + record["settle_s"] <= record["total_s"]
    finally:
        assert await session.stop() == 0


async def test_rerank_weights_setting_takes_a_weights_file_fitted_for_the_model(tmp_path: Path) -> None:
    """These tests' threshold abstains; the same weights with threshold 0 in a file of the user's
    show the likely candidate; a file that is not reranker weights is refused with a message and
    the previous weights stay."""
    from context.rerank import load_reranker

    base = load_reranker(WEIGHTS)
    showing = tmp_path / "rerank-showing.json"
    showing.write_text(type(base)(base.weights, base.bias, 0.0, {"note": "test"}).to_json())
    broken = tmp_path / "broken.json"
    broken.write_text('{"features": ["mean_logprob"], "weights": [1.0]}')
    session, uri = await _session(tmp_path, [["centroid(points)", LIKELY]])
    try:
        assert _texts(await session.inline(uri, 4, 13, automatic=True)) == []
        session.client.workspace_did_change_configuration(types.DidChangeConfigurationParams(settings={"glm5": {"rerankWeights": str(showing)}}))
        assert _texts(await session.inline(uri, 4, 13, automatic=True)) == ["centroid(points)"]
        session.client.workspace_did_change_configuration(types.DidChangeConfigurationParams(settings={"glm5": {"rerankWeights": str(broken)}}))
        warning = await session.wait_for(
            lambda: next((m.message for m in session.messages("window/showMessage") if "rerankWeights" in m.message), None), 10, "a warning"
        )
        assert "broken.json" in warning and "expected" in warning
        assert _texts(await session.inline(uri, 4, 13, automatic=True)) == ["centroid(points)"]
    finally:
        assert await session.stop() == 0


async def test_explain_reports_retrievals_evidence_for_its_candidates(tmp_path: Path) -> None:
    """Similar-line candidates reach the reranker with their evidence: exactly one is the
    baseline's answer (`similar_top`: the nearest of the equally good matches, followed by
    `title`), each has its match's similarity, and a line that two matches are followed by has
    more support than one followed by a single match."""
    session, _ = await _session(tmp_path, [], {"abstain": False})
    text = (
        'def a(config):\n    name = config.get("name")\n    size = config.get("size")\n\n\n'
        'def b(config):\n    name = config.get("name")\n    size = config.get("size")\n\n\n'
        'def c(config):\n    name = config.get("name")\n    title = config.get("title")\n\n\n'
        'def d(config):\n    name = config.get("name")\n\n'
    )
    uri = session.create("settings.py", text)
    try:
        explained = await session.command("glm5.explainContext", {"uri": uri, "position": {"line": 17, "character": 0}})
        similar = {c["text"]: c["features"] for c in explained["candidates"] if "similar-line" in c["sources"]}
        size, title = similar['    size = config.get("size")'], similar['    title = config.get("title")']
        assert [f["similar_top"] for f in similar.values()].count(1.0) == 1 and title["similar_top"] == 1.0
        assert size["similarity"] == title["similarity"] == 1.0
        assert size["support"] > title["support"] > 0.0
        others = [c["features"] for c in explained["candidates"] if "similar-line" not in c["sources"]]
        assert all(f["similar_top"] == 0.0 and f["similarity"] == 0.0 for f in others)
    finally:
        assert await session.stop() == 0


@pytest.mark.parametrize("model_text", [MODEL, "centroid(points)"])
@pytest.mark.parametrize("likely", [False, True])
async def test_skipping_never_changes_the_answer(tmp_path: Path, model_text: str, likely: bool) -> None:
    """For each threshold and weights, the answer with `skipUnreachable` on equals the full
    pipeline's (off), whatever the model writes and however likely it finds the call."""
    root = tmp_path / "ws"
    root.mkdir()
    (root / "geometry.py").write_text(GEOMETRY)
    fake = {"text": model_text, "scores": [["centroid(points)", LIKELY]] if likely else [], "score_default": UNLIKELY}
    session = await Session.start_fake(root, fake, {"debounceMs": 0, "cacheSize": 0})
    try:
        await session.wait_ready()
        uri = session.create("app.py", APP)
        shown = set()
        for threshold, changed in (
            (0.5, {}), (0.7, {}), (0.976, {}), (0.9, {"call": 2.0}), (0.85, {"call": 4.0}), (0.97, {"call": 4.0, "model_top": 2.0}),
        ):
            weights = _weights(tmp_path, threshold, **changed)
            answers = []
            for skip in (True, False):
                session.client.workspace_did_change_configuration(
                    types.DidChangeConfigurationParams(settings={"glm5": {**weights, "skipUnreachable": skip}})
                )
                answers.append(_texts(await session.inline(uri, 4, 13, automatic=True)))
            assert answers[0] == answers[1], (threshold, changed)
            shown.update(map(tuple, answers))
        if likely:  # some weights show a candidate and some do not
            assert len(shown) == 2
    finally:
        assert await session.stop() == 0

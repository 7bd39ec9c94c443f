"""A scripted engine that also scores continuations (`EngineProtocol.score`), for candidate tests.

Each continuation is decoded (special tokens dropped) and gets a per-token log-probability from
the first rule whose substring it contains, else `default`; the total is that times its length.
Scoring may be slowed down with `score_s` (seconds per call). With `beside`, the engine says it
scores beside its decode steps (`scores_beside_steps`, as the in-process engine does) and refuses
(RuntimeError) to score one continuation of one prompt twice; with `refuse`, it refuses (RuntimeError)
every call whose request id contains that text; every call is logged.
"""

from __future__ import annotations

import logging
import time

from lsp_fakes import FakeEngine, Script

from model_runtime.api import ContinuationScore, ScoreRequest
from model_runtime.tokenizer import GlmTokenizer

log = logging.getLogger(__name__)

class ScoringFakeEngine(FakeEngine):
    def __init__(
        self, tokenizer: GlmTokenizer, script: Script, rules: list[tuple[str, float]], default: float, step_s: float = 0.0, store_s: float = 0.0,
        score_s: float = 0.0, beside: bool = False, refuse: str | None = None,
    ) -> None:
        super().__init__(tokenizer, script, step_s, store_s)
        self.rules = rules
        self.default = default
        self.score_s = score_s
        self.scores_beside_steps = beside
        self.refuse = refuse
        self.scored: list[ScoreRequest] = []

    def score(self, request: ScoreRequest, timeout: float = 30.0) -> list[ContinuationScore]:
        log.info("fake scored %s: %s", request.request_id, [self.tokenizer.decode(list(c)) for c in request.continuations])
        if self.refuse is not None and self.refuse in request.request_id:
            raise RuntimeError(f"refused {request.request_id}")
        done = {(r.prompt_ids, c) for r in self.scored for c in r.continuations}
        if self.scores_beside_steps and any((request.prompt_ids, c) in done for c in request.continuations):
            raise RuntimeError("a continuation scored twice")
        self.scored.append(request)
        time.sleep(self.score_s)
        found = []
        for ids in request.continuations:
            text = self.tokenizer.decode(list(ids))
            per_token = next((lp for needle, lp in self.rules if needle in text), self.default)
            found.append(ContinuationScore(per_token * len(ids), len(ids), (per_token,) * len(ids)))
        return found

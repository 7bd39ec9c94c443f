"""A scripted engine that also scores continuations (`EngineProtocol.score`), for candidate tests.

Each continuation is decoded (special tokens dropped) and gets a per-token log-probability from
the first rule whose substring it contains, else `default`; the total is that times its length.
Scoring may be slowed down with `score_s` (seconds per call).
"""

from __future__ import annotations

import time

from lsp_fakes import FakeEngine, Script

from model_runtime.api import ContinuationScore, ScoreRequest
from model_runtime.tokenizer import GlmTokenizer


class ScoringFakeEngine(FakeEngine):
    def __init__(
        self, tokenizer: GlmTokenizer, script: Script, rules: list[tuple[str, float]], default: float, step_s: float = 0.0, store_s: float = 0.0,
        score_s: float = 0.0,
    ) -> None:
        super().__init__(tokenizer, script, step_s, store_s)
        self.rules = rules
        self.default = default
        self.score_s = score_s
        self.scored: list[ScoreRequest] = []

    def score(self, request: ScoreRequest, timeout: float = 30.0) -> list[ContinuationScore]:
        self.scored.append(request)
        time.sleep(self.score_s)
        found = []
        for ids in request.continuations:
            text = self.tokenizer.decode(list(ids))
            per_token = next((lp for needle, lp in self.rules if needle in text), self.default)
            found.append(ContinuationScore(per_token * len(ids), len(ids), (per_token,) * len(ids)))
        return found

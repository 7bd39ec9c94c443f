"""Local statistics: completion outcomes, latencies, prefill accounting and user telemetry.

Role: the numbers behind `glm5.stats` (and the typing benchmark). Nothing leaves the machine:
shown/accepted/rejected counts come from the client's `glm5/did*Completion` notifications
and are only reported back through `glm5.stats`.

Invariants: bounded memory (the latest `keep` request records); percentiles are computed
over those records with the nearest-rank method.
"""

from __future__ import annotations

import math
import time
from collections import Counter, deque
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass


@dataclass(frozen=True, slots=True)
class RequestRecord:
    """One completion request as the server saw it."""

    request_id: str
    uri: str
    outcome: str  # answered | empty | out_of_reach | cache_hit | superseded | stale | cancelled | failed
    kind: str = ""  # empty | single_line | multi_line
    first_text_s: float | None = None  # request received -> first streamed text
    total_s: float = 0.0  # request received -> answer
    prepare_s: float = 0.0  # building the prompt (snippets, budget, tokenizing) and the plan
    plan_s: float = 0.0  # of which the plan: the cursor's site, the constraint, retrieval
    generate_s: float = 0.0  # the engine's generation: prefill and decode of every candidate
    settle_s: float = 0.0  # scoring the candidates in one forward, reranking, deciding
    prompt_tokens: int = 0
    cached_tokens: int = 0
    prefilled_tokens: int = 0
    decode_steps: int = 0
    generated_tokens: int = 0


TELEMETRY_EVENTS = ("shown", "accepted", "rejected")


class ServerStats:
    def __init__(self, keep: int = 2000) -> None:
        self.records: deque[RequestRecord] = deque(maxlen=keep)
        self.outcomes: Counter[str] = Counter()
        self.telemetry: Counter[str] = Counter()
        self.telemetry_ids: dict[str, deque[str]] = {e: deque(maxlen=keep) for e in TELEMETRY_EVENTS}
        self.startup_ms: dict[str, float] = {}  # start-up phase -> milliseconds

    def startup_began(self) -> float:
        self.startup_ms.clear()
        return time.perf_counter()

    def startup_ended(self, began: float) -> None:
        self.startup_ms["ready"] = round((time.perf_counter() - began) * 1000, 1)

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Time one start-up phase (recorded even when it fails)."""
        began = time.perf_counter()
        try:
            yield
        finally:
            self.startup_ms[name] = round((time.perf_counter() - began) * 1000, 1)

    def record(self, record: RequestRecord) -> None:
        self.records.append(record)
        self.outcomes[record.outcome] += 1

    def telemetry_event(self, event: str, completion_id: str) -> None:
        """Count `event` once per completion (a client may report it by command and notification)."""
        seen = self.telemetry_ids[event]
        if completion_id in seen:
            return
        self.telemetry[event] += 1
        seen.append(completion_id)

    def summary(self, recent: int = 0) -> dict[str, object]:
        done = [r for r in self.records if r.outcome in ("answered", "empty", "out_of_reach", "cache_hit")]
        engine = [r for r in done if r.outcome not in ("cache_hit", "out_of_reach")]
        return {
            "completions": dict(self.outcomes),
            "telemetry": {e: self.telemetry[e] for e in TELEMETRY_EVENTS},
            "latency_ms": {
                "first_text": _percentiles([r.first_text_s for r in engine if r.first_text_s is not None]),
                "total": _percentiles([r.total_s for r in done]),
            },
            "prefill": {
                "requests": len(engine),
                "prompt_tokens": sum(r.prompt_tokens for r in engine),
                "cached_tokens": sum(r.cached_tokens for r in engine),
                "prefilled_tokens": sum(r.prefilled_tokens for r in engine),
                "decode_steps": sum(r.decode_steps for r in engine),
            },
            "startup_ms": dict(self.startup_ms),
            "recent": [asdict(r) for r in list(self.records)[-recent:]] if recent > 0 else [],
        }


def _percentiles(seconds: list[float]) -> dict[str, float | int | None]:
    if not seconds:
        return {"count": 0, "p50": None, "p95": None}
    ordered = sorted(seconds)

    def rank(p: float) -> float:
        return round(ordered[max(0, math.ceil(p * len(ordered)) - 1)] * 1000, 2)

    return {"count": len(ordered), "p50": rank(0.5), "p95": rank(0.95)}

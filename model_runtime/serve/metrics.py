"""`/metrics`: the daemon's counters in the Prometheus text exposition format (version 0.0.4).

Role: engine counters (requests, decode steps, prefill and cached tokens, MTP drafts), requests
running now, the KV cache tiers' gauges and HTTP requests by endpoint and status.

Invariant: every metric has HELP and TYPE lines; names are `glm5_*`, counters end in `_total`.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from model_runtime.serve.service import EngineService

_ENGINE_HELP = {
    "requests_submitted": "requests submitted to the engine",
    "requests_finished": "requests that ended (stop, length or error)",
    "requests_aborted": "requests aborted (client cancel or disconnect)",
    "decode_steps": "engine steps that decoded at least one sequence",
    "prefill_tokens": "prompt tokens run through the model",
    "cached_prompt_tokens": "prompt tokens whose KV came from the prefix cache",
    "generated_tokens": "tokens generated",
    "spec_drafted": "MTP draft tokens proposed",
    "spec_accepted": "MTP draft tokens accepted",
}


def render_metrics(service: EngineService, cache: dict[str, int]) -> str:
    lines: list[str] = []

    def metric(name: str, kind: str, help_text: str, samples: list[tuple[str, float]]) -> None:
        lines.extend([f"# HELP {name} {help_text}", f"# TYPE {name} {kind}"])
        lines.extend(f"{name}{labels} {value}" for labels, value in samples)

    for key, value in asdict(service.engine.stats()).items():
        metric(f"glm5_{key}_total", "counter", _ENGINE_HELP.get(key, key.replace("_", " ")), [("", value)])
    metric("glm5_requests_running", "gauge", "requests being generated now", [("", service.running)])
    for key, value in sorted(cache.items()):
        metric(f"glm5_kv_{key}", "gauge", f"KV cache tiers: {key.replace('_', ' ')}", [("", value)])
    metric("glm5_http_requests_total", "counter", "HTTP requests answered, by endpoint and status",
           [(f"{{{labels}}}", count) for labels, count in sorted(service.http.items())] or [("", 0)])
    return "\n".join(lines) + "\n"

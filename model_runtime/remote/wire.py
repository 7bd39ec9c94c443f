"""The OpenAI completions wire format, as vLLM, SGLang and `glm5-serve` speak it (pure functions).

Role: build a `/v1/completions` body from a `GenerationRequest`, and read what comes back:
text deltas, finish reasons, `usage` (with `prompt_tokens_details.cached_tokens` when the
server reports it) and the server's model card.

Invariants:
- No `suffix` field ever: vLLM answers 400 to it and SGLang needs a completion template.
  The FIM prompt is already in the prompt (token ids, or text when the endpoint refuses ids).
- `max_tokens` is always sent (tight), so an endpoint that keeps decoding after a disconnect
  stops soon. Constraints and n-best are not sent (the endpoints' grammars differ).
- A chunk or body that lacks `choices` raises `ProtocolViolation`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from model_runtime.api import FinishReason, GenerationRequest
from model_runtime.remote.errors import ProtocolViolation

_FINISH = {"stop": FinishReason.STOP, "length": FinishReason.LENGTH, "abort": FinishReason.ABORT, "eos": FinishReason.STOP}


@dataclass(frozen=True, slots=True)
class ModelCard:
    """What `GET /v1/models` says about the served model."""

    name: str
    max_model_len: int | None
    owned_by: str

    @property
    def is_glm5_daemon(self) -> bool:
        """`glm5-serve` also offers warm-up, prefill and the persisted KV store (`/glm5/*`)."""
        return self.owned_by == "glm5-lsp"


@dataclass(slots=True)
class Usage:
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0


def completion_body(
    request: GenerationRequest, model: str, prompt: list[int] | str, stream: bool, stop_token_ids: tuple[int, ...] = (),
) -> dict[str, Any]:
    sampling = request.sampling
    body: dict[str, Any] = {
        "model": model,
        "prompt": prompt,
        "max_tokens": max(1, sampling.max_tokens),
        "temperature": sampling.temperature,
        "top_p": sampling.top_p,
        "stream": stream,
    }
    if stream:
        body["stream_options"] = {"include_usage": True}
    if sampling.stop_strings:
        body["stop"] = list(sampling.stop_strings)
    stops = list(dict.fromkeys((*sampling.stop_token_ids, *stop_token_ids)))
    if stops:
        body["stop_token_ids"] = stops
    if sampling.top_k:
        body["top_k"] = sampling.top_k
    if sampling.seed is not None:
        body["seed"] = sampling.seed
    if isinstance(prompt, str):
        body["add_special_tokens"] = False  # the prompt already holds [gMASK]<sop> and the FIM tokens
    return body


def model_card(body: Any, wanted: str | None) -> ModelCard:
    """The card of `wanted` (or of the first served model) from a `/v1/models` body."""
    data = body.get("data") if isinstance(body, dict) else None
    if not isinstance(data, list) or not data or not all(isinstance(m, dict) and isinstance(m.get("id"), str) for m in data):
        raise ProtocolViolation(f"GET /v1/models: expected {{'data': [{{'id': ...}}, ...]}}, got {str(body)[:120]}")
    names = [m["id"] for m in data]
    if wanted is not None and wanted not in names:
        raise ProtocolViolation(f"the engine does not serve model {wanted!r}; it serves {', '.join(names)}")
    card = next(m for m in data if wanted is None or m["id"] == wanted)
    length = card.get("max_model_len")
    return ModelCard(card["id"], length if isinstance(length, int) and length > 0 else None, str(card.get("owned_by", "")))


def choice_of(chunk: dict[str, Any]) -> dict[str, Any] | None:
    """The first choice of a chunk (None for the usage-only chunk that ends a stream)."""
    choices = chunk.get("choices")
    if not isinstance(choices, list):
        raise ProtocolViolation(f"a completion chunk without 'choices': {str(chunk)[:120]}")
    if not choices:
        return None
    choice = choices[0]
    if not isinstance(choice, dict) or not isinstance(choice.get("text", ""), str):
        raise ProtocolViolation(f"a completion choice without text: {str(choice)[:120]}")
    return choice


def finish_reason(value: Any) -> FinishReason | None:
    if value is None:
        return None
    return _FINISH.get(str(value), FinishReason.STOP)


def usage_of(chunk: dict[str, Any], usage: Usage) -> None:
    """Update `usage` from a chunk's `usage` (vLLM and SGLang send it in the last chunk)."""
    raw = chunk.get("usage")
    if not isinstance(raw, dict):
        return
    usage.prompt_tokens = _int(raw.get("prompt_tokens"), usage.prompt_tokens)
    usage.completion_tokens = _int(raw.get("completion_tokens"), usage.completion_tokens)
    details = raw.get("prompt_tokens_details")
    if isinstance(details, dict):
        usage.cached_tokens = _int(details.get("cached_tokens"), usage.cached_tokens)


def token_logprobs(choice: dict[str, Any]) -> list[float | None]:
    """`logprobs.token_logprobs` of a choice (legacy completions format), or a ProtocolViolation."""
    logprobs = choice.get("logprobs")
    values = logprobs.get("token_logprobs") if isinstance(logprobs, dict) else None
    if not isinstance(values, list):
        raise ProtocolViolation("the engine returned no logprobs.token_logprobs")
    return values


def _int(value: Any, default: int) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else default

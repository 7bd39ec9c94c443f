"""The OpenAI completions request and response shapes served by `glm5-serve` (as vLLM serves them).

Role: validate a `/v1/completions` body into `CompletionParams` (raising `ApiError` with the
status, type and parameter, like vLLM), and build the JSON of answers, stream chunks and errors.

Invariants:
- Bad input is a 4xx `ApiError` naming the parameter; nothing is half-accepted.
- `suffix` is refused (400) like vLLM does: clients put FIM markers in the prompt.
- Only `n == 1` and `best_of` unset are accepted; a stream carries one prompt.
- One field beyond the OpenAI shape: `max_decode_ms`, the decode budget from the first token
  (`SamplingParams.max_decode_ms`), which the language server's remote engine sends so that a
  request past its budget ends here with `length` instead of being cut and aborted.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from model_runtime.api import FinishReason, GenerationResult, SamplingParams

MAX_LOGPROBS = 20


class ApiError(Exception):
    def __init__(self, message: str, status: int = 400, param: str | None = None, kind: str = "BadRequestError") -> None:
        super().__init__(message)
        self.message, self.status, self.param, self.kind = message, status, param, kind

    def body(self) -> dict[str, Any]:
        return error_body(self.message, self.kind, self.status, self.param)


def error_body(message: str, kind: str, status: int, param: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "param": param, "code": status}}


@dataclass(frozen=True, slots=True)
class CompletionParams:
    model: str
    prompts: list[str | list[int]]
    sampling: SamplingParams
    stream: bool
    include_usage: bool
    logprobs: int | None
    echo: bool


def parse_completion(body: Any, served: str) -> CompletionParams:
    if not isinstance(body, Mapping):
        raise ApiError("the request body must be a JSON object")
    model = body.get("model", served)
    if model != served:
        raise ApiError(f"The model `{model}` does not exist.", 404, "model", "NotFoundError")
    if body.get("suffix") is not None:
        raise ApiError("suffix is not supported: put the fill-in-the-middle markers in the prompt", param="suffix")
    if body.get("n", 1) != 1 or body.get("best_of") not in (None, 1):
        raise ApiError("only n = 1 is supported", param="n")
    prompts = _prompts(body.get("prompt"))
    stream = _bool(body, "stream", False)
    if stream and len(prompts) != 1:
        raise ApiError("a streamed request takes one prompt", param="prompt")
    options = body.get("stream_options") or {}
    if not isinstance(options, Mapping):
        raise ApiError("stream_options must be an object", param="stream_options")
    logprobs = body.get("logprobs")
    if logprobs is not None and (not _is_int(logprobs) or not 0 <= logprobs <= MAX_LOGPROBS):
        raise ApiError(f"logprobs must be an integer in 0..{MAX_LOGPROBS}", param="logprobs")
    return CompletionParams(
        model=served, prompts=prompts, sampling=_sampling(body), stream=stream,
        include_usage=bool(options.get("include_usage", False)), logprobs=logprobs, echo=_bool(body, "echo", False),
    )


def _prompts(prompt: Any) -> list[str | list[int]]:
    if isinstance(prompt, str):
        return [prompt]
    if isinstance(prompt, list) and prompt and all(_is_int(t) for t in prompt):
        return [list(prompt)]
    if isinstance(prompt, list) and prompt and all(isinstance(p, str) or (isinstance(p, list) and p and all(_is_int(t) for t in p)) for p in prompt):
        return list(prompt)
    raise ApiError("prompt must be a string, a list of token ids, or a non-empty list of either", param="prompt")


def _sampling(body: Mapping[str, Any]) -> SamplingParams:
    stop = body.get("stop") or []
    stop = [stop] if isinstance(stop, str) else stop
    if not isinstance(stop, list) or not all(isinstance(s, str) and s for s in stop) or len(stop) > 16:
        raise ApiError("stop must be a string or a list of at most 16 non-empty strings", param="stop")
    stop_ids = body.get("stop_token_ids") or []
    if not isinstance(stop_ids, list) or not all(_is_int(t) for t in stop_ids):
        raise ApiError("stop_token_ids must be a list of integers", param="stop_token_ids")
    max_tokens = body.get("max_tokens", 16)
    if not _is_int(max_tokens) or max_tokens < 0:
        raise ApiError("max_tokens must be a non-negative integer", param="max_tokens")
    seed = body.get("seed")
    if seed is not None and not _is_int(seed):
        raise ApiError("seed must be an integer", param="seed")
    try:
        return SamplingParams(
            max_tokens=max_tokens, temperature=_number(body, "temperature", 1.0), top_p=_number(body, "top_p", 1.0),
            top_k=max(0, int(_number(body, "top_k", 0))), seed=seed, stop_token_ids=tuple(stop_ids), stop_strings=tuple(stop),
            max_decode_ms=_number(body, "max_decode_ms", 0.0),
        )
    except ValueError as exc:
        raise ApiError(str(exc)) from exc


def _number(body: Mapping[str, Any], key: str, default: float) -> float:
    value = body.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ApiError(f"{key} must be a number", param=key)
    return float(value)


def _bool(body: Mapping[str, Any], key: str, default: bool) -> bool:
    value = body.get(key, default)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise ApiError(f"{key} must be true or false", param=key)
    return value


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


# ---- answers -----------------------------------------------------------------------------
def finish_name(reason: FinishReason | None) -> str | None:
    if reason is None:
        return None
    return {FinishReason.STOP: "stop", FinishReason.LENGTH: "length", FinishReason.ABORT: "abort"}.get(reason, "error")


def usage(results: list[GenerationResult]) -> dict[str, Any]:
    prompt = sum(r.prompt_tokens for r in results)
    completion = sum(len(r.token_ids) for r in results)
    return {
        "prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": sum(r.cached_tokens for r in results)},
    }


def completion(rid: str, created: int, model: str, choices: list[dict[str, Any]], usage_body: dict[str, Any] | None) -> dict[str, Any]:
    return {"id": rid, "object": "text_completion", "created": created, "model": model, "choices": choices, "usage": usage_body}


def choice(index: int, text: str, reason: FinishReason | None, logprobs: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"index": index, "text": text, "logprobs": logprobs, "finish_reason": finish_name(reason), "stop_reason": None}

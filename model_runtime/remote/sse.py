"""Server-sent events of an OpenAI-compatible streaming completion, parsed strictly.

Role: turn the lines of a `text/event-stream` body into the JSON chunks it carries, stopping at
`data: [DONE]`.

Invariants:
- Every `data:` payload other than `[DONE]` must be a JSON object; anything else raises
  `ProtocolViolation` at once (never a hang, never a silent skip).
- Comment lines (`:`) and the `event`/`id`/`retry` fields are allowed and ignored; any other
  line is a protocol violation (an HTML error page or a proxy's banner is not an event stream).
- The caller bounds the wait for the next line in time; this module only parses.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

from model_runtime.remote.errors import ProtocolViolation

DONE = "[DONE]"
_IGNORED_FIELDS = ("event", "id", "retry")


async def events(lines: AsyncIterator[str]) -> AsyncIterator[dict[str, Any] | None]:
    """The JSON chunks of the stream; a final `None` marks `[DONE]` (absent if the stream was cut)."""
    data: list[str] = []
    async for line in lines:
        if line == "":
            if data:
                chunk = _decode("\n".join(data))
                data = []
                yield chunk
                if chunk is None:
                    return
            continue
        if line.startswith(":"):
            continue
        field, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if field == "data":
            data.append(value)
        elif field not in _IGNORED_FIELDS:
            raise ProtocolViolation(f"malformed event stream from the engine: unexpected line {line[:80]!r}")
    if data:  # the last event lacked its blank line: still dispatch it
        yield _decode("\n".join(data))


def _decode(payload: str) -> dict[str, Any] | None:
    if payload.strip() == DONE:
        return None
    try:
        value = json.loads(payload)
    except json.JSONDecodeError as exc:
        raise ProtocolViolation(f"malformed event stream from the engine: data is not JSON ({exc.msg}): {payload[:80]!r}") from exc
    if not isinstance(value, dict):
        raise ProtocolViolation(f"malformed event stream from the engine: expected a JSON object, got {payload[:80]!r}")
    if "error" in value and "choices" not in value:
        raise ProtocolViolation(f"the engine reported an error mid-stream: {error_text(value)}")
    return value


def error_text(body: Any) -> str:
    """The message of an OpenAI/vLLM/SGLang error body (`{"error": {...}}` or `{"message": ...}`)."""
    if isinstance(body, dict):
        error = body.get("error", body)
        if isinstance(error, dict):
            return str(error.get("message") or error)
        if isinstance(error, str):
            return error
    return str(body)[:200]

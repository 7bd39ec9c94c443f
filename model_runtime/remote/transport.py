"""HTTP to an OpenAI-compatible endpoint: auth, retries on 429/503, typed errors, SSE streams.

Role: `Endpoint` sends JSON requests with httpx and returns JSON bodies, or the chunks of an
SSE stream. It is the only module here that knows HTTP.

Invariants:
- 429 and 503 are retried (at most `MAX_RETRIES` times) after the server's `Retry-After`
  (seconds or an HTTP date) or an exponential backoff, never past the caller's deadline.
- 401/403 raise `AuthError` naming the env var of the key; connection failures raise
  `EndpointUnavailable` naming the URL; other error statuses raise `RequestRejected` with the
  server's own message. The key is sent only in the Authorization header and never logged.
- TLS trusts `caBundle`, else `SSL_CERT_FILE`, else the system store; proxies come from the
  standard environment variables (httpx `trust_env`).
- Leaving a `stream()` block early (cancellation) closes the connection.
- A stream that, once it has begun, sends nothing for `idleTimeoutMs` (a stopped vLLM keeps its
  connections open and silent) is dropped with `EndpointUnavailable`, well before the request's
  own bound. Its first line (after the prefill, or a queue on a busy engine) has the whole bound.
"""

from __future__ import annotations

import asyncio
import email.utils
import json
import logging
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx

from model_runtime.remote.config import RemoteConfig
from model_runtime.remote.daemon_files import token_file_for
from model_runtime.remote.errors import (
    AuthError, EndpointUnavailable, ProtocolViolation, RequestRejected, RequestTimeout,
)
from model_runtime.remote.sse import error_text, events

log = logging.getLogger(__name__)

MAX_RETRIES = 4
BACKOFF_S = 0.1  # first retry delay without Retry-After; doubles each time
MAX_BACKOFF_S = 2.0
RETRY_STATUSES = (429, 503)


class Endpoint:
    """One OpenAI-compatible server. Create and use it on a single event loop."""

    def __init__(self, config: RemoteConfig) -> None:
        self.config = config
        self.retries = 0  # 429/503 answers retried, for stats
        self._client = httpx.AsyncClient(
            base_url=config.base_url, verify=config.verify(), trust_env=True,
            timeout=httpx.Timeout(config.timeout_ms / 1000), limits=httpx.Limits(max_connections=config.max_concurrency + 2),
        )

    async def close(self) -> None:
        await self._client.aclose()

    async def get(self, path: str, deadline: float) -> Any:
        async with self._send("GET", path, None, deadline) as response:
            return await self._json_body(response)

    async def post(self, path: str, body: dict[str, Any], deadline: float, headers: dict[str, str] | None = None) -> Any:
        async with self._send("POST", path, body, deadline, headers=headers) as response:
            return await self._json_body(response)

    @asynccontextmanager
    async def stream(self, path: str, body: dict[str, Any], deadline: float) -> AsyncIterator[AsyncIterator[dict[str, Any] | None]]:
        """The chunks of a streaming POST (a final None for `[DONE]`). A JSON answer (a server that
        ignored `stream`) is yielded as one chunk followed by None."""
        async with self._send("POST", path, body, deadline) as response:
            kind = response.headers.get("content-type", "")
            if kind.startswith("text/event-stream"):
                yield events(self._lines(response))
            elif kind.startswith("application/json"):
                yield _single(await self._json_body(response))
            else:
                raise ProtocolViolation(f"the engine answered a stream with content-type {kind or 'none'!r}, not text/event-stream")

    @asynccontextmanager
    async def _send(
        self, method: str, path: str, body: dict[str, Any] | None, deadline: float, headers: dict[str, str] | None = None,
    ) -> AsyncIterator[httpx.Response]:
        for attempt in range(MAX_RETRIES + 1):
            response = await self._open(method, path, body, deadline, headers or {})
            if response.status_code in RETRY_STATUSES and attempt < MAX_RETRIES:
                delay = retry_delay(response.headers.get("retry-after"), attempt)
                await response.aclose()
                if time.monotonic() + delay >= deadline:
                    raise EndpointUnavailable(
                        f"the engine at {self.config.base_url} is busy (HTTP {response.status_code}) and asks to retry "
                        f"after {delay:.1f} s, past this request's time bound ({self.config.timeout_ms} ms)"
                    )
                self.retries += 1
                log.info("engine busy (HTTP %d): retry %d in %.2f s", response.status_code, attempt + 1, delay)
                await asyncio.sleep(delay)
                continue
            try:
                if response.status_code >= 400:
                    await self._raise_for(response)
                yield response
            finally:
                await response.aclose()
            return

    async def _open(
        self, method: str, path: str, body: dict[str, Any] | None, deadline: float, headers: dict[str, str],
    ) -> httpx.Response:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise RequestTimeout(f"the engine at {self.config.base_url} did not answer within {self.config.timeout_ms} ms")
        request = self._client.build_request(
            method, path, json=body, headers={**self._headers(), **headers}, timeout=httpx.Timeout(remaining),
        )
        try:
            return await self._client.send(request, stream=True)
        except httpx.TimeoutException as exc:
            raise RequestTimeout(f"the engine at {self.config.base_url} did not answer within {self.config.timeout_ms} ms") from exc
        except httpx.TransportError as exc:
            raise EndpointUnavailable(f"cannot reach the engine at {self.config.base_url}: {describe(exc)}") from exc

    async def _lines(self, response: httpx.Response) -> AsyncIterator[str]:
        """The body's lines; after the first, each waited for at most the idle bound."""
        lines = response.aiter_lines()
        idle: float | None = None
        try:
            while True:
                try:
                    async with asyncio.timeout(idle):  # not wait_for: on 3.11 it can swallow an abort (a cancel)
                        line = await anext(lines)
                except StopAsyncIteration:
                    return
                except TimeoutError:
                    raise EndpointUnavailable(
                        f"the engine at {self.config.base_url} sent nothing for {self.config.idle_s * 1000:.0f} ms "
                        "(engine.idleTimeoutMs): the stream is treated as dropped; is the engine still running?"
                    ) from None
                idle = self.config.idle_s
                yield line
        except httpx.TimeoutException as exc:
            raise RequestTimeout(f"the engine at {self.config.base_url} stopped sending within {self.config.timeout_ms} ms") from exc
        except httpx.TransportError as exc:
            raise EndpointUnavailable(f"the engine at {self.config.base_url} dropped the stream: {describe(exc)}") from exc

    async def _json_body(self, response: httpx.Response) -> Any:
        try:
            raw = await response.aread()
        except httpx.TimeoutException as exc:
            raise RequestTimeout(f"the engine at {self.config.base_url} did not answer within {self.config.timeout_ms} ms") from exc
        except httpx.TransportError as exc:
            raise EndpointUnavailable(f"the engine at {self.config.base_url} dropped the answer: {describe(exc)}") from exc
        try:
            return json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise ProtocolViolation(f"the engine answered with a body that is not JSON: {raw[:80]!r}") from exc

    def _headers(self) -> dict[str, str]:
        key = self.config.api_key()
        return {"Authorization": f"Bearer {key}"} if key else {}

    async def _raise_for(self, response: httpx.Response) -> None:
        status = response.status_code
        try:
            detail = error_text(json.loads(await response.aread()))
        except (json.JSONDecodeError, UnicodeDecodeError, httpx.HTTPError):
            detail = response.reason_phrase or f"HTTP {status}"
        if status in (401, 403):
            raise AuthError(auth_message(self.config, status, detail))
        if status in RETRY_STATUSES:
            raise EndpointUnavailable(f"the engine at {self.config.base_url} is still busy after {MAX_RETRIES} retries (HTTP {status}: {detail})")
        raise RequestRejected(f"the engine at {self.config.base_url} refused the request (HTTP {status}): {detail}", status)


def auth_message(config: RemoteConfig, status: int, detail: str) -> str:
    where = f"the engine at {config.base_url} refused the request (HTTP {status}: {detail})"
    if not config.api_key_env:
        path = token_file_for(config.base_url)
        found = "its token file was used" if config.api_key() else f"no token file of a local glm5-serve at {path}"
        return f"{where}: it needs an API key ({found}); put the key in an environment variable and name that variable in engine.apiKeyEnv"
    if config.api_key() is None:
        return f"{where}: the API key variable {config.api_key_env} is not set in the server's environment"
    return f"{where}: check the API key in the environment variable {config.api_key_env}"


def retry_delay(header: str | None, attempt: int) -> float:
    """Seconds to wait: `Retry-After` (delta-seconds or HTTP date), else exponential backoff."""
    backoff = min(MAX_BACKOFF_S, BACKOFF_S * 2**attempt)
    if not header:
        return backoff
    try:
        return max(0.0, float(header))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(header)
    except (TypeError, ValueError):
        return backoff
    return max(0.0, when.timestamp() - time.time())


def describe(exc: httpx.TransportError) -> str:
    if isinstance(exc, httpx.ConnectError):
        return f"connection failed ({exc}); is the engine running?"
    if isinstance(exc, httpx.RemoteProtocolError):
        return f"the connection was closed mid-answer ({exc})"
    return f"{type(exc).__name__}: {exc}"


async def _single(body: Any) -> AsyncIterator[dict[str, Any] | None]:
    if not isinstance(body, dict):
        raise ProtocolViolation(f"the engine answered with {type(body).__name__}, not a JSON object")
    yield body
    yield None

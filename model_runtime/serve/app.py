"""The daemon's HTTP routes (Starlette): the OpenAI-compatible API plus `/glm5/*` for editors' servers.

Role: `build_app(service, api_key)` serves `/v1/completions` (streamed with SSE or not; prompt as
text or token ids), `/v1/models`, `/tokenize`, `/detokenize`, `/health`, `/metrics` (Prometheus
text) and, for language servers that share this daemon, `/glm5/warmup`, `/glm5/prefill`,
`/glm5/workspace`, `/glm5/persist`, `/glm5/cache/clear`, `/glm5/score` and `/glm5/stats`.

Invariants:
- With an API key (the default, see `cli`), every route but `/health` needs
  `Authorization: Bearer <key>` (401 otherwise).
- The bound workspace KV store is written or deleted (`/glm5/persist`, `/glm5/cache/clear`) only
  for the client that bound it: `/glm5/workspace` answers a lease, which those routes require
  in `X-Glm5-Workspace` (403 otherwise, also after another client bound its own workspace).
- A client that disconnects aborts its requests in the engine: a stream is cancelled by
  Starlette, a plain request by `_until_disconnect`; the engine streams are closed with
  `aclosing`, so the abort runs at once wherever the handler was cancelled.
- Errors are `{"error": {message, type, param, code}}` with the HTTP status in `code`.
"""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import aclosing
from dataclasses import asdict
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from model_runtime.api import FinishReason, GenerationRequest, GenerationResult, ScoreRequest
from model_runtime.serve import protocol
from model_runtime.serve.metrics import render_metrics
from model_runtime.serve.protocol import ApiError, CompletionParams
from model_runtime.serve.service import EngineService

log = logging.getLogger(__name__)

LEASE_HEADER = "x-glm5-workspace"  # the lease `/glm5/workspace` gave, for persist and cache/clear

def build_app(service: EngineService, api_key: str | None = None) -> ASGIApp:
    def route(path: str, handler: Callable[[Request, EngineService], Awaitable[Response]], method: str) -> Route:
        async def endpoint(request: Request) -> Response:
            try:
                response = await handler(request, service)
            except ApiError as exc:
                response = JSONResponse(exc.body(), exc.status)
            service.http[f'endpoint="{path}",status="{response.status_code}"'] += 1
            return response

        return Route(path, endpoint, methods=[method])

    routes = [
        route("/v1/completions", completions, "POST"), route("/v1/models", models, "GET"),
        route("/tokenize", tokenize, "POST"), route("/detokenize", detokenize, "POST"),
        route("/health", health, "GET"), route("/metrics", metrics, "GET"),
        route("/glm5/warmup", warmup, "POST"), route("/glm5/prefill", prefill, "POST"),
        route("/glm5/workspace", workspace, "POST"), route("/glm5/persist", persist, "POST"),
        route("/glm5/cache/clear", clear_cache, "POST"), route("/glm5/stats", stats, "GET"),
        route("/glm5/score", score, "POST"),
    ]
    app = Starlette(routes=routes)
    return BearerAuth(app, api_key) if api_key else app


class BearerAuth:
    """Pure ASGI middleware: `Authorization: Bearer <key>` on every route but /health."""

    def __init__(self, app: ASGIApp, key: str) -> None:
        self.app, self.expected = app, f"Bearer {key}".encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"] != "/health":
            given = dict(scope["headers"]).get(b"authorization", b"")
            if not secrets.compare_digest(given, self.expected):
                body = protocol.error_body("invalid or missing API key (Authorization: Bearer ...)", "AuthenticationError", 401)
                await JSONResponse(body, 401)(scope, receive, send)
                return
        await self.app(scope, receive, send)


async def _json(request: Request) -> Any:
    try:
        return await request.json()
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ApiError(f"the request body is not JSON: {exc}") from exc


def _field(body: Any, key: str, check: Callable[[Any], bool], expected: str) -> Any:
    value = body.get(key) if isinstance(body, dict) else None
    if not check(value):
        raise ApiError(f"{key} must be {expected}", param=key)
    return value


def _ids(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(t, int) and not isinstance(t, bool) for t in value)


# ---- OpenAI-compatible -------------------------------------------------------------------
async def completions(request: Request, service: EngineService) -> Response:
    params = protocol.parse_completion(await _json(request), service.name)
    prompts = [service.encode(p) if isinstance(p, str) else p for p in params.prompts]
    for ids in prompts:
        _check_prompt(service, ids, params.sampling.max_tokens)
    rid = service.request_id()
    if params.stream:
        return StreamingResponse(_stream(service, rid, params, prompts[0]), media_type="text/event-stream")
    results = await _until_disconnect(request, asyncio.gather(*(_run(service, f"{rid}-{i}", params, ids) for i, ids in enumerate(prompts))))
    if results is None:
        return Response(status_code=499)  # the client is gone; nobody reads this
    choices = [
        protocol.choice(i, (service.decode(ids) if params.echo else "") + r.text, r.finish_reason, await _logprobs(service, params, ids, r.token_ids))
        for i, (ids, r) in enumerate(zip(prompts, results, strict=True))
    ]
    return JSONResponse(protocol.completion(rid, service.created, service.name, choices, protocol.usage(results)))


def _check_prompt(service: EngineService, ids: list[int], max_tokens: int) -> None:
    if not ids:
        raise ApiError("the prompt is empty", param="prompt")
    try:
        service.check_ids(ids)
    except ValueError as exc:
        raise ApiError(str(exc), param="prompt") from exc
    if len(ids) + max_tokens > service.max_model_len:
        raise ApiError(
            f"This model's maximum context length is {service.max_model_len} tokens; the prompt has {len(ids)} "
            f"and max_tokens is {max_tokens}", param="max_tokens",
        )


async def _run(service: EngineService, rid: str, params: CompletionParams, ids: list[int]) -> GenerationResult:
    if params.sampling.max_tokens == 0:
        return GenerationResult(rid, (), "", FinishReason.LENGTH, prompt_tokens=len(ids))
    async with aclosing(service.generate(GenerationRequest(rid, tuple(ids), params.sampling))) as items:
        async for item in items:
            if isinstance(item, GenerationResult):
                return _checked(item)
    raise RuntimeError(f"request {rid} ended without a result")


def _checked(result: GenerationResult) -> GenerationResult:
    if result.finish_reason is FinishReason.ERROR:
        raise ApiError(f"generation failed: {result.error}", 500, kind="InternalServerError")
    return result


async def _stream(service: EngineService, rid: str, params: CompletionParams, ids: list[int]) -> AsyncIterator[str]:
    sent, out = "", []

    def chunk(text: str, reason: FinishReason | None, logprobs: dict[str, Any] | None) -> str:
        body = protocol.completion(rid, service.created, service.name, [protocol.choice(0, text, reason, logprobs)], None)
        return f"data: {json.dumps(body)}\n\n"

    if params.echo:
        yield chunk(service.decode(ids), None, await _span(service, params, ids, 0))
    result = GenerationResult(rid, (), "", FinishReason.LENGTH, prompt_tokens=len(ids))
    if params.sampling.max_tokens > 0:
        try:
            async with aclosing(service.generate(GenerationRequest(rid, tuple(ids), params.sampling))) as items:
                async for item in items:
                    if isinstance(item, GenerationResult):
                        result = _checked(item)
                    elif item.text.startswith(sent) and len(item.text) > len(sent):
                        done = len(out)
                        out += item.new_token_ids
                        yield chunk(item.text[len(sent) :], None, await _span(service, params, ids + out, len(ids) + done))
                        sent = item.text
        except ApiError as exc:
            yield f"data: {json.dumps(exc.body())}\n\n"
            return
    rest = result.text[len(sent) :] if result.text.startswith(sent) else ""
    tail = await _span(service, params, ids + list(result.token_ids), len(ids) + len(out)) if rest else None
    yield chunk(rest, result.finish_reason, tail)
    if params.include_usage:
        body = protocol.completion(rid, service.created, service.name, [], protocol.usage([result]))
        yield f"data: {json.dumps(body)}\n\n"
    yield "data: [DONE]\n\n"


async def _logprobs(service: EngineService, params: CompletionParams, ids: list[int], out: tuple[int, ...]) -> dict[str, Any] | None:
    """The `logprobs` object of a whole choice: over the output (and the prompt too with `echo`)."""
    return await _span(service, params, ids + list(out), 0 if params.echo else len(ids))


async def _span(service: EngineService, params: CompletionParams, ids: list[int], first: int) -> dict[str, Any] | None:
    """Logprobs of `ids[first:]` when the request asked for them (and there are any)."""
    if params.logprobs is None or first >= len(ids):
        return None
    return _logprobs_body(await service.logprobs(ids, first, params.logprobs))


def _logprobs_body(span: Any) -> dict[str, Any]:
    offsets, at = [], 0
    for token in span.tokens:
        offsets.append(at)
        at += len(token)
    return {"tokens": span.tokens, "token_logprobs": span.token_logprobs, "top_logprobs": span.top_logprobs, "text_offset": offsets}


async def _until_disconnect(request: Request, work: Awaitable[Any]) -> Any:
    """`work`'s result, or None when the client went away first (then `work` is cancelled, which
    aborts its engine requests)."""
    task = asyncio.ensure_future(work)

    async def disconnected() -> None:
        while (await request.receive())["type"] != "http.disconnect":
            pass

    watcher = asyncio.ensure_future(disconnected())
    try:
        await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        watcher.cancel()
    if not task.done():
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        return None
    return task.result()


async def models(request: Request, service: EngineService) -> Response:
    card = {
        "id": service.name, "object": "model", "created": service.created, "owned_by": "glm5-lsp",
        "root": str(service.loaded.path), "parent": None, "max_model_len": service.max_model_len,
    }
    return JSONResponse({"object": "list", "data": [card]})


async def tokenize(request: Request, service: EngineService) -> Response:
    body = await _json(request)
    text = _field(body, "prompt", lambda v: isinstance(v, str), "a string")
    ids = service.encode(text)
    strs = [service.decode([i]) for i in ids] if body.get("return_token_strs") else None
    return JSONResponse({"count": len(ids), "max_model_len": service.max_model_len, "tokens": ids, "token_strs": strs})


async def detokenize(request: Request, service: EngineService) -> Response:
    ids = _field(await _json(request), "tokens", _ids, "a list of token ids")
    try:
        service.check_ids(ids)
    except ValueError as exc:
        raise ApiError(str(exc), param="tokens") from exc
    return JSONResponse({"prompt": service.decode(ids)})


async def health(request: Request, service: EngineService) -> Response:
    return Response(status_code=200)


async def metrics(request: Request, service: EngineService) -> Response:
    cache = await asyncio.to_thread(service.engine.cache_stats)
    return PlainTextResponse(render_metrics(service, cache), media_type="text/plain; version=0.0.4")


# ---- for language servers sharing this daemon --------------------------------------------
async def warmup(request: Request, service: EngineService) -> Response:
    texts = _field(await _json(request), "texts", lambda v: isinstance(v, list) and all(isinstance(t, str) for t in v), "a list of strings")
    report = await asyncio.to_thread(service.engine.warmup, texts, None)
    return JSONResponse(asdict(report))


async def prefill(request: Request, service: EngineService) -> Response:
    ids = _field(await _json(request), "prompt", lambda v: _ids(v) and bool(v), "a non-empty list of token ids")
    _check_prompt(service, ids, 1)
    result = await service.prefill(ids)
    return JSONResponse({**asdict(result), "finish_reason": result.finish_reason.value})


async def workspace(request: Request, service: EngineService) -> Response:
    """Bind the persisted KV store of `roots`; the answer's `lease` is what this client sends
    (`X-Glm5-Workspace`) to persist or clear that store later."""
    roots = _field(await _json(request), "roots", lambda v: isinstance(v, list) and all(isinstance(r, str) for r in v), "a list of paths")
    directory = await asyncio.to_thread(service.engine.open_workspace, roots)
    service.workspace_lease = secrets.token_urlsafe(24)
    return JSONResponse({"directory": directory, "lease": service.workspace_lease})


async def persist(request: Request, service: EngineService) -> Response:
    _check_lease(request, service)
    return JSONResponse({"blocks": await asyncio.to_thread(service.engine.persist)})


async def clear_cache(request: Request, service: EngineService) -> Response:
    _check_lease(request, service)
    every = not bool((await _json(request)).get("workspace", True))
    return JSONResponse({"bytes": await asyncio.to_thread(service.engine.clear_cache, not every)})


def _check_lease(request: Request, service: EngineService) -> None:
    """Writing or deleting the bound workspace's KV store is for the client that bound it."""
    if service.workspace_lease is None:
        return
    given = request.headers.get(LEASE_HEADER, "").encode()
    if not secrets.compare_digest(given, service.workspace_lease.encode()):
        raise ApiError(
            "the KV store bound now is another client's workspace: bind yours with /glm5/workspace and send its lease "
            f"in {LEASE_HEADER}", 403, kind="PermissionDeniedError",
        )


async def score(request: Request, service: EngineService) -> Response:
    """`Engine.score`: continuations of one prompt in one batched forward over its KV blocks."""
    body = await _json(request)
    prompt = _field(body, "prompt", lambda v: _ids(v) and bool(v), "a non-empty list of token ids")
    continuations = _field(body, "continuations", lambda v: isinstance(v, list) and all(_ids(c) for c in v), "a list of token-id lists")
    longest = max((len(c) for c in continuations), default=0)
    _check_prompt(service, prompt, longest)
    for c in continuations:
        try:
            service.check_ids(c)
        except ValueError as exc:
            raise ApiError(str(exc), param="continuations") from exc
    scored = await asyncio.to_thread(service.engine.score, ScoreRequest(service.request_id(), tuple(prompt), tuple(tuple(c) for c in continuations)))
    return JSONResponse({"scores": [asdict(s) for s in scored]})


async def stats(request: Request, service: EngineService) -> Response:
    cache = await asyncio.to_thread(service.engine.cache_stats)
    return JSONResponse({"engine": asdict(service.engine.stats()), "kvCache": cache, "running": service.running})

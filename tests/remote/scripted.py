"""`Scripted`: an OpenAI-compatible endpoint on 127.0.0.1 whose `/v1/completions` answers are
scripted by the test (429s, 401s, malformed or stalled event streams), served by uvicorn on a
thread over real HTTP. It records what each request carried (headers, body, arrival time).
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

Answer = Callable[[Request], Awaitable[Response]]


def chunk(text: str, finish: str | None = None) -> str:
    body = {"id": "cmpl-s", "object": "text_completion", "created": 0, "model": "scripted",
            "choices": [{"index": 0, "text": text, "logprobs": None, "finish_reason": finish}]}
    return f"data: {json.dumps(body)}\n\n"


def status(code: int, headers: dict[str, str] | None = None, message: str = "scripted") -> Answer:
    async def answer(request: Request) -> Response:
        return JSONResponse({"error": {"message": message, "type": "Scripted", "param": None, "code": code}}, code, headers=headers)

    return answer


def sse(*parts: str, stall: bool = False) -> Answer:
    """An event stream of `parts` (raw text); with `stall`, it then sends nothing, forever."""

    async def answer(request: Request) -> Response:
        async def body() -> AsyncIterator[str]:
            for part in parts:
                yield part
            while stall:
                await asyncio.sleep(0.05)

        return StreamingResponse(body(), media_type="text/event-stream")

    return answer


def plain(*texts: str) -> Answer:
    """A non-streamed completion with one choice per text and no logprobs."""

    async def answer(request: Request) -> Response:
        choices = [{"index": i, "text": t, "logprobs": None, "finish_reason": "length"} for i, t in enumerate(texts)]
        return JSONResponse({"id": "cmpl-s", "object": "text_completion", "created": 0, "model": "scripted", "choices": choices})

    return answer


def paced(parts: list[str], every_s: float) -> Answer:
    """An event stream sending one of `parts` every `every_s` seconds, then [DONE]."""

    async def answer(request: Request) -> Response:
        async def body() -> AsyncIterator[str]:
            for part in parts:
                yield part
                await asyncio.sleep(every_s)
            yield "data: [DONE]\n\n"

        return StreamingResponse(body(), media_type="text/event-stream")

    return answer


def good(text: str = "return a + b") -> Answer:
    half = len(text) // 2
    return sse(chunk(text[:half]), chunk(text[half:], "length"), "data: [DONE]\n\n")


class Scripted:
    """`tls`: (certificate file, key file) to serve https instead of http. `tokenizer` (a
    `tokenizers.Tokenizer`) also serves vLLM's `/tokenize` and `/detokenize` with it, special
    tokens in the text becoming their ids as vLLM's do."""

    def __init__(self, answers: list[Answer], tls: tuple[str, str] | None = None, tokenizer: Any = None) -> None:
        self.answers = answers
        self.tokenizer = tokenizer
        self.requests: list[dict[str, Any]] = []
        self._sock = socket.socket()
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(16)
        self.url = f"{'https' if tls else 'http'}://127.0.0.1:{self._sock.getsockname()[1]}"
        routes = [Route("/v1/models", self._models), Route("/v1/completions", self._complete, methods=["POST"])]
        if tokenizer is not None:
            routes += [Route("/tokenize", self._tokenize, methods=["POST"]), Route("/detokenize", self._detokenize, methods=["POST"])]
        app = Starlette(routes=routes)
        certfile, keyfile = tls or (None, None)
        self._server = uvicorn.Server(uvicorn.Config(
            app, log_level="warning", lifespan="off", timeout_graceful_shutdown=1, ssl_certfile=certfile, ssl_keyfile=keyfile,
        ))
        self._thread = threading.Thread(target=lambda: asyncio.run(self._server.serve(sockets=[self._sock])), daemon=True)

    def __enter__(self) -> Scripted:
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started and time.monotonic() < deadline:
            time.sleep(0.01)
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.should_exit = True
        self._thread.join(10)
        self._sock.close()

    async def _models(self, request: Request) -> Response:
        return JSONResponse({"object": "list", "data": [{"id": "scripted", "object": "model", "owned_by": "test", "max_model_len": 2048}]})

    async def _complete(self, request: Request) -> Response:
        self.requests.append({"at": time.monotonic(), "headers": dict(request.headers), "body": await request.json()})
        answer = self.answers[min(len(self.requests), len(self.answers)) - 1]
        return await answer(request)

    async def _tokenize(self, request: Request) -> Response:
        ids = self.tokenizer.encode((await request.json())["prompt"], add_special_tokens=False).ids
        return JSONResponse({"count": len(ids), "max_model_len": 2048, "tokens": ids})

    async def _detokenize(self, request: Request) -> Response:
        return JSONResponse({"prompt": self.tokenizer.decode((await request.json())["tokens"], skip_special_tokens=False)})

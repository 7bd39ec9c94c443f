"""`RemoteEngine`: the runtime's `EngineProtocol` over an OpenAI-compatible `/v1/completions`.

Role: the language server keeps its IDE state, context, prompt and post-processing; this engine
sends the finished FIM prompt to vLLM, SGLang or `glm5-serve` and streams the text back through
the same callbacks as the in-process engine. Warm-up, prefill and the persisted KV store go
through `glm5-serve`'s `/glm5/*` endpoints; other servers keep their own prefix cache, so those
calls degrade to prefix-cache warming or no-ops.

Invariants:
- Its own thread runs one asyncio loop; callbacks run on that thread (like the engine thread),
  and `on_done` is called exactly once per submitted request.
- `abort` cancels the request's task, which closes its HTTP stream; the result is ABORT with
  the text so far. Each request is bounded by `timeoutMs` as a whole (no hang on a silent server).
- At most `maxConcurrency` requests are in flight; the rest wait their turn.
- Failures (unreachable, auth, timeouts, malformed streams) end that request with ERROR and a
  message for the user; the engine itself keeps serving. Those of the endpoint (not the refusal
  of one request) count as `EngineStats.engine_restarts`, which the server's health watches.
- `SamplingParams.max_decode_ms` is honoured by cutting the stream once that long has passed
  since the first text (reason LENGTH, the text so far), which also stops the server's decode;
  `glm5-serve` is also sent the budget (`max_decode_ms`), so it ends such a request itself.
- A stream silent for `idleTimeoutMs` is dropped (a stopped engine may keep it open).
- Constraint masks and n-best cannot be sent (the endpoints' grammars and `n` differ): such
  requests run unconstrained with one result. A token-healing prefix is honoured after the
  fact: stripped from the text, and an output that does not spell it ends the request empty.
  `score` uses echoed prompt logprobs, or raises NotImplementedError (`Unsupported`).
- Never imports torch.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Any, TypeVar

from model_runtime.api import (
    ContinuationScore, DoneCallback, EngineStats, EventCallback, FinishReason, GenerationRequest,
    GenerationResult, ProgressCallback, SamplingParams, ScoreRequest, StreamEvent, WarmupReport,
)
from model_runtime.remote.config import RemoteConfig
from model_runtime.remote.errors import (
    EndpointUnavailable, ProtocolViolation, RemoteError, RequestRejected, RequestTimeout, Unsupported,
)
from model_runtime.remote.transport import Endpoint
from model_runtime.remote.wire import (
    ModelCard, Usage, choice_of, completion_body, finish_reason, model_card, token_logprobs, usage_of,
)

log = logging.getLogger(__name__)

T = TypeVar("T")
WARMUP_CHARS = 4000
HOLD_POLL_S = 0.02  # how often a held warm-up looks again


class RemoteEngine:
    """Create with `RemoteEngine(config).start()`; `card` is filled by `start` from `/v1/models`."""

    def __init__(self, config: RemoteConfig, decode_prompt: Callable[[list[int]], str] | None = None) -> None:
        self.config = config
        self.card: ModelCard | None = None
        self.prompt_format = "ids" if config.prompt_format == "auto" else config.prompt_format
        self.decode_prompt = decode_prompt  # ids -> text with special tokens, for endpoints that refuse ids
        self.stop_token_ids: tuple[int, ...] = ()  # the FIM template's end tokens, sent with every completion
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="glm5-remote", daemon=True)
        self._endpoint: Endpoint | None = None
        self._slots: asyncio.Semaphore | None = None
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._counters = EngineStats.zero_counters()
        self._errors = 0
        self._lease: str | None = None  # `glm5-serve`'s lease on the workspace KV store this client bound
        self._failures = threading.Lock()  # `note_failure` comes from the loop and tokenizer threads

    # ---- life cycle ------------------------------------------------------------------------
    def start(self) -> RemoteEngine:
        """Start the loop thread and read the model card (raises `RemoteError` if unreachable)."""
        self._thread.start()
        try:
            self.card = self.call(self._start())
        except BaseException:
            self.shutdown()
            raise
        return self

    async def _start(self) -> ModelCard:
        self._endpoint = Endpoint(self.config)
        self._slots = asyncio.Semaphore(self.config.max_concurrency)
        return model_card(await self._endpoint.get("/v1/models", self._deadline()), self.config.model)

    def shutdown(self) -> None:
        if not self._thread.is_alive():
            return
        try:
            self.call(self._close(), timeout=5)
        except Exception:  # closing is best effort: the loop stops regardless
            log.exception("closing the remote engine's connections failed")
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)

    async def _close(self) -> None:
        for task in list(self._tasks.values()):
            task.cancel()
        await asyncio.gather(*self._tasks.values(), return_exceptions=True)
        if self._endpoint is not None:
            await self._endpoint.close()

    def call(self, work: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Run `work` on the engine's loop and wait for it (from any other thread); past the
        bound it is cancelled and TimeoutError raised."""
        bound = timeout if timeout is not None else self.config.timeout_ms / 1000 + 1
        future = asyncio.run_coroutine_threadsafe(work, self._loop)
        try:
            return future.result(bound)
        except TimeoutError:
            future.cancel()
            raise TimeoutError(f"the engine at {self.config.base_url} did not answer within {bound:.1f} s") from None

    # ---- EngineProtocol --------------------------------------------------------------------
    def submit(self, request: GenerationRequest, on_event: EventCallback | None, on_done: DoneCallback) -> None:
        self._counters["requests_submitted"] += 1
        self._loop.call_soon_threadsafe(self._spawn, request, on_event, on_done)

    def abort(self, request_id: str) -> None:
        self._loop.call_soon_threadsafe(self._cancel, request_id)

    def stats(self) -> EngineStats:
        return EngineStats(**self._counters)

    def cache_stats(self) -> dict[str, int]:
        """Counters of this client; the endpoint's prefix cache reports through `cached_tokens`."""
        return {
            "remote_cached_prompt_tokens": self._counters["cached_prompt_tokens"],
            "remote_retries": self._endpoint.retries if self._endpoint is not None else 0,
            "remote_errors": self._errors,
        }

    def warmup(
        self, texts: list[str], progress: ProgressCallback | None = None, hold: Callable[[], bool] | None = None
    ) -> WarmupReport:
        """`glm5-serve`: its engine's router warm-up (whose engine puts users' requests first).
        Others: each text once through the endpoint with one output token, which warms its prefix
        cache; none is sent while `hold()` is true."""
        start = time.perf_counter()
        if self.card is not None and self.card.is_glm5_daemon:
            body = self.call(self._post("/glm5/warmup", {"texts": texts}), timeout=max(60.0, self.config.timeout_ms / 1000))
            return WarmupReport(**{k: body[k] for k in WarmupReport.__dataclass_fields__})
        tokens = 0
        for i, text in enumerate(texts):
            while hold is not None and hold():
                time.sleep(HOLD_POLL_S)
            tokens += self.call(self._one(text[:WARMUP_CHARS])).prompt_tokens
            if progress is not None:
                progress((i + 1) / len(texts), f"warming the remote prefix cache {i + 1}/{len(texts)}")
        return WarmupReport(len(texts), tokens, 0, 0, time.perf_counter() - start)

    def prefill(self, prompt_ids: list[int]) -> GenerationResult:
        if self.card is not None and self.card.is_glm5_daemon:
            body = self.call(self._post("/glm5/prefill", {"prompt": list(prompt_ids)}))
            return GenerationResult(**{**body, "token_ids": tuple(body["token_ids"]), "finish_reason": FinishReason(body["finish_reason"])})
        return self.call(self._one(list(prompt_ids)))

    def open_workspace(self, roots: list[str]) -> str:
        """`glm5-serve`: bind its KV store to these roots; the lease it answers lets this client
        (and only it) persist or clear that store later."""
        if self.card is not None and self.card.is_glm5_daemon:
            answer = self.call(self._post("/glm5/workspace", {"roots": list(roots)}))
            self._lease = answer.get("lease") if isinstance(answer.get("lease"), str) else None
            return answer["directory"]
        return f"none: {self.config.base_url} keeps its own prefix cache"

    def persist(self) -> int:
        if self.card is not None and self.card.is_glm5_daemon:
            return int(self.call(self._post("/glm5/persist", {}, self._lease_header()))["blocks"])
        return 0

    def clear_cache(self, workspace: bool = True) -> int:
        if self.card is not None and self.card.is_glm5_daemon:
            return int(self.call(self._post("/glm5/cache/clear", {"workspace": workspace}, self._lease_header()))["bytes"])
        return 0

    def _lease_header(self) -> dict[str, str]:
        return {"X-Glm5-Workspace": self._lease} if self._lease else {}

    def score(self, request: ScoreRequest, timeout: float = 30.0) -> list[ContinuationScore]:
        """Log-probabilities of each continuation after the prompt: `glm5-serve` scores them in
        one batched forward over the prompt's KV blocks (`/glm5/score`); other endpoints through
        their prompt logprobs (`echo` + `logprobs`, all continuations in one batched request).
        `Unsupported` (a NotImplementedError) when the endpoint gives none; other failures are
        RuntimeError, TimeoutError past `timeout`."""
        daemon = self.card is not None and self.card.is_glm5_daemon
        try:
            return self.call(self._score_on_daemon(request) if daemon else self._score(request), timeout)
        except Unsupported:
            raise
        except RemoteError as exc:
            raise RuntimeError(exc.message) from exc

    # ---- on the loop -----------------------------------------------------------------------
    def _spawn(self, request: GenerationRequest, on_event: EventCallback | None, on_done: DoneCallback) -> None:
        task = self._loop.create_task(self._run(request, on_event, on_done))
        self._tasks[request.request_id] = task
        task.add_done_callback(lambda _: self._tasks.pop(request.request_id, None))

    def _cancel(self, request_id: str) -> None:
        task = self._tasks.get(request_id)
        if task is not None:
            task.cancel()

    async def _run(self, request: GenerationRequest, on_event: EventCallback | None, on_done: DoneCallback) -> None:
        heal = request.constraint.heal_prefix if request.constraint is not None else ""
        state = _Progress(request.request_id, time.perf_counter(), heal)
        state.usage.prompt_tokens = len(request.prompt_ids)  # until the endpoint's usage says (a cut stream never does)
        try:
            assert self._slots is not None
            async with self._slots:
                await asyncio.wait_for(self._generate(request, on_event, state), self.config.timeout_ms / 1000)
            result = state.result(state.reason or FinishReason.STOP)
        except asyncio.CancelledError:
            result = state.result(FinishReason.ABORT)
        except (TimeoutError, asyncio.TimeoutError):
            result = self._failed(state, RequestTimeout(f"the engine at {self.config.base_url} did not finish within {self.config.timeout_ms} ms"))
        except RemoteError as exc:
            result = self._failed(state, exc)
        except Exception as exc:  # a bug here must still end the request exactly once
            log.exception("remote request %s failed", request.request_id)
            result = self._failed(state, RemoteError(f"remote request failed: {exc}"))
        self._count(result, state.usage)
        on_done(result)

    async def _generate(self, request: GenerationRequest, on_event: EventCallback | None, state: _Progress) -> None:
        assert self._endpoint is not None and self.card is not None
        try:
            await self._stream(request, self._prompt(request.prompt_ids), on_event, state)
        except RequestRejected as exc:
            if self.config.prompt_format != "auto" or self.prompt_format != "ids" or state.raw or exc.status not in (400, 422):
                raise
            log.warning("the engine refused a token-id prompt (%s); sending prompts as text from now on", exc.message)
            self.prompt_format = "text"
            await self._stream(request, self._prompt(request.prompt_ids), on_event, state)

    async def _stream(self, request: GenerationRequest, prompt: list[int] | str, on_event: EventCallback | None, state: _Progress) -> None:
        assert self._endpoint is not None and self.card is not None
        body = completion_body(request, self.card.name, prompt, stream=True, stop_token_ids=self.stop_token_ids)
        if self.card.is_glm5_daemon and request.sampling.max_decode_ms:  # it ends the request itself (LENGTH), not aborted
            body["max_decode_ms"] = request.sampling.max_decode_ms
        async with self._endpoint.stream("/v1/completions", body, self._deadline()) as chunks:
            iterator = aiter(chunks)
            while True:
                try:
                    chunk = await state.next_within_budget(iterator, request.sampling.max_decode_ms)
                except StopAsyncIteration:
                    break
                except _BudgetSpent:
                    log.debug("remote request %s: decode budget of %g ms spent; stream cut", request.request_id, request.sampling.max_decode_ms)
                    state.reason = FinishReason.LENGTH
                    return
                if chunk is None:
                    return
                usage_of(chunk, state.usage)
                choice = choice_of(chunk)
                if choice is None:
                    continue
                before = state.text
                reason = finish_reason(choice.get("finish_reason"))
                if reason is FinishReason.ABORT:  # not ours (ours cancels the task): the engine gave up on it
                    raise EndpointUnavailable(f"the engine at {self.config.base_url} aborted the request (is it shutting down?)")
                state.add(choice.get("text", ""), reason)
                if state.diverged:  # the healed characters were not spelled: nothing fits the cursor
                    log.info("remote request %s: output does not continue %r; stopped", request.request_id, state.heal)
                    state.reason = FinishReason.STOP
                    return
                if on_event is not None and state.text != before:
                    on_event(StreamEvent(request.request_id, (), state.text))
        if state.reason is None:
            raise RemoteError(f"the engine at {self.config.base_url} ended the stream before the completion finished")

    def _prompt(self, ids: tuple[int, ...] | list[int]) -> list[int] | str:
        if self.prompt_format == "ids":
            return list(ids)
        if self.decode_prompt is None:
            raise Unsupported("the engine refuses token-id prompts and no tokenizer can turn them into text")
        return self.decode_prompt(list(ids))

    async def _one(self, prompt: list[int] | str) -> GenerationResult:
        """One short non-streamed completion (prefix-cache warming on servers other than ours)."""
        request = GenerationRequest("warm", (), SamplingParams(max_tokens=1))
        body = completion_body(request, self._card().name, prompt if isinstance(prompt, str) else self._prompt(prompt), stream=False)
        answer = await self._post("/v1/completions", body)
        usage = Usage()
        usage_of(answer, usage)
        return GenerationResult("warm", (), "", FinishReason.LENGTH, usage.prompt_tokens, usage.cached_tokens,
                                usage.prompt_tokens - usage.cached_tokens)

    async def _score_on_daemon(self, request: ScoreRequest) -> list[ContinuationScore]:
        body = {"prompt": list(request.prompt_ids), "continuations": [list(c) for c in request.continuations]}
        scores = (await self._post("/glm5/score", body)).get("scores")
        if not isinstance(scores, list) or len(scores) != len(request.continuations):
            raise ProtocolViolation(f"/glm5/score: expected {len(request.continuations)} scores, got {str(scores)[:120]}")
        return [ContinuationScore(float(s["logprob"]), int(s["num_tokens"]), tuple(s["token_logprobs"])) for s in scores]

    async def _score(self, request: ScoreRequest) -> list[ContinuationScore]:
        prompt = list(request.prompt_ids)
        prompts = [prompt + list(c) for c in request.continuations]
        if not prompts:
            return []
        body = {"model": self._card().name, "prompt": prompts, "max_tokens": 1, "echo": True, "logprobs": 0, "temperature": 0.0}
        try:
            answer = await self._post("/v1/completions", body)
        except RequestRejected as exc:
            raise Unsupported(f"the engine gives no prompt logprobs, so continuations cannot be scored remotely: {exc.message}") from exc
        choices = answer.get("choices") if isinstance(answer, dict) else None
        if not isinstance(choices, list) or len(choices) != len(prompts):
            raise Unsupported(f"the engine answered {len(choices or [])} choices for {len(prompts)} scored prompts")
        ordered = sorted(choices, key=lambda c: c.get("index", 0) if isinstance(c, dict) else 0)
        try:
            return [_continuation_score(token_logprobs(choice), len(prompt), len(c)) for choice, c in zip(ordered, request.continuations, strict=True)]
        except ProtocolViolation as exc:
            raise Unsupported(f"the engine gives no prompt logprobs, so continuations cannot be scored remotely: {exc.message}") from exc

    async def _post(self, path: str, body: dict[str, Any], headers: dict[str, str] | None = None) -> Any:
        assert self._endpoint is not None
        return await self._endpoint.post(path, body, self._deadline(), headers)

    def _card(self) -> ModelCard:
        assert self.card is not None, "the remote engine is not started"
        return self.card

    def _deadline(self) -> float:
        return time.monotonic() + self.config.timeout_ms / 1000

    def _failed(self, state: _Progress, error: RemoteError) -> GenerationResult:
        self._errors += 1
        if not isinstance(error, RequestRejected | Unsupported):
            self.note_failure()
        log.warning("remote request %s failed: %s", state.request_id, error.message)
        return state.result(FinishReason.ERROR, error.message)

    def note_failure(self) -> None:
        """The endpoint itself failed (unreachable, silent, refusing the key, off-protocol), as
        opposed to refusing one request: counted as `engine_restarts`, the count the language
        server's health watches, so repeated failures reach `glm5/status`. Any thread."""
        with self._failures:
            self._counters["engine_restarts"] += 1

    def _count(self, result: GenerationResult, usage: Usage) -> None:
        key = "requests_aborted" if result.finish_reason is FinishReason.ABORT else "requests_finished"
        self._counters[key] += 1
        self._counters["prefill_tokens"] += result.prefilled_tokens
        self._counters["cached_prompt_tokens"] += result.cached_tokens
        self._counters["generated_tokens"] += usage.completion_tokens


def _continuation_score(values: list[float | None], start: int, length: int) -> ContinuationScore:
    tail = values[start : start + length]
    if len(tail) != length or any(v is None for v in tail):
        raise Unsupported("the engine's echoed logprobs do not cover the continuation")
    return ContinuationScore(float(sum(tail)), length, tuple(float(v) for v in tail))


class _BudgetSpent(Exception):
    """The request's decode budget (`SamplingParams.max_decode_ms`) ran out mid-stream."""


class _Progress:
    """The text and usage of one request so far. With token healing (`heal`), the prompt was
    backed off and the output must first spell `heal` again: `text` is what follows it (the
    engine seam's contract), and an output that spells something else is `diverged`."""

    def __init__(self, request_id: str, started: float, heal: str = "") -> None:
        self.request_id, self.started, self.heal = request_id, started, heal
        self.raw = ""
        self.reason: FinishReason | None = None
        self.first_token_s: float | None = None
        self.usage = Usage()

    @property
    def text(self) -> str:
        return self.raw[len(self.heal) :] if self.raw.startswith(self.heal) else ""

    @property
    def diverged(self) -> bool:
        return not (self.raw.startswith(self.heal) or self.heal.startswith(self.raw))

    async def next_within_budget(self, chunks: AsyncIterator[T], budget_ms: float) -> T:
        """The next chunk, waited for no longer than what is left of the decode budget (counted
        from the first text, as the in-process engine counts it); `_BudgetSpent` past it."""
        if not budget_ms or self.first_token_s is None:
            return await anext(chunks)
        left = budget_ms / 1000 - (time.perf_counter() - self.started - self.first_token_s)
        if left <= 0:
            raise _BudgetSpent
        try:
            async with asyncio.timeout(left):  # not wait_for: on 3.11 it can swallow an abort (a cancel)
                return await anext(chunks)
        except TimeoutError:
            raise _BudgetSpent from None

    def add(self, text: str, reason: FinishReason | None) -> None:
        if text and self.first_token_s is None:
            self.first_token_s = time.perf_counter() - self.started
        self.raw += text
        self.reason = reason or self.reason

    def result(self, reason: FinishReason, error: str | None = None) -> GenerationResult:
        usage = self.usage
        return GenerationResult(
            self.request_id, (), self.text, reason, usage.prompt_tokens, usage.cached_tokens,
            max(0, usage.prompt_tokens - usage.cached_tokens), 0, self.first_token_s,
            time.perf_counter() - self.started, error,
        )

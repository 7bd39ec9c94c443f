"""The completion service behind `textDocument/inlineCompletion` and `textDocument/completion`.

Role: for one request: snapshot the document, register a cancel-previous job, answer from the
type-through cache when possible, or follow a running generation the user typed into
(`inflight`); otherwise debounce automatic triggers, wait for the model, build the prompt
(`pipeline`), generate with streaming, post-process, and record stats.

Invariants:
- Never answers with text for an old version: a didChange aborts the job (StaleRequest), and
  the version is checked again before answering.
- A superseded, stale or cancelled request stops before the engine if it is still debouncing
  or waiting for the model, and between decode steps otherwise. A request the client cancels
  while the model is still loading is answered empty, with a `glm5/status` saying why.
- The prompt and the candidate plan (site, retrieval) are built on a worker thread, so the event
  loop keeps answering meanwhile.
- Streaming progress notifications (`glm5/inlineCompletionProgress`) carry post-processed text,
  only go to clients that opted in, and only for the request's current document version.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from context.positions import Position
from model_runtime.api import FinishReason

from . import candidates, pipeline
from .completion_cache import CompletionCache
from .errors import Glm5Error, StaleRequest, Superseded
from .inflight import InFlight, remainder, typed_into
from .jobs import CompletionJobs, Job
from .progress import STATUS, status_params
from .settings import ServerSettings
from .state import WorkspaceState
from .stats import RequestRecord, ServerStats

if TYPE_CHECKING:
    from context.document import DocumentSnapshot

    from .engine_client import EngineClient

log = logging.getLogger(__name__)

PROGRESS = "glm5/inlineCompletionProgress"
CACHE_WINDOW = 512
IDLE_POLL_S = 0.02  # how often `idle` looks again


@dataclass(frozen=True, slots=True)
class Answer:
    text: str  # "" when there is nothing to suggest
    completion_id: str
    position: Position  # the cursor, clamped to the document
    version: int


class _Timing:
    def __init__(self) -> None:
        self.start = time.perf_counter()
        self.first_text: float | None = None

    def elapsed(self) -> float:
        return time.perf_counter() - self.start

    def saw_text(self) -> None:
        if self.first_text is None:
            self.first_text = self.elapsed()


class Completions:
    """Completes in the documents of `state` with `engine`, under `settings()`: `jobs` cancel the
    previous request, `cache` answers typing-through, `stats` records each request, `notify`
    sends streaming progress and status to the client, `background` runs the generations."""

    def __init__(
        self, state: WorkspaceState, engine: EngineClient, jobs: CompletionJobs, cache: CompletionCache, stats: ServerStats,
        settings: Callable[[], ServerSettings], notify: Callable[[str, Any], None],
        background: Callable[[Coroutine[Any, Any, Any]], Any],
    ) -> None:
        self._state = state
        self._engine = engine
        self._jobs = jobs
        self._cache = cache
        self._stats = stats
        self._settings = settings
        self._notify = notify
        self._background = background
        self._flights: dict[tuple[str, str], InFlight] = {}
        self._active = 0  # completion requests between arrival and answer
        self._last_why = ""  # why the last completion showed nothing, as last told to the client

    @property
    def busy(self) -> bool:
        """Whether a completion request is being answered (also before it reaches the engine)."""
        return self._active > 0

    async def idle(self, timeout: float | None = None) -> None:
        """Return once no completion is being answered, or after `timeout` seconds: background
        work (warm-up, diagnostics) waits here so that it never delays the user's answer."""
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        while self.busy and (deadline is None or loop.time() < deadline):
            await asyncio.sleep(IDLE_POLL_S)

    async def complete(
        self, uri: str, position: Position, request_id: int | str, channel: str = "inline", automatic: bool = True
    ) -> Answer:
        """Complete at `position`; `request_id` is the LSP id echoed in progress notifications."""
        timing = _Timing()
        snapshot = self._state.snapshot(uri)
        position = snapshot.position_at(snapshot.offset_at(position))
        self._state.cursors.update(uri, position, snapshot.version)
        outcome = "failed"
        record: dict[str, object] = {}
        self._active += 1
        try:
            async with self._jobs.run(uri, snapshot.version, channel) as job:
                answer, outcome = await self._answer(job, snapshot, position, request_id, automatic, timing, record, channel)
                return answer
        except Superseded:
            outcome = "superseded"
            raise
        except StaleRequest:
            outcome = "stale"
            raise
        except asyncio.CancelledError:
            outcome = "cancelled"
            raise
        except Glm5Error as exc:
            log.warning("completion %s for %s failed: %s", request_id, uri, exc)
            raise
        finally:
            self._active -= 1
            self._stats.record(
                RequestRecord(
                    str(request_id), uri, outcome, first_text_s=timing.first_text, total_s=timing.elapsed(), **record  # type: ignore[arg-type]
                )
            )

    async def _answer(
        self,
        job: Job,
        snapshot: DocumentSnapshot,
        position: Position,
        request_id: int | str,
        automatic: bool,
        timing: _Timing,
        record: dict[str, object],
        channel: str,
    ) -> tuple[Answer, str]:
        """The answer and its outcome. A cache hit answers at once; typing through a running
        generation follows it; otherwise an automatic request is debounced first, and an
        explicit one completes even where EMPTY."""
        settings, engine = self._settings(), self._engine
        offset = snapshot.offset_at(position)
        before = snapshot.text[max(0, offset - CACHE_WINDOW) : offset]
        after = snapshot.text[offset : offset + CACHE_WINDOW]
        cached = self._cache.get(snapshot.uri, before, after)
        if cached is not None:
            timing.saw_text()
            return Answer(cached, job.trace_id, position, snapshot.version), "cache_hit"
        key = (snapshot.uri, channel)
        flight = self._flights.get(key)
        typed = typed_into(flight, snapshot.text, offset) if flight is not None and not flight.done.done() else None
        if flight is not None and typed is not None:
            text = await self._follow(flight, typed, job, request_id, timing)
            record.update(prompt_tokens=len(flight.prepared.prompt.ids), cached_tokens=len(flight.prepared.prompt.ids), prefilled_tokens=0)
            self._check_version(snapshot)
            return Answer(text, job.trace_id, position, snapshot.version), "continued" if text else "empty"
        self._drop(key)
        if automatic and settings.debounce_ms:
            await asyncio.sleep(settings.debounce_ms / 1000)
        try:  # during start-up the tokenizer comes before the weights: prompt and plan meanwhile
            text_model = await engine.text_ready()
            await self._index_or_model()
        except asyncio.CancelledError:
            if job.reason is not None:
                raise
            return self._gave_up_warming(snapshot, position, job.trace_id)
        started = time.perf_counter()
        prepared = await asyncio.to_thread(  # a large file must not stall the event loop
            pipeline.prepare_later(self._state, settings, snapshot, position, text_model.tokenizer, text_model.context_length, not automatic)
        )
        record.update(kind=prepared.kind.value, prepare_s=time.perf_counter() - started)
        if prepared.prompt is None:
            return Answer("", job.trace_id, position, snapshot.version), "empty"
        log.debug("%s: %s at %s, %d prompt tokens", job.trace_id, prepared.kind.value, position, len(prepared.prompt.ids))
        planning = time.perf_counter()
        plan = await asyncio.to_thread(  # the site and retrieval scan whole files: off the loop too
            candidates.make_plan, prepared, settings, text_model.tokenizer, self._state.index,
            self._state.open_snapshots(exclude=snapshot.uri), text_model.can_score, text_model.identity, not automatic,
        )
        plan_done = time.perf_counter()
        record.update(prepare_s=plan_done - started, plan_s=plan_done - planning)
        try:
            await engine.ready()
        except asyncio.CancelledError:
            if job.reason is not None:
                raise
            return self._gave_up_warming(snapshot, position, job.trace_id)
        loaded = time.perf_counter()
        prescored, prescore_s = None, 0.0
        if plan.reach is not None and not plan.out_of_reach:  # score the contenders before decoding
            prescored = await candidates.prescore(engine, plan, prepared, text_model.tokenizer, job.trace_id)
            prescore_s = time.perf_counter() - loaded
        if (early := candidates.settled_early(plan, prescored)) is not None:  # whatever the model would decode
            record.update(settle_s=prescore_s)
            self._check_version(snapshot)
            self._tell_shown(candidates.early_why(plan, prescored, early))
            if early:
                self._cache.put(snapshot.uri, before, after, early)
                timing.saw_text()
            return Answer(early, job.trace_id, position, snapshot.version), "answered" if early else "out_of_reach"
        flight = self._launch(key, snapshot, offset, prepared, (plan, text_model.tokenizer, prescored), job.trace_id, before, after)
        text = await self._follow(flight, "", job, request_id, timing)
        result = flight.done.result()
        record.update(
            prompt_tokens=result.prompt_tokens, cached_tokens=result.cached_tokens,
            prefilled_tokens=result.prefilled_tokens, decode_steps=result.decode_steps,
            generated_tokens=len(result.token_ids), generate_s=flight.generate_s, settle_s=flight.settle_s + prescore_s,
        )
        self._check_version(snapshot)
        return Answer(text, job.trace_id, position, snapshot.version), "answered" if text else "empty"

    async def _index_or_model(self) -> None:
        """During start-up, wait for the workspace index (the prompt's cross-file context, the
        plan's names) while the model still loads, never longer: a prompt built before the model
        is ready is then the one it would have been after."""
        if self._state.index_ready.is_set():
            return
        waits = [asyncio.ensure_future(self._state.index_ready.wait()), asyncio.ensure_future(self._engine.ready())]
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for wait in waits:
                if not wait.done():
                    wait.cancel()
                elif not wait.cancelled():
                    wait.exception()  # a failed load is raised by the `ready` that follows

    def _gave_up_warming(self, snapshot: DocumentSnapshot, position: Position, trace_id: str) -> tuple[Answer, str]:
        """The client gave up while the model was loading: an empty answer, and say why."""
        self._notify(STATUS, status_params("warming", "the model is still loading"))
        return Answer("", trace_id, position, snapshot.version), "cancelled"

    def _tell_shown(self, why: str) -> None:
        """Say quietly in the client's status why the last completion showed nothing (and clear
        it once one shows something): a `glm5/status` ready with the reason as its message, sent
        only when the reason changes, and never over an engine failure's error status."""
        if why == self._last_why or self._engine.health.failing:
            return
        self._last_why = why
        self._notify(STATUS, status_params("ready", f"nothing shown: {why}" if why else None))

    def _check_version(self, snapshot: DocumentSnapshot) -> None:
        current = self._state.document_version(snapshot.uri)
        if current != snapshot.version:
            raise StaleRequest(snapshot.uri, snapshot.version, current)

    # ---- generations in flight ------------------------------------------------------------
    def _launch(
        self, key, snapshot, offset, prepared, planned: tuple[candidates.Plan, Any, candidates.Prescored | None], request_id: str,
        before: str, after: str,
    ) -> InFlight:
        """Start a generation owned by the server (it may outlive this request). A gated plan
        (candidates, reranking) publishes only its decision (see `candidates`)."""
        engine, cache = self._engine, self._cache
        plan, tokenizer, prescored = planned
        flight = InFlight(key[0], key[1], snapshot.version, snapshot.text, offset, prepared, request_id,
                          asyncio.get_running_loop().create_future())
        self._flights[key] = flight

        def on_raw(raw: str) -> None:
            if plan.gated:
                return
            text = pipeline.finish(prepared, raw)
            if text != flight.streamed:
                flight.publish(text)
            if pipeline.block_finished(raw, text):
                engine.abort(request_id)

        async def run() -> None:
            try:
                began = time.perf_counter()
                beside = candidates.score_retrieved(engine, plan, prepared, tokenizer, request_id)  # scored during the decode
                result = await engine.generate(plan.request(request_id, prepared.sampling), on_raw)
                flight.generate_s = time.perf_counter() - began
                if result.finish_reason is FinishReason.ABORT:
                    text = "" if plan.gated else pipeline.finish(prepared, result.text)
                else:
                    settling = time.perf_counter()
                    decision = await candidates.settle(engine, plan, prepared, result, tokenizer, prescored, beside)
                    flight.settle_s = time.perf_counter() - settling
                    text = decision.text
                    self._tell_shown(decision.why)
            except BaseException as exc:
                flight.done.set_exception(exc)
                raise
            finally:
                if self._flights.get(key) is flight:
                    del self._flights[key]
            flight.publish(text)
            if result.finish_reason is not FinishReason.ABORT or text:
                cache.put(key[0], before, after, text)
            flight.done.set_result(result)

        self._background(run())
        return flight

    async def _follow(self, flight: InFlight, typed: str, job: Job, request_id: int | str, timing: _Timing) -> str:
        """Await `flight`, streaming its text minus `typed` to this request; returns the rest."""
        last = ""

        def on_text(text: str) -> None:
            nonlocal last
            rest = remainder(text, typed)
            if job.reason is not None or not rest:
                return
            timing.saw_text()
            if self._settings().streaming and rest != last:
                last = rest
                self._notify(PROGRESS, {"requestId": request_id, "text": rest})

        flight.listeners.append(on_text)
        if flight.streamed:
            on_text(flight.streamed)
        try:
            await asyncio.shield(flight.done)
        except asyncio.CancelledError:
            if job.reason is None and not flight.done.done() and self._state.document_version(flight.uri) == flight.version:
                self._drop((flight.uri, flight.channel))  # the client gave up and nothing was typed
            raise
        finally:
            flight.listeners.remove(on_text)
        return remainder(flight.streamed, typed)

    def _drop(self, key: tuple[str, str]) -> None:
        flight = self._flights.pop(key, None)
        if flight is not None and not flight.done.done():
            self._engine.abort(flight.request_id)

    def document_changed(self, uri: str) -> None:
        """After an edit: keep the document's flights that the edit typed into, abort the rest."""
        document = self._state.documents.get(uri)
        for key, flight in list(self._flights.items()):
            if key[0] != uri or flight.done.done():
                continue
            if document is None:
                self._drop(key)
                continue
            text = document.text
            if typed_into(flight, text, flight.offset + len(text) - len(flight.text)) is None:
                self._drop(key)

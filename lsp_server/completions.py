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
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from context.positions import Position
from model_runtime.api import FinishReason

from . import candidates, pipeline
from .errors import Glm5Error, StaleRequest, Superseded
from .inflight import InFlight, remainder, typed_into
from .jobs import Job
from .progress import send_status
from .stats import RequestRecord

if TYPE_CHECKING:
    from context.document import DocumentSnapshot

    from .server import Glm5Server

log = logging.getLogger(__name__)

PROGRESS = "glm5/inlineCompletionProgress"
CACHE_WINDOW = 512


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
    def __init__(self, ls: Glm5Server) -> None:
        self._ls = ls
        self._flights: dict[tuple[str, str], InFlight] = {}

    async def complete(
        self, uri: str, position: Position, request_id: int | str, channel: str = "inline", automatic: bool = True
    ) -> Answer:
        """Complete at `position`; `request_id` is the LSP id echoed in progress notifications."""
        ls = self._ls
        timing = _Timing()
        snapshot = ls.snapshot(uri)
        position = snapshot.position_at(snapshot.offset_at(position))
        ls.cursors.update(uri, position, snapshot.version)
        outcome = "failed"
        record: dict[str, object] = {}
        try:
            async with ls.jobs.run(uri, snapshot.version, channel) as job:
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
            ls.stats.record(
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
        ls = self._ls
        offset = snapshot.offset_at(position)
        before = snapshot.text[max(0, offset - CACHE_WINDOW) : offset]
        after = snapshot.text[offset : offset + CACHE_WINDOW]
        cached = ls.cache.get(snapshot.uri, before, after)
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
        if automatic and ls.settings.debounce_ms:
            await asyncio.sleep(ls.settings.debounce_ms / 1000)
        try:
            handle = await ls.engine.ready()
        except asyncio.CancelledError:
            if job.reason is not None:
                raise
            # the client gave up while the model was loading: an empty answer, and say why
            send_status(ls, "warming", "the model is still loading")
            return Answer("", job.trace_id, position, snapshot.version), "cancelled"
        started = time.perf_counter()
        prepared = await self._prepare(snapshot, position, handle, force=not automatic)
        record.update(kind=prepared.kind.value, prepare_s=time.perf_counter() - started)
        if prepared.prompt is None:
            return Answer("", job.trace_id, position, snapshot.version), "empty"
        log.debug("%s: %s at %s, %d prompt tokens", job.trace_id, prepared.kind.value, position, len(prepared.prompt.ids))
        plan = await asyncio.to_thread(  # the site and retrieval scan whole files: off the loop too
            candidates.make_plan, prepared, ls.settings, handle.tokenizer, ls.index, ls.open_snapshots(exclude=snapshot.uri), ls.engine.can_score
        )
        record.update(prepare_s=time.perf_counter() - started)
        flight = self._launch(key, snapshot, offset, prepared, (plan, handle.tokenizer), job.trace_id, before, after)
        text = await self._follow(flight, "", job, request_id, timing)
        result = flight.done.result()
        record.update(
            prompt_tokens=result.prompt_tokens, cached_tokens=result.cached_tokens,
            prefilled_tokens=result.prefilled_tokens, decode_steps=result.decode_steps,
            generated_tokens=len(result.token_ids),
        )
        self._check_version(snapshot)
        return Answer(text, job.trace_id, position, snapshot.version), "answered" if text else "empty"

    async def _prepare(self, snapshot: DocumentSnapshot, position: Position, handle, force: bool) -> pipeline.Prepared:
        """Build the prompt on a worker thread (a large file must not stall the event loop), which
        also parses a large document's latest version if nothing did yet."""
        return await asyncio.to_thread(self._ls.prepare_later(snapshot, position, handle, force))

    def _check_version(self, snapshot: DocumentSnapshot) -> None:
        current = self._ls.document_version(snapshot.uri)
        if current != snapshot.version:
            raise StaleRequest(snapshot.uri, snapshot.version, current)

    # ---- generations in flight ------------------------------------------------------------
    def _launch(self, key, snapshot, offset, prepared, planned: tuple[candidates.Plan, Any], request_id: str, before: str, after: str) -> InFlight:
        """Start a generation owned by the server (it may outlive this request). A gated plan
        (candidates, reranking) publishes only its decision (see `candidates`)."""
        ls = self._ls
        plan, tokenizer = planned
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
                ls.engine.abort(request_id)

        async def run() -> None:
            try:
                result = await ls.engine.generate(plan.request(request_id, prepared.sampling), on_raw)
                if result.finish_reason is FinishReason.ABORT:
                    text = "" if plan.gated else pipeline.finish(prepared, result.text)
                else:
                    text = (await candidates.settle(ls.engine, plan, prepared, result, tokenizer)).text
            except BaseException as exc:
                flight.done.set_exception(exc)
                raise
            finally:
                if self._flights.get(key) is flight:
                    del self._flights[key]
            flight.publish(text)
            if result.finish_reason is not FinishReason.ABORT or text:
                ls.cache.put(key[0], before, after, text)
            flight.done.set_result(result)

        ls.background(run())
        return flight

    async def _follow(self, flight: InFlight, typed: str, job: Job, request_id: int | str, timing: _Timing) -> str:
        """Await `flight`, streaming its text minus `typed` to this request; returns the rest."""
        ls = self._ls
        last = ""

        def on_text(text: str) -> None:
            nonlocal last
            rest = remainder(text, typed)
            if job.reason is not None or not rest:
                return
            timing.saw_text()
            if ls.settings.streaming and rest != last:
                last = rest
                ls.protocol.notify(PROGRESS, {"requestId": request_id, "text": rest})

        flight.listeners.append(on_text)
        if flight.streamed:
            on_text(flight.streamed)
        try:
            await asyncio.shield(flight.done)
        except asyncio.CancelledError:
            if job.reason is None and not flight.done.done() and ls.document_version(flight.uri) == flight.version:
                self._drop((flight.uri, flight.channel))  # the client gave up and nothing was typed
            raise
        finally:
            flight.listeners.remove(on_text)
        return remainder(flight.streamed, typed)

    def _drop(self, key: tuple[str, str]) -> None:
        flight = self._flights.pop(key, None)
        if flight is not None and not flight.done.done():
            self._ls.engine.abort(flight.request_id)

    def document_changed(self, uri: str) -> None:
        """After an edit: keep the document's flights that the edit typed into, abort the rest."""
        document = self._ls.documents.get(uri)
        for key, flight in list(self._flights.items()):
            if key[0] != uri or flight.done.done():
                continue
            if document is None:
                self._drop(key)
                continue
            text = document.text
            if typed_into(flight, text, flight.offset + len(text) - len(flight.text)) is None:
                self._drop(key)

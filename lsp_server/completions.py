"""The completion service behind `textDocument/inlineCompletion` and `textDocument/completion`.

Role: for one request: snapshot the document, register a cancel-previous job, answer from the
type-through cache when possible, otherwise debounce automatic triggers, wait for the model,
build the prompt (`pipeline`), generate with streaming, post-process, and record stats.

Invariants:
- Never answers with text for an old version: a didChange aborts the job (StaleRequest), and
  the version is checked again before answering.
- A superseded, stale or cancelled request stops before the engine if it is still debouncing
  or waiting for the model, and between decode steps otherwise. A request the client cancels
  while the model is still loading is answered empty, with a `glm5/status` saying why.
- Streaming progress notifications (`glm5/inlineCompletionProgress`) carry post-processed text,
  only go to clients that opted in, and only for the request's current document version.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from context.positions import Position
from model_runtime.api import GenerationRequest

from . import pipeline
from .errors import Glm5Error, StaleRequest, Superseded
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
                answer, outcome = await self._answer(job, snapshot, position, request_id, automatic, timing, record)
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
    ) -> tuple[Answer, str]:
        """The answer and its outcome. A cache hit answers at once; otherwise an automatic
        request is debounced first, and an explicit one completes even where EMPTY."""
        ls = self._ls
        offset = snapshot.offset_at(position)
        before = snapshot.text[max(0, offset - CACHE_WINDOW) : offset]
        after = snapshot.text[offset : offset + CACHE_WINDOW]
        cached = ls.cache.get(snapshot.uri, before, after)
        if cached is not None:
            timing.saw_text()
            return Answer(cached, job.trace_id, position, snapshot.version), "cache_hit"
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
        prepared = ls.prepare(snapshot, position, handle, force=not automatic)
        record.update(kind=prepared.kind.value, prepare_s=time.perf_counter() - started)
        if prepared.prompt is None:
            return Answer("", job.trace_id, position, snapshot.version), "empty"
        log.debug("%s: %s at %s, %d prompt tokens", job.trace_id, prepared.kind.value, position, len(prepared.prompt.ids))
        on_text = self._streamer(job, prepared, request_id, timing)
        result = await ls.engine.generate(
            GenerationRequest(job.trace_id, tuple(prepared.prompt.ids), prepared.sampling), on_text
        )
        record.update(
            prompt_tokens=result.prompt_tokens, cached_tokens=result.cached_tokens,
            prefilled_tokens=result.prefilled_tokens, decode_steps=result.decode_steps,
            generated_tokens=len(result.token_ids),
        )
        current = ls.document_version(snapshot.uri)
        if current != snapshot.version:
            raise StaleRequest(snapshot.uri, snapshot.version, current)
        text = pipeline.finish(prepared, result.text)
        ls.cache.put(snapshot.uri, before, after, text)
        if text:
            timing.saw_text()
        return Answer(text, job.trace_id, position, snapshot.version), "answered" if text else "empty"

    def _streamer(
        self, job: Job, prepared: pipeline.Prepared, request_id: int | str, timing: _Timing
    ) -> Callable[[str], None]:
        ls = self._ls
        last = ""

        def on_text(raw: str) -> None:
            nonlocal last
            if job.reason is not None:
                return
            text = pipeline.finish(prepared, raw)
            if text:
                timing.saw_text()
            if ls.settings.streaming and text and text != last:
                last = text
                ls.protocol.notify(PROGRESS, {"requestId": request_id, "text": text})
            if pipeline.block_finished(raw, text):
                ls.engine.abort(job.trace_id)

        return on_text

"""Debounced per-document analysis: undeclared-symbol diagnostics and the index refresh.

Role: after the last edit of a document settles (`diagnosticsDebounceMs`), re-tag it into the
workspace index (so definitions/references and cross-file context see unsaved text, up to
`context.tags.MAX_BUFFER_TAG_CHARS`) and
publish its undeclared symbols as diagnostics (source "glm5", code "undeclared-symbol",
`data = {"name", "kind"}`), each of which gets a "Declare `x`" code action.

Invariants: the analysis runs on a worker thread (the event loop keeps answering requests) on
an immutable snapshot, and pyflakes' parse and check of a Python document run in a separate
process (`PythonChecker`): they hold the interpreter lock for seconds on a large file, and in the
server's process that would pause the event loop and every completion; diagnostics are published for the version they were computed on, and
only if the document is still at that version (a newer edit reschedules). Documents over
`MAX_ANALYSED_CHARS` get no undeclared-symbol analysis (pyflakes takes ~35 s on 5 MB). A
failure in the analysis of one document is logged and never reaches the others or the server.
An analysis due while a completion is being answered waits for it (the server bounds the wait
by `HOLD_MAX_S`): both
are Python on two cores and one interpreter lock, and the completion is what the user waits for
(the file opened at start-up is analysed while the model loads and the first completion runs).
"""

from __future__ import annotations

import asyncio
import logging
import multiprocessing
from collections.abc import Awaitable, Callable, Coroutine
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from typing import Any

from context.document import DocumentSnapshot
from context.index import WorkspaceIndex
from context.symbols import python_undefined_names, undeclared_symbols
from context.tags import MAX_BUFFER_TAG_CHARS
from lsprotocol import types

from .encoding import PositionEncoding
from .settings import ServerSettings
from .state import WorkspaceState

log = logging.getLogger(__name__)

SOURCE = "glm5"
UNDECLARED = "undeclared-symbol"
MAX_ANALYSED_CHARS = 1_000_000
HOLD_MAX_S = 5.0  # the longest an analysis waits for completions


class _Replaced(Exception):
    """A document's pyflakes check gave way to the check of its newer version."""


class PythonChecker:
    """pyflakes in one worker process (spawned on first use, again after it died), so its parse
    and check never hold this process's interpreter lock. At most one check per document waits:
    a newer version's check cancels the older one if it has not started. The caller awaits the
    returned future on the event loop, so no thread is held while the process works."""

    def __init__(self) -> None:
        self._pool: ProcessPoolExecutor | None = None
        self._waiting: dict[str, Future[list[tuple[str, int, int]]]] = {}

    def check(self, uri: str, text: str, filename: str) -> Future[list[tuple[str, int, int]]]:
        if (older := self._waiting.pop(uri, None)) is not None:
            older.cancel()
        try:
            future = self._executor().submit(python_undefined_names, text, filename)
        except BrokenProcessPool:  # the worker died: a new one
            self._pool = None
            future = self._executor().submit(python_undefined_names, text, filename)
        self._waiting[uri] = future
        future.add_done_callback(lambda done: self._waiting.pop(uri, None) if self._waiting.get(uri) is done else None)
        return future

    def close(self) -> None:
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)

    def _executor(self) -> ProcessPoolExecutor:
        if self._pool is None:
            self._pool = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"))
        return self._pool


class Analysis:
    """Analyses the documents of `state` under `settings()`; `publish` sends diagnostics to the
    client and `background` runs (and keeps, and logs the failure of) one analysis."""

    def __init__(
        self, state: WorkspaceState, settings: Callable[[], ServerSettings],
        publish: Callable[[types.PublishDiagnosticsParams], None], background: Callable[[Coroutine[Any, Any, Any]], Any],
        wait_for_completions: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self._state = state
        self._wait_for_completions = wait_for_completions  # returns once none is being answered
        self._settings = settings
        self._publish = publish
        self._background = background
        self._timers: dict[str, asyncio.TimerHandle] = {}
        self.python = PythonChecker()

    def schedule(self, uri: str) -> None:
        if (timer := self._timers.pop(uri, None)) is not None:
            timer.cancel()
        delay = self._settings().diagnostics_debounce_ms / 1000
        self._timers[uri] = asyncio.get_running_loop().call_later(delay, self._run, uri)

    def closed(self, uri: str) -> None:
        """Forget a closed document: clear its diagnostics (the state re-read it from disk)."""
        if (timer := self._timers.pop(uri, None)) is not None:
            timer.cancel()
        self._publish(types.PublishDiagnosticsParams(uri=uri, diagnostics=[]))

    def refresh_all(self) -> None:
        for uri in list(self._state.documents):
            self.schedule(uri)

    def _run(self, uri: str) -> None:
        self._timers.pop(uri, None)
        if uri in self._state.documents:
            self._background(self._analyse(uri))

    async def _analyse(self, uri: str) -> None:
        state = self._state
        if self._wait_for_completions is not None:
            await self._wait_for_completions()
            if uri not in state.documents:
                return
        snapshot, enabled = state.snapshot(uri), self._settings().diagnostics
        try:
            names = await self._python_names(snapshot) if enabled else None
            diagnostics = await asyncio.to_thread(self._compute, snapshot, state.index, enabled, state.encoding, names)
        except _Replaced:
            return
        except Exception:
            log.exception("analysis of %s failed", uri)
            return
        if state.document_version(uri) == snapshot.version:
            self._publish(types.PublishDiagnosticsParams(uri=uri, diagnostics=diagnostics, version=snapshot.version))

    async def _python_names(self, snapshot: DocumentSnapshot) -> list[tuple[str, int, int]] | None:
        """pyflakes' undefined names of a Python document, from the checker's process (None for
        another language or a document too large to analyse)."""
        if snapshot.language is None or snapshot.language.name != "python" or len(snapshot.text) > MAX_ANALYSED_CHARS:
            return None
        future = self.python.check(snapshot.uri, snapshot.text, snapshot.path or "<document>")
        try:
            return await asyncio.wrap_future(future)
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if future.cancelled() and not (task is not None and task.cancelling()):
                raise _Replaced from None  # a newer version's check took its place
            raise

    @staticmethod
    def _compute(
        snapshot: DocumentSnapshot, index: WorkspaceIndex | None, enabled: bool, encoding: PositionEncoding,
        python_names: list[tuple[str, int, int]] | None,
    ) -> list[types.Diagnostic]:
        """Worker thread: refresh the index with the editor's text, find undeclared symbols (on
        its own copy of the tree: tree-sitter trees are not thread-safe); a Python document's
        undefined names come from the checker's process (`python_names`)."""
        if index is not None and snapshot.path is not None and len(snapshot.text) <= MAX_BUFFER_TAG_CHARS:
            index.update_buffer(Path(snapshot.path), snapshot.text)
        if not enabled:
            return []
        if len(snapshot.text) > MAX_ANALYSED_CHARS:
            log.info("%s: %d characters, too large for undeclared-symbol analysis", snapshot.uri, len(snapshot.text))
            return []
        snapshot = snapshot.with_own_tree()
        return [
            types.Diagnostic(
                range=encoding.range_out(snapshot.lines, symbol.range),
                message=f"`{symbol.name}` is not declared",
                severity=types.DiagnosticSeverity.Warning,
                source=SOURCE,
                code=UNDECLARED,
                data={"name": symbol.name, "kind": symbol.kind},
            )
            for symbol in undeclared_symbols(snapshot, index, lambda _text, _name: python_names or [])
        ]

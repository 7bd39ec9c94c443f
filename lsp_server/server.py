"""`Glm5Server`: the language server, and `build_server()` which wires the features.

Role: holds the services the handlers share: settings, the workspace state (`state`:
documents, roots, index, cursors, recent edits; see `lsp_server.state`), the engine client,
in-flight completion jobs, the completion cache and local statistics. Handlers (one feature
per file in `features/`) stay thin and call into the state and the services.

Invariants:
- Only `WorkspaceState`'s methods change documents, roots and the index; the read-only
  properties here (`documents`, `index`, ...) are views of it.
- The index may be None until the background start-up has built it; readers handle that.
- Background tasks are kept until they end, and their failures are logged.
- No torch at import: the engine is loaded by `EngineClient` on a worker thread.
"""

from __future__ import annotations

import asyncio
import logging
import sys
from collections.abc import Callable, Coroutine, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, BinaryIO

from context.cursor import CursorTracker
from context.document import Document, DocumentSnapshot
from context.edits import RecentEdits
from context.index import WorkspaceIndex
from context.positions import Position
from lsprotocol import types
from model_runtime.remote.config import RemoteConfig
from pygls.lsp.server import LanguageServer

from . import __version__, pipeline, structure
from .analysis import HOLD_MAX_S, Analysis
from .completion_cache import CompletionCache
from .completions import Completions
from .engine_client import EngineClient, ModelHandle, ModelLoader, RuntimeOptions, TextLoader, load_runtime, load_text, no_text
from .errors import Glm5Error, StaleRequest, Superseded
from .fixer import Fixer
from .health import EngineHealth
from .framing import ResyncingInput
from .jobs import CompletionJobs
from .pipeline import Prepared
from .progress import send_status
from .protocol import Glm5Protocol
from .settings import ServerSettings
from .startup import save_index
from .state import WorkspaceState
from .stats import ServerStats

log = logging.getLogger(__name__)


class Glm5Server(LanguageServer):
    def __init__(
        self, loader: ModelLoader = load_runtime, model: str | None = None, device: str | None = None, dtype: str | None = None,
        mtp: bool = False, engine_url: RemoteConfig | None = None, text_loader: TextLoader | None = None,
    ) -> None:
        super().__init__(
            name="glm5-lsp",
            version=__version__,
            protocol_cls=Glm5Protocol,
            converter_factory=structure.converter,
            text_document_sync_kind=types.TextDocumentSyncKind.Incremental,
        )
        self.cli_model = model
        self.cli_device = device
        self.cli_dtype = dtype
        self.cli_mtp = mtp
        self.cli_engine = engine_url
        self.settings = ServerSettings()
        self.state = WorkspaceState()
        if text_loader is None:  # another loader's tokenizer may differ from the checkpoint's own
            text_loader = load_text if loader is load_runtime else no_text
        self.engine = EngineClient(loader, EngineHealth(self._engine_health_changed), text_loader)
        self.jobs = CompletionJobs()
        self.cache = CompletionCache(self.settings.cache_size)
        self.stats = ServerStats()
        self.analysis = Analysis(
            self.state, self.current_settings, self.text_document_publish_diagnostics, self.background,
            lambda: self.completions.idle(HOLD_MAX_S),
        )
        self.completions = Completions(
            self.state, self.engine, self.jobs, self.cache, self.stats, self.current_settings, self.notify, self.background
        )
        self.fixer = Fixer(self.state, self.engine, self.current_settings, self.busy)
        self.startup_task: asyncio.Task[None] | None = None
        self.announced_ready = False  # start-up sent `glm5/status ready`
        self._busy = 0
        self._tasks: set[asyncio.Task[Any]] = set()

    @property
    def model_path(self) -> str | None:
        return self.cli_model or self.settings.model

    @property
    def runtime_options(self) -> RuntimeOptions:
        return RuntimeOptions(
            self.cli_device or self.settings.device, self.cli_dtype or self.settings.dtype, self.cli_mtp or self.settings.mtp,
            self.cli_engine.over(self.settings.engine) if self.cli_engine else self.settings.engine, threads=self.settings.threads,
            compile_decode=self.settings.compile_decode,
        )

    # ---- read-only views of the workspace state ----------------------------------------------
    @property
    def documents(self) -> Mapping[str, Document]:
        return self.state.documents

    @property
    def roots(self) -> list[Path]:
        return self.state.roots

    @property
    def index(self) -> WorkspaceIndex | None:
        return self.state.index

    @property
    def index_ready(self) -> asyncio.Event:
        return self.state.index_ready

    @property
    def cursors(self) -> CursorTracker:
        return self.state.cursors

    @property
    def recent_edits(self) -> RecentEdits:
        return self.state.recent_edits

    def snapshot(self, uri: str) -> DocumentSnapshot:
        return self.state.snapshot(uri)

    def document_version(self, uri: str) -> int | None:
        return self.state.document_version(uri)

    def open_snapshots(self, exclude: str | None = None) -> list[DocumentSnapshot]:
        return self.state.open_snapshots(exclude)

    def current_settings(self) -> ServerSettings:
        """The settings now (a new object after each configuration change)."""
        return self.settings

    def notify(self, method: str, params: Any) -> None:
        """A notification to the client (the features' narrow way to talk to it)."""
        self.protocol.notify(method, params)

    @contextmanager
    def busy(self, message: str) -> Iterator[None]:
        """`glm5/status busy` during long work (fixes, re-indexing), then back to ready.

        Only once start-up has said "ready": while warming, start-up owns the status.
        """
        announce = self.announced_ready
        self._busy += announce
        if announce and self._busy == 1:
            send_status(self, "busy", message)
        try:
            yield
        finally:
            self._busy -= announce
            if announce and self._busy == 0:
                send_status(self, "ready")

    def background(self, work: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        """Run `work` as a task the server keeps a reference to until it ends; its failure is
        logged (a typed error as a warning, anything else with its traceback)."""
        task = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)
        return task

    def _task_done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if task.cancelled() or (error := task.exception()) is None:
            return
        if isinstance(error, Glm5Error):
            log.warning("background task %s: %s", task.get_name(), error)
        else:
            log.error("background task %s failed: %s", task.get_name(), error, exc_info=error)

    def prepare(self, snapshot: DocumentSnapshot, position: Position, handle: ModelHandle, force: bool = False) -> Prepared:
        """The completion pipeline's request for `position`, with all of the server's context."""
        return self.prepare_later(snapshot, position, handle, force)()

    def prepare_later(
        self, snapshot: DocumentSnapshot, position: Position, handle: ModelHandle, force: bool = False
    ) -> Callable[[], Prepared]:
        """`pipeline.prepare_later` with the server's state and settings."""
        return pipeline.prepare_later(self.state, self.settings, snapshot, position, handle.tokenizer, handle.context_length, force)

    def _engine_health_changed(self, ok: bool, message: str) -> None:
        """Repeated engine failures are `glm5/status error`; the first success after them, ready."""
        log.log(logging.INFO if ok else logging.ERROR, "engine health: %s", message)
        if ok:
            send_status(self, "ready", message)
        else:
            send_status(self, "error", f"{message}; completions fail until it recovers (see the server log)")

    def report_server_error(self, error: Exception, source: object) -> None:
        """Errors outside a request's answer: logged; undecodable input is answered."""
        if isinstance(error, Superseded | StaleRequest):
            log.debug("%s", error)
        elif isinstance(error, Glm5Error):
            log.warning("%s", error)
        else:
            log.error("%s: %s", getattr(source, "__name__", source), error)
        self.protocol.report_bad_input(error)

    def start_io(self, stdin: BinaryIO | None = None, stdout: BinaryIO | None = None) -> None:
        """Serve over stdio, re-synchronising on the next header after a framing error."""
        super().start_io(ResyncingInput(stdin or sys.stdin.buffer), stdout)

    def shutdown_runtime(self) -> None:
        """Stop the watcher and the engine; save the index's snapshot for the next start."""
        self.state.stop_watcher()
        self.analysis.python.close()
        if self.state.index is not None:
            save_index(self.state.index)
        self.engine.shutdown()


def build_server(
    model: str | None = None, device: str | None = None, loader: ModelLoader = load_runtime, dtype: str | None = None,
    mtp: bool = False, engine_url: RemoteConfig | None = None, text_loader: TextLoader | None = None,
) -> Glm5Server:
    from .features import register_all

    server = Glm5Server(loader=loader, model=model, device=device, dtype=dtype, mtp=mtp, engine_url=engine_url, text_loader=text_loader)
    register_all(server)
    return server

"""Background start-up after `initialized`: index the workspace, load the model, warm it up.

Role: runs as one task so the server answers requests meanwhile. Indexing and model loading
run in parallel on worker threads; as soon as the model is loaded the engine's persistent KV
store is bound to the workspace (blocks cached by an earlier session are reused), before any
completion runs: completions arriving meanwhile wait for it (bounded); then `engine.warmup` runs forwards over
representative workspace text (the most-imported definitions and the open files), the stable
start of each open file's prompt is prefilled, and one completion goes through the whole
pipeline (prompt builder, engine, post-processing) so the first real completion finds every
code path and the prompt's stable prefix already warm. The warm-up holds while a user's
completion is being answered, also before that one reaches the engine (building its prompt):
on a restart the first completion is the user's, not the warm-up's.
The index starts from the workspace's saved snapshot (`context.index_snapshot`, beside the
persistent KV cache): a restart parses only the files changed since, so indexing no longer
competes with loading the model for the interpreter. The snapshot is saved after each build and
at shutdown. Each phase is shown with work-done progress; `glm5/status` says warming -> ready (or error);
each phase's duration (load, index, store, warmup, and ready since `initialized`) is in
`glm5.stats` under `startup_ms`.

Invariants: a failing phase is reported (status "error" with the reason, and a message to the
user) and never stops the server; completions waiting for the model then get the error.
`index_ready` is set whether or not indexing succeeded, also when any phase raises (the whole
sequence runs under `run_start_up`'s guard). A watcher that cannot start (a vanished root, the
inotify limit) is reported; the index serves without live updates.
"""

from __future__ import annotations

import asyncio
import gc
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from context import index_snapshot
from context.index import Progress, WorkspaceIndex
from context.watcher import IndexWatcher
from lsprotocol import types
from model_runtime.api import GenerationRequest
from model_runtime.kvstore.paths import cache_root, workspace_id

from . import pipeline
from .engine_client import ModelHandle, embedded_model_path
from .errors import Glm5Error
from .progress import WorkDone, send_status, throttled
from .tokens import clean

if TYPE_CHECKING:
    from .server import Glm5Server

log = logging.getLogger(__name__)

WARMUP_DEFINITIONS = 8
WARMUP_CHARS = 4000
PREFILL_FILES = 4
PROGRESS_INTERVAL_S = 0.1  # indexing progress is reported at most this often (and at its end)


def locate_model(ls: Glm5Server) -> str | None:
    """--model, else initializationOptions.model, else the embedded default (worker thread).
    With a remote engine: the model directory for its tokenizer, else "" (the engine's /tokenize)."""
    if ls.runtime_options.remote is not None:
        return ls.model_path or ""
    return ls.model_path or embedded_model_path()


async def run_start_up(ls: Glm5Server) -> None:
    """`start_up` under a guard: whatever phase raises is reported as status "error", and
    `index_ready` is always set so nothing waits for the index forever."""
    try:
        await start_up(ls)
    except Exception as exc:
        log.exception("start-up failed")
        _fail(ls, f"start-up failed: {type(exc).__name__}: {exc}")
    finally:
        ls.index_ready.set()


async def start_up(ls: Glm5Server) -> None:
    """The start-up sequence; the model load must already have been started (`initialized`)."""
    send_status(ls, "warming", "indexing the workspace and loading the model", 0.0)
    started = ls.stats.startup_began()
    ls.engine.expect_store()  # completions from now on wait (bounded) for the persisted KV store
    model = asyncio.ensure_future(load_and_bind(ls))
    with ls.stats.phase("index"):
        await build_index(ls, ls.roots)
    handle = await model
    if handle is None:
        return
    if ls.settings.warmup:
        with ls.stats.phase("warmup"):
            await warm_up(ls)
    freeze_heap()
    send_status(ls, "ready", f"model {handle.path}{handle.notice}")
    ls.stats.startup_ended(started)
    ls.announced_ready = True


async def load_and_bind(ls: Glm5Server) -> ModelHandle | None:
    """Load the model, then bind the persistent KV store at once: it needs only the roots, not
    the index, and must be bound before the first completion runs (or that one prefills all)."""
    with ls.stats.phase("load"):
        handle = await load_model(ls)
    with ls.stats.phase("store"):
        await open_kv_store(ls)  # also ends the wait of `expect_store` when loading failed
    freeze_heap()
    return handle


def freeze_heap() -> None:
    """Take every object alive now (torch's modules, the model, the index) out of the cyclic
    garbage collector's scans. A full collection then walks only the objects made since: before,
    one walked ~260k objects in ~0.2 s, inside whichever user request happened to trigger it (a
    restart's first completion, measured). Frozen objects are still freed by reference counting;
    only cycles among them would outlive the server's start-up state, which lives as long anyway."""
    gc.freeze()


async def build_index(ls: Glm5Server, roots: list[Path]) -> None:
    """Index `roots` on a worker thread, then swap it in and (re)start the watcher."""
    generation = ls.state.begin_index_build()
    index = WorkspaceIndex(roots)
    loop = asyncio.get_running_loop()
    try:
        async with WorkDone(ls, "glm5: indexing workspace") as work:
            percent = -1

            def report(done: int, total: int, path: str) -> None:  # on the loop
                nonlocal percent
                fraction = done / total if total else 1.0
                work.report(fraction, path)
                if not ls.announced_ready and int(fraction * 100) != percent:
                    percent = int(fraction * 100)
                    send_status(ls, "warming", f"indexing {done}/{total} files", fraction)

            def progress(done: int, total: int, path: str) -> None:  # on the worker thread
                loop.call_soon_threadsafe(report, done, total, path)

            # each report wakes the loop and sends two notifications, while the model loads beside it
            progress = throttled(progress, PROGRESS_INTERVAL_S)

            await asyncio.to_thread(build_from_snapshot, index, progress)
    except Exception as exc:
        log.exception("indexing failed")
        ls.window_log_message(types.LogMessageParams(type=types.MessageType.Error, message=f"glm5: indexing failed: {exc}"))
        ls.index_ready.set()
        return
    if not ls.state.install_index(generation, index):
        return  # the roots changed meanwhile; a newer build is running
    _start_watcher(ls, index, loop)
    freeze_heap()
    ls.index_ready.set()
    ls.analysis.refresh_all()  # re-apply unsaved open documents over what was read from disk


def index_snapshot_path(roots: Sequence[str | Path]) -> Path:
    """The workspace's index snapshot: next to its persistent KV cache (`kvstore.paths`)."""
    return cache_root() / workspace_id(roots) / "index.msgpack"


def build_from_snapshot(index: WorkspaceIndex, progress: Progress) -> None:
    """`index.build`, reusing the workspace's saved snapshot for unchanged files, then save the
    result (worker thread; a snapshot that cannot be written is logged, the index serves anyway)."""
    path = index_snapshot_path(index.roots)
    before = index.version
    index.build(progress, reuse=index_snapshot.load(path, index.roots))
    log.info("index: %d files, %d from the snapshot", len(index.files()), index.reused)
    if index.reused == len(index.files()) == index.version - before:
        index.saved_version = index.version  # every entry came from the saved file: it is current
    save_index(index)


def save_index(index: WorkspaceIndex) -> None:
    """Write `index`'s snapshot (at the end of a build and at shutdown) unless the saved one is
    still current; never raises."""
    if index.version == index.saved_version:
        return
    snapshot = index.snapshot()
    try:
        index_snapshot.save(index_snapshot_path(index.roots), snapshot)
    except (OSError, ValueError) as exc:
        log.warning("index snapshot not saved: %s", exc)
        return
    index.saved_version = snapshot.version


def _start_watcher(ls: Glm5Server, index: WorkspaceIndex, loop: asyncio.AbstractEventLoop) -> None:
    """Watch the roots for changes made outside the editor; a failure is reported, not raised."""
    watcher = IndexWatcher(index, lambda paths: _call_soon(loop, ls.analysis.refresh_all))
    try:
        watcher.start()
    except Exception as exc:  # a vanished root, the inotify limit: serve the index without live updates
        log.warning("cannot watch the workspace: %s", exc)
        ls.window_log_message(types.LogMessageParams(
            type=types.MessageType.Warning, message=f"glm5: cannot watch the workspace for changes ({exc}); re-open it to re-index",
        ))
        watcher.stop()
        return
    ls.state.watcher = watcher


async def open_kv_store(ls: Glm5Server) -> None:
    """Bind the engine's persistent KV store to the current roots (reused across restarts)."""
    try:
        directory = await ls.engine.open_workspace([str(r) for r in ls.roots])
        log.info("KV cache store: %s", directory)
    except Exception as exc:  # the disk tier is an optimisation: carry on without it
        log.warning("no persistent KV cache: %s", exc)


async def load_model(ls: Glm5Server) -> ModelHandle | None:
    try:
        async with WorkDone(ls, "glm5: loading model"):
            return await ls.engine.ready()
    except Glm5Error as exc:
        return _fail(ls, exc.message)


async def warm_up(ls: Glm5Server) -> None:
    texts = warmup_texts(ls)
    try:
        async with WorkDone(ls, "glm5: warming up") as work:

            def progress(fraction: float, message: str) -> None:
                work.report(fraction * 0.9, message)
                send_status(ls, "warming", message, fraction)

            report = await ls.engine.warmup(texts, progress, hold=lambda: ls.completions.busy)
            log.info("warm-up: %s", report)
            work.report(0.92, "stable context")
            await ls.completions.idle()
            await _prefill_stable_context(ls)
            work.report(0.95, "first completion")
            await ls.completions.idle()
            await _first_completion(ls)
    except Exception as exc:  # warm-up is an optimisation: log and carry on
        log.exception("warm-up failed")
        ls.window_log_message(types.LogMessageParams(type=types.MessageType.Warning, message=f"glm5: warm-up failed: {exc}"))


def warmup_texts(ls: Glm5Server) -> list[str]:
    """The most-imported definitions of the workspace, then the open files (bounded)."""
    texts: list[str] = []
    if ls.index is not None:
        texts += [d.text_snippet[:WARMUP_CHARS] for d in ls.index.most_imported(WARMUP_DEFINITIONS) if d.text_snippet]
    texts += [s.text[:WARMUP_CHARS] for s in ls.open_snapshots() if s.text.strip()]
    return [clean(t) for t in texts] or ["def main():\n    return 0\n"]


async def _prefill_stable_context(ls: Glm5Server) -> None:
    """Prefill, for each open file, the stable start of its completion prompt (`[gMASK]<sop>` +
    the cross-file header, up to `<|code_suffix|>`): the part every keystroke's prompt shares."""
    handle = ls.engine.handle
    if handle is None:
        return
    suffix_token = handle.tokenizer.special.code_suffix
    for snapshot in ls.open_snapshots()[:PREFILL_FILES]:
        position = ls.cursors.get(snapshot.uri) or snapshot.position_at(len(snapshot.text))
        prompt = ls.prepare(snapshot, position, handle, force=True).prompt
        if prompt is not None and suffix_token in prompt.ids:
            result = await ls.engine.prefill(list(prompt.ids[: prompt.ids.index(suffix_token) + 1]))
            log.info("prefilled the stable context of %s: %s", snapshot.uri, result)


async def _first_completion(ls: Glm5Server) -> None:
    """One completion through the whole pipeline, at the cursor of an open file, not shown."""
    snapshots = ls.open_snapshots()
    handle = ls.engine.handle
    if not snapshots or handle is None:
        return
    snapshot = snapshots[0]
    position = ls.cursors.get(snapshot.uri) or snapshot.position_at(len(snapshot.text))
    prepared = ls.prepare(snapshot, position, handle, force=True)
    if prepared.prompt is not None:
        result = await ls.engine.generate(GenerationRequest("warmup-completion", tuple(prepared.prompt.ids), prepared.sampling))
        pipeline.finish(prepared, result.text)


def _fail(ls: Glm5Server, message: str) -> None:
    log.error("%s", message)
    send_status(ls, "error", message)
    ls.window_show_message(types.ShowMessageParams(type=types.MessageType.Error, message=f"glm5: {message}"))
    return None


def _call_soon(loop: asyncio.AbstractEventLoop, fn: object) -> None:
    try:
        loop.call_soon_threadsafe(fn)  # type: ignore[arg-type]
    except RuntimeError:
        log.debug("event loop closed; index change not forwarded")


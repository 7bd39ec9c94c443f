"""Keeps a `WorkspaceIndex` fresh when files change outside the editor (git, formatters, tools).

Role: a watchdog observer feeds a pending set; a flusher thread applies it to the index as one
batch once events stop arriving for `debounce_s` (or after `max_delay_s` of continuous events),
so a `git checkout` touching 500 files is one re-index batch.

Invariants:
- Only directories the index keeps are watched, each on its own (not recursively), so ignored
  trees such as node_modules cost no inotify watches; a new directory gets its watches when its
  batch is applied (its files are found by re-walking it). At most `max_watches` directories are
  watched; a failed or refused watch is logged once, and indexing goes on without it.
- Event threads only record paths; all index work happens on the flusher thread.
- Paths the index would skip (vendored or hidden directories, non-source files) are dropped when
  the event arrives; git-ignore rules are applied by the index itself.
- A failing batch or `on_change` callback is logged; the watcher keeps running.
- `stop()` stops the observer and the flusher and joins both; pending events are dropped.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

from watchdog.events import FileSystemEvent, FileSystemEventHandler
from watchdog.observers import Observer
from watchdog.observers.api import ObservedWatch

from context.ignore import is_vendored_dir
from context.index import WorkspaceIndex
from context.languages import SOURCE_EXTENSIONS

log = logging.getLogger(__name__)

ChangeCallback = Callable[[list[Path]], None]
_IGNORED_EVENTS = frozenset({"opened", "closed_no_write"})


class IndexWatcher:
    """Watches the index's roots and applies file changes to it in debounced batches."""

    def __init__(
        self,
        index: WorkspaceIndex,
        on_change: ChangeCallback | None = None,
        debounce_s: float = 0.1,
        max_delay_s: float = 2.0,
        max_watches: int = 50_000,
    ) -> None:
        self.index = index
        self.on_change = on_change
        self.debounce_s = debounce_s
        self.max_delay_s = max_delay_s
        self.max_watches = max_watches
        self._watches: dict[str, ObservedWatch] = {}
        self._watch_lock = threading.Lock()
        self._watch_failed = False
        self._cond = threading.Condition()
        self._files: set[str] = set()
        self._dirs_gone: set[str] = set()
        self._dirs_new: set[str] = set()
        self._first_event = 0.0
        self._last_event = 0.0
        self._stopping = False
        self._observer: Observer | None = None
        self._handler = _Handler(self)
        self._flusher: threading.Thread | None = None

    def start(self) -> None:
        if self._observer is not None:
            return
        self._stopping = False
        self._observer = Observer()
        self._observer.daemon = True
        for root in self.index.roots:
            self._watch_tree(root)
        self._observer.start()
        self._flusher = threading.Thread(target=self._run, name="index-watcher", daemon=True)
        self._flusher.start()

    def stop(self) -> None:
        observer, flusher = self._observer, self._flusher
        if observer is None:
            return
        observer.stop()
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        observer.join()
        if flusher is not None:
            flusher.join()
        self._observer = self._flusher = None
        with self._watch_lock:
            self._watches.clear()

    def watched(self) -> list[str]:
        """The directories being watched."""
        with self._watch_lock:
            return sorted(self._watches)

    def _watch_tree(self, top: str) -> None:
        """Watch `top` and the directories below it that the index keeps."""
        observer = self._observer
        if observer is None:
            return
        for directory in self.index.directories(top):
            with self._watch_lock:
                if directory in self._watches:
                    continue
                if len(self._watches) >= self.max_watches:
                    self._warn_once(f"more than {self.max_watches} directories; the rest are not watched")
                    return
                try:
                    self._watches[directory] = observer.schedule(self._handler, directory, recursive=False)
                except OSError as exc:
                    self._warn_once(f"cannot watch {directory}: {exc} (inotify limit? see fs.inotify.max_user_watches)")
                    return

    def _unwatch_tree(self, top: str) -> None:
        prefix = top.rstrip(os.sep) + os.sep
        with self._watch_lock:
            gone = [self._watches.pop(d) for d in list(self._watches) if d == top or d.startswith(prefix)]
        for watch in gone:
            if self._observer is not None:
                try:
                    self._observer.unschedule(watch)
                except (KeyError, OSError):
                    log.debug("index watcher: %s was no longer watched", watch.path)

    def _warn_once(self, message: str) -> None:
        if not self._watch_failed:
            self._watch_failed = True
            log.warning("index watcher: %s; changes there are indexed only on the next build", message)

    def record(self, event: FileSystemEvent) -> None:
        """Note one filesystem event (called on watchdog's thread)."""
        if event.event_type in _IGNORED_EVENTS:
            return
        moved_to = os.fsdecode(event.dest_path) if event.event_type == "moved" else ""
        source = os.fsdecode(event.src_path)
        with self._cond:
            if event.is_directory:
                if event.event_type in ("deleted", "moved") and self._inside(source, True):
                    self._dirs_gone.add(source)
                if (event.event_type == "created" or moved_to) and self._inside(moved_to or source, True):
                    self._dirs_new.add(moved_to or source)
            else:
                self._files.update(p for p in (source, moved_to) if p and self._inside(p, False))
            if self._files or self._dirs_gone or self._dirs_new:
                now = time.monotonic()
                self._first_event = self._first_event or now
                self._last_event = now
                self._cond.notify_all()

    def flush(self) -> list[Path]:
        """Apply everything pending now; returns the paths that changed."""
        with self._cond:
            files, gone, new = self._files, self._dirs_gone, self._dirs_new
            self._files, self._dirs_gone, self._dirs_new = set(), set(), set()
            self._first_event = 0.0
        changed: set[str] = set()
        for directory in sorted(gone):
            self._unwatch_tree(directory)
            changed.update(self.index.remove_tree(directory))
        for directory in sorted(new):
            self._watch_tree(directory)
            changed.update(self.index.rescan(directory))
        for path in sorted(files):
            changed.update(self._apply_file(path))
        return sorted(Path(p) for p in changed)

    def _inside(self, path: str, is_dir: bool) -> bool:
        """Whether an event path may matter: under a root, outside vendored or hidden directories,
        and (for files) a source file or a `.gitignore`."""
        root = self.index.root_of(path)
        if root is None or path == root:
            return False
        parts = Path(os.path.relpath(path, root)).parts
        if any(is_vendored_dir(part) for part in parts[: len(parts) if is_dir else -1]):
            return False
        name = parts[-1]
        return is_dir or name == ".gitignore" or os.path.splitext(name)[1].lower() in SOURCE_EXTENSIONS

    def _apply_file(self, path: str) -> list[str]:
        if os.path.basename(path) == ".gitignore":
            self._watch_tree(os.path.dirname(path))
            return self.index.rescan(os.path.dirname(path))
        if os.path.isfile(path):
            self.index.update_file(path)
        else:
            self.index.remove_file(path)
        return [path]

    def _run(self) -> None:
        while self._wait_for_batch():
            try:
                changed = self.flush()
                if changed and self.on_change is not None:
                    self.on_change(changed)
            except Exception:
                log.exception("index watcher: applying a batch of changes failed")

    def _wait_for_batch(self) -> bool:
        """Block until a batch is due (quiet for `debounce_s`, or pending `max_delay_s`); False on stop."""
        with self._cond:
            while not self._stopping:
                if not (self._files or self._dirs_gone or self._dirs_new):
                    self._cond.wait()
                    continue
                now = time.monotonic()
                due = min(self._last_event + self.debounce_s, self._first_event + self.max_delay_s)
                if now >= due:
                    return True
                self._cond.wait(due - now)
            return False


class _Handler(FileSystemEventHandler):
    def __init__(self, watcher: IndexWatcher) -> None:
        self.watcher = watcher

    def on_any_event(self, event: FileSystemEvent) -> None:
        self.watcher.record(event)


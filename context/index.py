"""The workspace index: definitions, references and imports of every source file under the roots.

Role: answers "where is `name` defined / used", "what does this file import, who imports it" and
"which definitions matter most" for cross-file context, go-to-definition-like lookups and model
warm-up. Fed by `build()` (a full walk), by the server (`update_file(path, text)` for open
buffers) and by `watcher.IndexWatcher` (changes made outside the editor).

Invariants:
- Skips what `context.ignore` says: git-ignored, vendored and hidden directories, generated or
  minified files, files over `max_file_bytes`, binary files and invalid UTF-8 (logged, never
  raised). Symbolic links are not followed.
- Thread-safe: one lock guards the tables; parsing happens outside it, so readers wait only for
  table updates. Readers get copies.
- Paths are absolute and normalised; roots are resolved (`realpath`) once.
- Open documents overlay the disk: while `open_buffer(path, text)` holds a path, reads from disk
  (a build, the watcher) leave its entry alone, so the editor's unsaved text is what the index
  answers from; `close_buffer` goes back to the file on disk.
"""

from __future__ import annotations

import builtins
import logging
import os
import re
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from context.ignore import IgnoreRules, check_text, read_source
from context.index_snapshot import Snapshot, StoredFile
from context.languages import SOURCE_EXTENSIONS, language_for
from context.positions import Position, TextIndex
from context.resolve import ImportResolver
from context.tags import Definition, FileTags, Import, Reference, tags_of_text

log = logging.getLogger(__name__)

Progress = Callable[[int, int, str], None]  # (files done, files total, current path)
MEMBER_KINDS = frozenset({"method", "field", "variant"})
_PYTHON_BUILTINS = frozenset(dir(builtins))
_WORD = re.compile(r"[A-Za-z_$][\w$]*")


@dataclass(frozen=True, slots=True)
class IndexedFile:
    path: str
    language: str
    tags: FileTags
    stamp: tuple[int, int] | None = None  # (mtime_ns, size) when read from disk; None for a buffer


class WorkspaceIndex:
    """Tags of every indexable file under `roots` (several roots allowed, nested or not)."""

    def __init__(self, roots: Iterable[str | os.PathLike[str]], max_file_bytes: int = 1_000_000) -> None:
        self.roots = tuple(dict.fromkeys(os.path.realpath(os.fspath(root)) for root in roots))
        self.max_file_bytes = max_file_bytes
        self.resolver = ImportResolver(self.roots)
        self._rules = {root: IgnoreRules(root) for root in self.roots}
        self._lock = threading.RLock()
        self._files: dict[str, IndexedFile] = {}
        self._definitions: dict[str, list[Definition]] = {}
        self._references: dict[str, list[Reference]] = {}
        self._importers: dict[str, set[str]] = {}
        self._skipped: dict[str, str] = {}
        self._buffers: set[str] = set()  # paths whose entry comes from an open editor buffer
        self._disk_copies: dict[str, IndexedFile] = {}  # open buffers: their entry as last read from disk
        self._walked: frozenset[str] = frozenset()  # the source paths the last build walked
        self.reused = 0  # entries the last build took from a snapshot instead of parsing
        self.version = 0  # bumped by every change to the tables
        self.saved_version = -1  # the version the last saved snapshot holds (see `snapshot`)

    # --- building and updating

    def build(self, progress: Progress | None = None, reuse: Snapshot | None = None) -> int:
        """Index every file under the roots (files unchanged on disk since they were indexed are
        kept); forget files no longer there. `reuse`: a saved snapshot (`context.index_snapshot`)
        whose entries stand in for parsing files unchanged since (see `_adopt`). Returns the file count."""
        candidates = sorted(set(self._walk(self.roots)))
        self._walked = frozenset(candidates)
        self.reused = self._adopt(reuse) if reuse is not None else 0
        report = _SafeProgress(progress)
        for done, path in enumerate(candidates, start=1):
            self._index_path(path, None, if_changed=True)
            report(done, len(candidates), path)
        keep = set(candidates)
        with self._lock:
            gone = [path for path in self._files if path not in keep]
        for path in gone:
            self.remove_file(path)
        return len(self.files())

    def _adopt(self, snapshot: Snapshot) -> int:
        """Install the snapshot's entries for files whose (mtime, size) still match, when the
        build walks exactly the paths it walked (imports resolve against the files present).
        Returns how many were adopted."""
        if snapshot.walked != self._walked:
            log.info("index: the workspace's files changed since the snapshot; parsing every file")
            return 0
        adopted = 0
        for stored in snapshot.files:
            with self._lock:
                known = stored.path in self._files or stored.path in self._buffers
            if (known and stored.path not in self._buffers) or _stamp(stored.path) != stored.stamp:
                continue
            entry = IndexedFile(stored.path, stored.language, stored.tags, stored.stamp)
            with self._lock:
                if stored.path in self._buffers:
                    self._disk_copies[stored.path] = entry  # the buffer's entry stays; the disk's is kept for the snapshot
                    continue
                self._install(entry)
            adopted += 1
        languages = {language_for(None, stored.path) for stored in snapshot.files}
        for language in languages - {None}:
            language.tags_query  # compiled as parsing would have: not in the first completion's retrieval
        return adopted

    def snapshot(self) -> Snapshot:
        """What `index_snapshot.save` writes: the entries read from disk (for an open editor
        buffer, its file as last read from disk, never the unsaved text) and the paths the last
        build walked, as of `version` (whoever saves it sets `saved_version` to that, so an
        unchanged index need not be written again). A restart whose editor reopens its buffers
        then parses none of them while the model loads."""
        with self._lock:
            version = self.version
            entries = [e for e in self._files.values() if e.path not in self._buffers]
            entries += [self._disk_copies[p] for p in self._buffers if p in self._disk_copies]
            files = tuple(StoredFile(e.path, e.language, e.stamp, e.tags) for e in entries if e.stamp is not None)
        return Snapshot(self.roots, self._walked, files, version)

    def update_file(self, path: str | os.PathLike[str], text: str | None = None) -> bool:
        """(Re)index one file, from `text` (an editor buffer, same size and generated-file rules) or
        from disk (skipped when its mtime and size are those already indexed). True when indexed."""
        path = self._normalise(path)
        if self.is_ignored(path) or language_for(None, path) is None:
            self.remove_file(path)
            return False
        return self._index_path(path, text, if_changed=text is None)

    def open_buffer(self, path: str | os.PathLike[str]) -> None:
        """From now until `close_buffer`, `path` is indexed only from its editor buffer
        (`update_buffer`); disk reads leave it alone."""
        path = self._normalise(path)
        with self._lock:
            self._buffers.add(path)

    def update_buffer(self, path: str | os.PathLike[str], text: str) -> bool:
        """Index the buffer text of `path` if it is still open (a late update after the editor
        closed it is dropped); True when indexed."""
        path = self._normalise(path)
        with self._lock:
            if path not in self._buffers:
                return False
        return self.update_file(path, text)

    def close_buffer(self, path: str | os.PathLike[str]) -> bool:
        """Forget the buffer of `path` and index the file on disk again (its copy read before the
        buffer opened stands in when the file is unchanged since)."""
        path = self._normalise(path)
        with self._lock:
            self._buffers.discard(path)
            copy = self._disk_copies.pop(path, None)
        if not os.path.isfile(path):
            self.remove_file(path)
            return False
        if copy is not None and _stamp(path) == copy.stamp:
            with self._lock:
                self._uninstall(path)
                self._install(copy)
            return True
        return self.update_file(path)

    def remove_file(self, path: str | os.PathLike[str]) -> None:
        """Forget `path` (an open buffer's entry stays until `close_buffer`)."""
        path = self._normalise(path)
        with self._lock:
            if path in self._buffers:
                return
            self._skipped.pop(path, None)
            self._uninstall(path)

    def remove_tree(self, directory: str | os.PathLike[str]) -> list[str]:
        """Forget every file under `directory` (deleted or moved away). Returns the paths forgotten."""
        prefix = self._normalise(directory) + os.sep
        with self._lock:
            paths = [path for path in self._files if path.startswith(prefix) and path not in self._buffers]
            for path in paths:
                self._uninstall(path)
        return paths

    def rescan(self, directory: str | os.PathLike[str]) -> list[str]:
        """Re-walk `directory` (new, moved in, or its ignore rules changed): index new and changed
        files, forget gone and newly ignored ones. Returns the paths whose entries changed."""
        directory = self._normalise(directory)
        found = set(self._walk([directory])) if not self.is_ignored(directory, is_dir=True) else set()
        prefix = directory + os.sep
        with self._lock:
            stale = [path for path in self._files if path.startswith(prefix) and path not in found]
        for path in stale:
            self.remove_file(path)
        changed = set(stale)
        for path in sorted(found):
            with self._lock:
                before = self._files.get(path)
            self._index_path(path, None, if_changed=True)
            with self._lock:
                if self._files.get(path) is not before:
                    changed.add(path)
        return sorted(changed)

    def is_ignored(self, path: str | os.PathLike[str], is_dir: bool = False) -> bool:
        """Whether `path` is outside every root or skipped by the ignore rules of its root."""
        path = self._normalise(path)
        root = self.root_of(path)
        return root is None or self._rules[root].is_ignored(path, is_dir)

    def root_of(self, path: str | os.PathLike[str]) -> str | None:
        """The innermost root containing `path`."""
        path = self._normalise(path)
        inside = [r for r in self.roots if path == r or path.startswith(r.rstrip(os.sep) + os.sep)]
        return max(inside, key=len, default=None)

    # --- queries

    def files(self) -> list[str]:
        with self._lock:
            return sorted(self._files)

    def files_in(self, directory: str | os.PathLike[str]) -> list[str]:
        """Indexed files directly inside `directory` (a Go package, say)."""
        directory = self._normalise(directory)
        with self._lock:
            return [path for path in self._files if os.path.dirname(path) == directory]

    def directories(self, top: str | os.PathLike[str]) -> Iterator[str]:
        """`top` and every directory below it that the ignore rules keep (for file watching)."""
        top = self._normalise(top)
        if self.root_of(top) is None or self.is_ignored(top, is_dir=True) and top not in self.roots:
            return
        yield top
        yield from (path for path, is_dir in self._entries([top]) if is_dir)

    def file_tags(self, path: str | os.PathLike[str]) -> FileTags | None:
        with self._lock:
            entry = self._files.get(self._normalise(path))
        return entry.tags if entry else None

    def skipped(self) -> dict[str, str]:
        """Files seen but not indexed, with the reason (size, binary, encoding, generated)."""
        with self._lock:
            return dict(self._skipped)

    def definitions(self, name: str) -> list[Definition]:
        with self._lock:
            return list(self._definitions.get(name, ()))

    def references(self, name: str) -> list[Reference]:
        with self._lock:
            return list(self._references.get(name, ()))

    def imports_of(self, path: str | os.PathLike[str]) -> list[Import]:
        tags = self.file_tags(path)
        return list(tags.imports) if tags else []

    def importers_of(self, path: str | os.PathLike[str]) -> list[str]:
        """Files whose imports resolve to `path` (or, for Go, to its package directory)."""
        path = self._normalise(path)
        with self._lock:
            found = self._importers.get(path, set()) | self._importers.get(os.path.dirname(path), set())
        return sorted(found - {path})

    def definition_at(self, path: str | os.PathLike[str], position: Position, text: str | None = None) -> list[Definition]:
        """Definitions of the name at `position` in `path`, best first: the definition itself, this
        file, files this file imports, the same directory, then everything else."""
        path = self._normalise(path)
        name = self.name_at(path, position, text)
        if name is None:
            return []
        imported = {i.resolved_path for i in self.imports_of(path) if i.resolved_path}
        directory = os.path.dirname(path)

        def rank(definition: Definition) -> tuple[int, str]:
            if definition.path == path and definition.range.contains(position):
                return 0, ""
            if definition.path == path:
                return 1, ""
            if definition.path in imported or os.path.dirname(definition.path) in imported:
                return 2, definition.path
            return (3 if os.path.dirname(definition.path) == directory else 4), definition.path

        return sorted(self.definitions(name), key=rank)

    def references_at(self, path: str | os.PathLike[str], position: Position, text: str | None = None) -> list[Reference]:
        name = self.name_at(self._normalise(path), position, text)
        return self.references(name) if name else []

    def name_at(self, path: str, position: Position, text: str | None = None) -> str | None:
        """The identifier at `position`: from the file's tags, else from its text (given or on disk)."""
        tags = self.file_tags(path)
        if tags is not None:
            for item in (*tags.definitions, *tags.references):
                if item.range.contains(position):
                    return item.name
        if text is None:
            source = read_source(path, self.max_file_bytes)
            text = source.text
        if text is None:
            return None
        line = TextIndex(text).line(position.line)
        column = TextIndex(line).offset_at(Position(0, position.character))
        for match in _WORD.finditer(line):
            if match.start() <= column <= match.end():
                return match.group()
        return None

    def most_imported(self, n: int) -> list[Definition]:
        """The `n` definitions used by the most other files (for warm-up), ambiguity discounted.
        Only free-standing definitions count (not methods or fields: calls through `x.name(...)`
        have an unknown target), and not those shadowing a builtin of their language."""
        with self._lock:
            scored: list[tuple[float, str, Definition]] = []
            for name, definitions in self._definitions.items():
                users = {r.path for r in self._references.get(name, ()) if r.kind != "method"}
                for definition in definitions:
                    if definition.kind in MEMBER_KINDS or _is_builtin(name, definition.path):
                        continue
                    others = len(users - {definition.path})
                    if others:
                        scored.append((others / len(definitions), definition.path, definition))
        scored.sort(key=lambda item: (-item[0], item[1], item[2].range.start))
        return [definition for _, _, definition in scored[:n]]

    # --- internals

    def _normalise(self, path: str | os.PathLike[str]) -> str:
        path = os.path.abspath(os.fspath(path))
        if any(path == r or path.startswith(r + os.sep) for r in self.roots):
            return path
        real = os.path.realpath(path)
        return real if any(real == r or real.startswith(r + os.sep) for r in self.roots) else path

    def _walk(self, tops: Iterable[str]) -> Iterator[str]:
        """Source files under `tops`, skipping what the ignore rules skip."""
        for path, is_dir in self._entries(tops):
            if not is_dir and os.path.splitext(path)[1].lower() in SOURCE_EXTENSIONS:
                yield path

    def _entries(self, tops: Iterable[str]) -> Iterator[tuple[str, bool]]:
        for top in tops:
            root = self.root_of(top)
            if root is None:
                continue
            rules = self._rules[root]
            stack = [top]
            while stack:
                yield from self._scan_dir(stack.pop(), rules, stack)

    def _scan_dir(self, directory: str, rules: IgnoreRules, stack: list[str]) -> Iterator[tuple[str, bool]]:
        try:
            entries = list(os.scandir(directory))
        except OSError as exc:
            log.info("index: cannot list %s: %s", directory, exc.strerror or exc)
            return
        for entry in entries:
            try:
                if entry.is_symlink():
                    continue
                is_dir = entry.is_dir()
            except OSError:
                continue
            if rules.ignored_in(directory, entry.name, is_dir):
                continue
            if is_dir:
                stack.append(entry.path)
            yield entry.path, is_dir

    def _index_path(self, path: str, text: str | None, if_changed: bool = False) -> bool:
        """Index `path` from `text` or from disk; with `if_changed`, a disk file whose mtime and
        size match the indexed copy is left alone."""
        language = language_for(None, path)
        if language is None:
            return False
        stamp = None
        if text is None:
            with self._lock:
                if path in self._buffers:
                    return True  # the editor's text wins over the disk
                entry = self._files.get(path)
            stamp = _stamp(path)
            if if_changed and entry is not None and stamp is not None and entry.stamp == stamp:
                return True
            source = read_source(path, self.max_file_bytes)
        else:
            source = check_text(path, text, self.max_file_bytes)
        if source.text is None:
            self._skip(path, source.skipped or "unreadable")
            return False
        tags = tags_of_text(language, source.text, path, self.resolver)
        with self._lock:
            previous = self._files.get(path)
            if text is not None and path in self._buffers and previous is not None and previous.stamp is not None:
                self._disk_copies[path] = previous
            self._uninstall(path)
            self._skipped.pop(path, None)
            self._install(IndexedFile(path, language.name, tags, stamp))
        return True

    def _skip(self, path: str, reason: str) -> None:
        level = logging.INFO if reason.startswith(("binary", "not valid")) else logging.DEBUG
        log.log(level, "index: skipping %s: %s", path, reason)
        with self._lock:
            self._uninstall(path)
            self._skipped[path] = reason

    def _install(self, entry: IndexedFile) -> None:
        self.version += 1
        self._files[entry.path] = entry
        for definition in entry.tags.definitions:
            self._definitions.setdefault(definition.name, []).append(definition)
        for reference in entry.tags.references:
            self._references.setdefault(reference.name, []).append(reference)
        for target in {i.resolved_path for i in entry.tags.imports if i.resolved_path}:
            self._importers.setdefault(target, set()).add(entry.path)

    def _uninstall(self, path: str) -> None:
        entry = self._files.pop(path, None)
        if entry is None:
            return
        self.version += 1
        _drop(self._definitions, Counter(d.name for d in entry.tags.definitions), path)
        _drop(self._references, Counter(r.name for r in entry.tags.references), path)
        for target in {i.resolved_path for i in entry.tags.imports if i.resolved_path}:
            importers = self._importers.get(target)
            if importers is not None:
                importers.discard(path)
                if not importers:
                    del self._importers[target]


def _stamp(path: str) -> tuple[int, int] | None:
    try:
        info = os.stat(path)
    except OSError:
        return None
    return info.st_mtime_ns, info.st_size


def _is_builtin(name: str, path: str) -> bool:
    language = language_for(None, path)
    if language is None:
        return False
    return name in (_PYTHON_BUILTINS if language.name == "python" else language.globals)


def _drop(table: dict[str, list], names: Counter[str], path: str) -> None:
    for name in names:
        kept = [item for item in table.get(name, ()) if item.path != path]
        if kept:
            table[name] = kept
        else:
            table.pop(name, None)


class _SafeProgress:
    """Calls the user's progress callback; one that raises is logged once and then dropped."""

    def __init__(self, callback: Progress | None) -> None:
        self.callback = callback

    def __call__(self, done: int, total: int, path: str) -> None:
        if self.callback is None:
            return
        try:
            self.callback(done, total, path)
        except Exception:
            log.exception("index: progress callback failed; no further progress reports")
            self.callback = None


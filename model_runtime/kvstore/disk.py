"""The cold tier: full KV blocks of one workspace and model, as files, with an LRU size cap
(plus each prefix's partial tail block, stored under a key of its prefix and replaced by later ones).

A store directory holds `blocks/<hash>.kvb` (one block per file, see `blockfile`), a msgpack
index `index.msgpack` ({hash: [bytes, last used ns]}) and a `lock` file.

Invariants:
- Block files are written (atomically) before the index names them; the index is replaced
  atomically, only while holding the exclusive `fcntl` lock, and always by merging this process's
  changes into the index as it is on disk then, so concurrent writers never lose each other's
  blocks. Readers take no lock: they see some whole index and whole files.
- A block is verified on every load (digest, fingerprint, layout, hash, token ids). A corrupt,
  truncated or foreign file is deleted with a warning and counts as a miss; nothing here raises
  for bad data on disk. A missing file (evicted by another process) is a plain miss.
- Opening a store recovers from a killed writer: it deletes leftover temporary files of dead
  processes, rebuilds an unreadable index from the block files, and adopts block files that a
  writer renamed into place but did not get to index.
- The files' total size stays within `capacity_bytes` after every index write, evicting the
  least recently used blocks first.
- No torch: payloads are buffers.
"""

from __future__ import annotations

import fcntl
import logging
import os
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import msgpack

from model_runtime.kvstore.blockfile import (
    TEMP_SUFFIX, BlockHeader, Buffer, CorruptBlock, OlderFormat, atomic_write, encode_block, read_block, read_block_tokens, read_header,
    temp_owner,
)

log = logging.getLogger(__name__)


def _report_discard(path: Path, exc: Exception) -> None:
    """A block file that is deleted instead of loaded: a warning, unless an earlier release
    wrote it (expected once after an upgrade)."""
    log.log(logging.INFO if isinstance(exc, OlderFormat) else logging.WARNING, "kv store: discarding %s: %s", path, exc)

INDEX_NAME = "index.msgpack"
INDEX_FORMAT = "glm5-lsp-kv-index"
INDEX_VERSION = 2  # 2: block files of blockfile.FORMAT_VERSION 2
BLOCK_SUFFIX = ".kvb"
STALE_TEMP_S = 3600.0  # a temporary file this old is removed even if its writer's pid is alive


class DiskStore:
    def __init__(self, directory: str | os.PathLike, fingerprint: str, layout: dict[str, Any], capacity_bytes: int) -> None:
        self.dir = Path(directory)
        self.blocks_dir = self.dir / "blocks"
        self.fingerprint, self.layout, self.capacity_bytes = fingerprint, layout, capacity_bytes
        self.entries: dict[str, list[int]] = {}  # hash hex -> [file bytes, last used ns]
        self._added: dict[str, list[int]] = {}
        self._removed: set[str] = set()
        self._touched: dict[str, int] = {}
        self._index_stamp: tuple[int, int, int] | None = None
        self.blocks_dir.mkdir(parents=True, exist_ok=True)
        with self._locked():
            self._recover()

    # ---- queries --------------------------------------------------------------------------
    def __contains__(self, block_hash: bytes) -> bool:
        """Whether the index names this block (re-reading it if another process replaced it)."""
        key = block_hash.hex()
        if key not in self.entries:
            self._refresh()
        return key in self.entries

    def knows(self, block_hash: bytes) -> bool:
        """Whether this process's view of the index names the block (no disk access)."""
        return block_hash.hex() in self.entries

    def __len__(self) -> int:
        return len(self.entries)

    @property
    def total_bytes(self) -> int:
        return sum(size for size, _ in self.entries.values())

    def get(self, block_hash: bytes, tokens: tuple[int, ...]) -> memoryview | None:
        """The verified payload of a block, or None (absent, evicted, or discarded as corrupt)."""
        found = self._read(block_hash, tokens)
        return None if found is None else found[1]

    def get_tail(self, key: bytes) -> tuple[tuple[int, ...], memoryview] | None:
        """(token ids, verified payload) of the partial block stored under `key`, or None."""
        return self._read(key, None)

    def _read(self, block_hash: bytes, tokens: tuple[int, ...] | None) -> tuple[tuple[int, ...], memoryview] | None:
        if block_hash not in self:
            return None
        key = block_hash.hex()
        path = self._path(key)
        try:
            if tokens is None:
                found = read_block_tokens(path, self.fingerprint, self.layout, block_hash)
            else:
                found = tokens, read_block(path, self.fingerprint, self.layout, block_hash, tokens)
        except FileNotFoundError:
            log.debug("kv store: block %s was evicted by another process", key)
            self._forget(key)
            return None
        except (CorruptBlock, OSError) as exc:
            _report_discard(path, exc)
            path.unlink(missing_ok=True)
            self._forget(key)
            return None
        self._touched[key] = time.time_ns()
        return found

    # ---- writes ---------------------------------------------------------------------------
    def put(self, blocks: Iterable[tuple[bytes, tuple[int, ...], list[Buffer]]], replace: bool = False) -> int:
        """Write blocks (hash, token ids, payload buffers) not already stored (with `replace`:
        overwrite them, for partial tail blocks whose key names only their prefix), then the
        index; returns how many were written. A write error (disk full, permissions) is logged
        and ends the batch; what was written is still indexed."""
        written = 0
        try:
            for block_hash, tokens, payload in blocks:
                key = block_hash.hex()
                if key in self.entries and not replace:
                    self._touched[key] = time.time_ns()
                    continue
                header = BlockHeader(self.fingerprint, block_hash, tuple(tokens), self.layout, sum(memoryview(p).nbytes for p in payload))
                size = atomic_write(self._path(key), encode_block(header, payload))
                entry = [size, time.time_ns()]
                self.entries[key] = self._added[key] = entry
                self._removed.discard(key)
                written += 1
        except OSError as exc:
            log.warning("kv store: writing blocks to %s failed: %s", self.dir, exc)
        self.commit()
        return written

    def commit(self) -> None:
        """Merge this process's additions, removals and uses into the index on disk, evict down
        to the size cap, and write the index (under the lock)."""
        if not (self._added or self._removed or self._touched):
            return
        try:
            with self._locked():
                entries = self._load_index() or {}
                for key in self._removed:
                    entries.pop(key, None)
                entries.update(self._added)
                for key, used in self._touched.items():
                    if key in entries:
                        entries[key][1] = max(entries[key][1], used)
                self._added, self._removed, self._touched = {}, set(), {}
                self.entries = entries
                self._evict()
                self._write_index()
        except OSError as exc:
            log.warning("kv store: updating the index in %s failed: %s", self.dir, exc)

    def clear(self) -> int:
        """Delete every block of this store; returns the bytes removed."""
        removed = wipe(self.dir)
        self.entries, self._added, self._removed, self._touched = {}, {}, set(), {}
        self._index_stamp = self._stat_index()
        return removed

    # ---- internals --------------------------------------------------------------------------
    def _path(self, key: str) -> Path:
        return self.blocks_dir / f"{key}{BLOCK_SUFFIX}"

    def _forget(self, key: str) -> None:
        self.entries.pop(key, None)
        self._added.pop(key, None)
        self._touched.pop(key, None)
        self._removed.add(key)

    @contextmanager
    def _locked(self) -> Iterator[None]:
        with _lock(self.dir):
            yield

    def _stat_index(self) -> tuple[int, int, int] | None:
        try:
            st = (self.dir / INDEX_NAME).stat()
        except FileNotFoundError:
            return None
        return st.st_ino, st.st_mtime_ns, st.st_size

    def _refresh(self) -> None:
        """Reload the index if another process replaced it (no lock: replacement is atomic)."""
        stamp = self._stat_index()
        if stamp is not None and stamp != self._index_stamp:
            entries = self._load_index()
            if entries is not None:
                entries.update(self._added)
                for key in self._removed:
                    entries.pop(key, None)
                self.entries = entries

    def _load_index(self) -> dict[str, list[int]] | None:
        """The index on disk, or None if it is missing or unreadable (logged)."""
        path = self.dir / INDEX_NAME
        self._index_stamp = self._stat_index()
        try:
            raw = msgpack.unpackb(path.read_bytes())
            version = raw.get("version")
            if raw.get("format") == INDEX_FORMAT and isinstance(version, int) and 0 < version < INDEX_VERSION:
                log.info("kv store: the index %s is an earlier release's (version %d); rebuilding it from the block files", path, version)
                return None
            if raw.get("format") != INDEX_FORMAT or version != INDEX_VERSION:
                raise ValueError(f"format {raw.get('format')!r} version {version!r}")
            if raw.get("fingerprint") != self.fingerprint:
                raise ValueError("it belongs to another model")
            return {str(k): [int(v[0]), int(v[1])] for k, v in raw["blocks"].items()}
        except FileNotFoundError:
            return None
        except (ValueError, KeyError, TypeError, IndexError, AttributeError, msgpack.UnpackException) as exc:
            log.warning("kv store: ignoring unreadable index %s (%s); rebuilding it from the block files", path, exc)
            return None

    def _write_index(self) -> None:
        raw = {"format": INDEX_FORMAT, "version": INDEX_VERSION, "fingerprint": self.fingerprint, "blocks": self.entries}
        atomic_write(self.dir / INDEX_NAME, [msgpack.packb(raw)])
        self._index_stamp = self._stat_index()

    def _recover(self) -> None:
        """Under the lock: drop dead writers' temporaries, reconcile the index with the files."""
        _remove_stale_temps(self.dir)
        _remove_stale_temps(self.blocks_dir)
        loaded = self._load_index()
        entries = loaded or {}
        on_disk = {p.name[: -len(BLOCK_SUFFIX)]: p for p in self.blocks_dir.iterdir() if p.name.endswith(BLOCK_SUFFIX)}
        changed = loaded is None or any(key not in on_disk for key in entries)
        entries = {key: entry for key, entry in entries.items() if key in on_disk}
        for key, path in on_disk.items():
            if key not in entries:
                adopted = self._adopt(key, path)
                if adopted is not None:
                    entries[key] = adopted
                changed = True
        self.entries = entries
        before = len(entries)
        self._evict()
        if changed or len(self.entries) != before:
            self._write_index()

    def _adopt(self, key: str, path: Path) -> list[int] | None:
        """Index entry for a block file the index does not name (its writer died before
        indexing it), or None after deleting it if it is not a valid block of this model."""
        try:
            header, size = read_header(path)
            if header.fingerprint != self.fingerprint or header.block_hash.hex() != key:
                raise CorruptBlock("foreign block (fingerprint or name differs)")
            return [size, path.stat().st_mtime_ns]
        except (CorruptBlock, OSError) as exc:
            _report_discard(path, exc)
            _unlink(path)
            return None

    def _evict(self) -> None:
        total = self.total_bytes
        if total <= self.capacity_bytes:
            return
        for key, (size, _) in sorted(self.entries.items(), key=lambda kv: kv[1][1]):
            if total <= self.capacity_bytes:
                break
            _unlink(self._path(key))
            del self.entries[key]
            total -= size


@contextmanager
def _lock(directory: Path) -> Iterator[None]:
    """The store's exclusive lock (an fcntl lock on `lock`, released when the file is closed)."""
    fd = os.open(directory / "lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def wipe(directory: Path) -> int:
    """Delete a store directory's blocks and index (under its lock, which stays); returns the
    bytes removed. Works on any store, whatever model it belongs to."""
    if not (directory / "blocks").is_dir():
        return 0
    with _lock(directory):
        removed = sum(_unlink(path) for path in (directory / "blocks").iterdir())
        return removed + _unlink(directory / INDEX_NAME)


def _unlink(path: Path) -> int:
    try:
        size = path.stat().st_size
        path.unlink()
        return size
    except FileNotFoundError:
        return 0


def _remove_stale_temps(directory: Path) -> None:
    now = time.time()
    for path in directory.iterdir():
        if not path.name.endswith(TEMP_SUFFIX):
            continue
        pid = temp_owner(path)
        try:
            old = now - path.stat().st_mtime > STALE_TEMP_S
        except FileNotFoundError:
            continue
        if pid is None or old or not _alive(pid):
            _unlink(path)


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True

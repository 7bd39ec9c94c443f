"""The workspace index on disk, so that a restart re-parses only what changed.

Role: `save(index, path)` writes every entry the index read from disk (editor buffers are left
out: their text is not on disk) with its (mtime, size) stamp, plus the list of source paths the
build walked; `load(path)` reads it back as a `Snapshot` for `WorkspaceIndex.build(reuse=...)`.
The server keeps one file per workspace next to the persistent KV cache.

Invariants:
- Plain msgpack, no pickle: reading a snapshot never runs code. A missing, truncated, corrupt or
  foreign file (another format version, other roots) loads as None, with the reason logged, and
  the build simply parses everything.
- Writes are atomic (a temporary file renamed over the old one), so a crash mid-write leaves the
  previous snapshot or none, never half of one.
- A stored entry is only ever reused for a file whose current stamp equals the stored one, and only
  when the build walks exactly the stored set of paths: imports resolve against the files present,
  so a file added or removed while the server was down makes the build parse everything again.
"""

from __future__ import annotations

import logging
import os
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import msgpack

from context.positions import Position, Range
from context.tags import Definition, FileTags, Import, Reference

log = logging.getLogger(__name__)

FORMAT = "glm5-index/1"


@dataclass(frozen=True, slots=True)
class StoredFile:
    path: str
    language: str
    stamp: tuple[int, int]  # (mtime_ns, size) when it was parsed
    tags: FileTags


@dataclass(frozen=True, slots=True)
class Snapshot:
    roots: tuple[str, ...]
    walked: frozenset[str]  # every source path the build that wrote it walked
    files: tuple[StoredFile, ...]
    version: int = 0  # the index's version it was taken at (not stored)


def save(path: str | os.PathLike[str], snapshot: Snapshot) -> None:
    """Write `snapshot` to `path` atomically (OSError on failure; the old file stays)."""
    body = {
        "format": FORMAT,
        "roots": list(snapshot.roots),
        "walked": sorted(snapshot.walked),
        "files": [_pack_file(f) for f in snapshot.files],
    }
    data = msgpack.packb(body, use_bin_type=True)
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def load(path: str | os.PathLike[str], roots: Sequence[str]) -> Snapshot | None:
    """The snapshot at `path` if it is readable, well formed and for `roots`; else None."""
    try:
        raw = msgpack.unpackb(Path(path).read_bytes(), raw=False, strict_map_key=True)
    except FileNotFoundError:
        return None
    except (OSError, ValueError, msgpack.ExtraData, msgpack.FormatError, msgpack.StackError) as exc:
        log.warning("index snapshot %s unreadable (%s): indexing from scratch", path, exc)
        return None
    try:
        snapshot = _unpack(raw)
    except (KeyError, TypeError, ValueError, IndexError) as exc:
        log.warning("index snapshot %s malformed (%s): indexing from scratch", path, exc)
        return None
    if snapshot is None or snapshot.roots != tuple(roots):
        log.info("index snapshot %s is for another format or other roots: indexing from scratch", path)
        return None
    return snapshot


# ---- encoding ---------------------------------------------------------------------------------


def _range(r: Range) -> list[int]:
    return [r.start.line, r.start.character, r.end.line, r.end.character]


def _unrange(v: list[int]) -> Range:
    a, b, c, d = (int(x) for x in v)
    return Range(Position(a, b), Position(c, d))


def _pack_file(f: StoredFile) -> dict:
    t = f.tags
    return {
        "path": f.path,
        "language": f.language,
        "stamp": list(f.stamp),
        "definitions": [[d.name, d.kind, _range(d.range), _range(d.body_range), d.text_snippet] for d in t.definitions],
        "references": [[r.name, _range(r.range), r.kind] for r in t.references],
        "imports": [[i.module, list(i.names), _range(i.range), i.resolved_path, i.wildcard] for i in t.imports],
    }


def _unpack(raw: object) -> Snapshot | None:
    if not isinstance(raw, dict) or raw.get("format") != FORMAT:
        return None
    files = tuple(_unpack_file(f) for f in raw["files"])
    return Snapshot(tuple(str(r) for r in raw["roots"]), frozenset(str(p) for p in raw["walked"]), files)


def _unpack_file(f: dict) -> StoredFile:
    path = str(f["path"])
    mtime, size = (int(x) for x in f["stamp"])
    tags = FileTags(
        tuple(Definition(str(n), str(k), path, _unrange(r), _unrange(b), str(s)) for n, k, r, b, s in f["definitions"]),
        tuple(Reference(str(n), path, _unrange(r), str(k)) for n, r, k in f["references"]),
        tuple(
            Import(str(m), tuple(str(x) for x in names), _unrange(r), None if p is None else str(p), bool(w))
            for m, names, r, p, w in f["imports"]
        ),
    )
    return StoredFile(path, str(f["language"]), (mtime, size), tags)

"""The on-disk format of one cached KV block, and atomic file writes.

A block file is, little-endian:

    magic    8 bytes   b"GLM5KVB\\0"
    version  u32       FORMAT_VERSION
    hlen     u32       length of the header
    header   hlen      msgpack {"fingerprint": str, "hash": bytes, "tokens": [int],
                                "layout": {...}, "payload": int}, zero-padded so that the
                       payload starts at a multiple of PAYLOAD_ALIGN
    payload  bytes     the block's tensors, raw (their shapes and dtype are in "layout")
    digest   4 bytes   CRC-32 (zlib's) of everything before it, u32

The digest catches torn or damaged files (writes are atomic, so only the disk or another program
can damage one); it is not a defence against a forger, who could write any KV anyway. CRC-32
reads a restart's 28 MB of cached rows (4k tokens of the mid model) in ~8 ms, blake2b (format 1)
took ~50 ms on the same 2-vCPU machine, on the first completion's path.

Invariants:
- `atomic_write` writes a temporary file in the destination's directory (named after the writer's
  pid, so a dead writer's leftovers can be recognised), fsyncs it, renames it over the final name
  and fsyncs the directory: a reader sees the old file, the whole new file, or none.
- `read_block` trusts nothing before the digest matched, then checks the header against what the
  caller expects; any mismatch raises `CorruptBlock` saying why (`OlderFormat`, a subclass, for
  a file an earlier release wrote: expected once after an upgrade, not damage). `read_header`
  checks only the magic, version and header (for listing files without reading their payloads).
- No torch: payloads are buffers.
"""

from __future__ import annotations

import os
import struct
import zlib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgpack

MAGIC = b"GLM5KVB\0"
FORMAT_VERSION = 2
DIGEST_BYTES = 4
_PREFIX = struct.Struct("<8sII")
_DIGEST = struct.Struct("<I")
MAX_HEADER_BYTES = 1 << 20
TEMP_SUFFIX = ".tmp"
PAYLOAD_ALIGN = 64  # the payload starts at a multiple of this, so it can be viewed as any dtype

Buffer = bytes | bytearray | memoryview


class CorruptBlock(ValueError):
    """A block file that must not be loaded; the message says why."""


class OlderFormat(CorruptBlock):
    """A block file in an earlier release's format (not loaded, not damaged)."""


@dataclass(frozen=True, slots=True)
class BlockHeader:
    fingerprint: str
    block_hash: bytes
    tokens: tuple[int, ...]
    layout: dict[str, Any]
    payload_bytes: int


def temp_name(final: Path) -> Path:
    return final.with_name(f".{final.name}.{os.getpid()}.{os.urandom(4).hex()}{TEMP_SUFFIX}")


def temp_owner(path: Path) -> int | None:
    """The writer pid encoded in a temporary file's name, or None if it is not one of ours."""
    parts = path.name.split(".")
    if not path.name.startswith(".") or not path.name.endswith(TEMP_SUFFIX) or len(parts) < 4:
        return None
    return int(parts[-3]) if parts[-3].isdigit() else None


def fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(final: Path, parts: Iterable[Buffer]) -> int:
    """Write `parts` to `final` atomically and durably; returns the bytes written."""
    tmp = temp_name(final)
    size = 0
    try:
        with open(tmp, "wb") as f:
            for part in parts:
                size += f.write(part)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, final)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_dir(final.parent)
    return size


def encode_block(header: BlockHeader, payload: list[Buffer]) -> list[Buffer]:
    """The parts of a block file (header, payload buffers, digest), ready for `atomic_write`."""
    meta = msgpack.packb({
        "fingerprint": header.fingerprint, "hash": header.block_hash, "tokens": list(header.tokens),
        "layout": header.layout, "payload": header.payload_bytes,
    })  # fmt: skip
    if sum(memoryview(p).nbytes for p in payload) != header.payload_bytes:
        raise ValueError("payload size differs from the header's")
    pad = -(_PREFIX.size + len(meta)) % PAYLOAD_ALIGN
    head = _PREFIX.pack(MAGIC, FORMAT_VERSION, len(meta) + pad) + meta + bytes(pad)
    digest = zlib.crc32(head)
    for part in payload:
        digest = zlib.crc32(part, digest)
    return [head, *payload, _DIGEST.pack(digest)]


def _parse_header(data: Buffer, file_size: int) -> tuple[BlockHeader, int]:
    """(header, payload offset) from the first bytes of a file; CorruptBlock if malformed."""
    if len(data) < _PREFIX.size:
        raise CorruptBlock("truncated: shorter than the fixed prefix")
    magic, version, hlen = _PREFIX.unpack_from(data)
    if magic != MAGIC:
        raise CorruptBlock("not a KV block file (wrong magic)")
    if version != FORMAT_VERSION:
        kind = OlderFormat if 0 < version < FORMAT_VERSION else CorruptBlock
        raise kind(f"format version {version}, expected {FORMAT_VERSION}")
    if hlen > MAX_HEADER_BYTES or _PREFIX.size + hlen > len(data):
        raise CorruptBlock("truncated or oversized header")
    try:
        unpacker = msgpack.Unpacker()
        unpacker.feed(bytes(data[_PREFIX.size : _PREFIX.size + hlen]))
        meta = unpacker.unpack()  # zero padding may follow
        header = BlockHeader(
            str(meta["fingerprint"]), bytes(meta["hash"]), tuple(int(t) for t in meta["tokens"]),
            dict(meta["layout"]), int(meta["payload"]),
        )  # fmt: skip
    except (ValueError, KeyError, TypeError, msgpack.UnpackException) as exc:
        raise CorruptBlock(f"unreadable header: {exc}") from None
    offset = _PREFIX.size + hlen
    if offset + header.payload_bytes + DIGEST_BYTES != file_size:
        raise CorruptBlock(f"size {file_size} does not match the header (truncated or padded)")
    return header, offset


def read_header(path: Path) -> tuple[BlockHeader, int]:
    """(header, file size) of a block file without reading its payload."""
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        head = f.read(min(size, _PREFIX.size + MAX_HEADER_BYTES))
    return _parse_header(head, size)[0], size


def read_block(path: Path, fingerprint: str, layout: dict[str, Any], block_hash: bytes, tokens: tuple[int, ...]) -> memoryview:
    """The verified payload of the block file at `path` (a writable buffer); CorruptBlock unless the
    digest matches and the header names exactly this fingerprint, layout, hash and tokens."""
    found, payload = read_block_tokens(path, fingerprint, layout, block_hash)
    if found != tuple(tokens):
        raise CorruptBlock("foreign block: its token ids differ")
    return payload


def read_block_tokens(path: Path, fingerprint: str, layout: dict[str, Any], block_hash: bytes) -> tuple[tuple[int, ...], memoryview]:
    """(token ids, verified payload) of the block file at `path`, for a caller that learns the
    tokens from the file (a partial tail block); CorruptBlock as `read_block`, tokens unchecked."""
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        data = bytearray(size)
        if f.readinto(data) != size:
            raise CorruptBlock("file changed size while being read")
    view = memoryview(data)
    if size >= _PREFIX.size and _PREFIX.unpack_from(view)[1] != FORMAT_VERSION:
        _parse_header(view, size)  # raises, naming the version (an older format is not damage)
    if size < DIGEST_BYTES or zlib.crc32(view[:-DIGEST_BYTES]) != _DIGEST.unpack_from(view, size - DIGEST_BYTES)[0]:
        raise CorruptBlock("checksum mismatch")
    header, offset = _parse_header(view, size)
    for what, found, expected in (
        ("fingerprint", header.fingerprint, fingerprint), ("layout", header.layout, layout),
        ("block hash", header.block_hash, block_hash),
    ):  # fmt: skip
        if found != expected:
            raise CorruptBlock(f"foreign block: its {what} differs")
    return header.tokens, view[offset : offset + header.payload_bytes]

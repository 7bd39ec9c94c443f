"""Cheap identities for a checkpoint's weights, computed at every start.

Role: `weights_digest(dir)` (the KV store's key) hashes, for each `*.safetensors` file, its name, size, mtime and its
safetensors header (tensor names, dtypes, shapes, offsets and metadata), never the tensor data:
hashing gigabytes at every start would cost more than the cache saves. `runtime.LoadedModel`
adds the config, dtype and runtime version.

Invariants:
- Reads at most the 8-byte length and the header of each file, and each file at most once per
  (path, size, mtime) in a process: a second fingerprint of the same files reads nothing.
- Rewriting a file (new mtime or size) or changing its tensors' layout changes the digest; two
  copies of the same weights written at different times are (conservatively) different.
- `weights_identity(dir)` names the weights themselves (data fitted for a model is keyed by it):
  it ignores paths and mtimes and reads a few samples of each file's data besides its header.
"""

from __future__ import annotations

import hashlib
import struct
import threading
from pathlib import Path

MAX_HEADER = 100 << 20  # the safetensors format's own bound on a header

_digests: dict[tuple[str, int, int], bytes] = {}
_lock = threading.Lock()


def weights_digest(directory: Path) -> bytes:
    """A 16-byte digest of every safetensors file of `directory` (names, sizes, mtimes, headers)."""
    h = hashlib.blake2b(digest_size=16)
    for file in sorted(directory.glob("*.safetensors")):
        st = file.stat()
        h.update(f"{file.name}|{st.st_size}|{st.st_mtime_ns}|".encode())
        h.update(_file_digest(file, st.st_size, st.st_mtime_ns))
    return h.digest()


def _file_digest(file: Path, size: int, mtime_ns: int) -> bytes:
    key = (str(file.resolve()), size, mtime_ns)
    with _lock:
        known = _digests.get(key)
    if known is not None:
        return known
    digest = hashlib.blake2b(header_bytes(file), digest_size=16).digest()
    with _lock:
        _digests[key] = digest
    return digest


def header_bytes(file: Path) -> bytes:
    """The raw safetensors header of `file` (its JSON), or the first bytes of a file that is not
    safetensors (the loader reports that; the digest just has to be stable)."""
    with open(file, "rb") as f:
        raw = f.read(8)
        if len(raw) < 8:
            return raw
        (n,) = struct.unpack("<Q", raw)
        return raw + f.read(min(n, MAX_HEADER))


SAMPLE_BYTES = 1 << 16  # bytes read at each sampled place of a file's data


def weights_identity(directory: Path) -> str:
    """Which weights these are, whatever their path or mtime: a hex digest of `config.json` and,
    for each `*.safetensors` file, its name, size, header and three 64 KiB samples of its data.

    Data fitted for one model (the reranker's weights) is keyed by this, so it must survive a
    copy or a reinstall (the KV store's `weights_digest` does not: it trusts mtimes) and tell
    apart two trainings of one architecture (same headers, other data); reading a few samples
    instead of every byte keeps it cheap for a 1.5 TB checkpoint."""
    directory = Path(directory)
    h = hashlib.blake2b(digest_size=16)
    config = directory / "config.json"
    if config.is_file():
        h.update(config.read_bytes())
    for file in sorted(directory.glob("*.safetensors")):
        size = file.stat().st_size
        h.update(f"|{file.name}|{size}|".encode())
        with open(file, "rb") as f:
            header = header_bytes(file)
            h.update(header)
            start = len(header)
            span = max(0, size - start - SAMPLE_BYTES)
            for fraction in (0.0, 0.5, 1.0):
                f.seek(start + int(span * fraction))
                h.update(f.read(SAMPLE_BYTES))
    return h.hexdigest()

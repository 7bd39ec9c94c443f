"""A cheap identity for a checkpoint's weights: the KV store's key, computed at every start.

Role: `weights_digest(dir)` hashes, for each `*.safetensors` file, its name, size, mtime and its
safetensors header (tensor names, dtypes, shapes, offsets and metadata), never the tensor data:
hashing gigabytes at every start would cost more than the cache saves. `runtime.LoadedModel`
adds the config, dtype and runtime version.

Invariants:
- Reads at most the 8-byte length and the header of each file, and each file at most once per
  (path, size, mtime) in a process: a second fingerprint of the same files reads nothing.
- Rewriting a file (new mtime or size) or changing its tensors' layout changes the digest; two
  copies of the same weights written at different times are (conservatively) different.
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

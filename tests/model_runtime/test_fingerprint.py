"""The model fingerprint (the KV store's key) reads only safetensors headers, once per file."""

from __future__ import annotations

import os
import struct

from model_runtime import fingerprint as fp
from model_runtime import load_model
from model_runtime.testing import make_tiny_checkpoint


def _count_reads(monkeypatch) -> dict[str, int]:
    """Bytes read through `open` by the fingerprint module, per file name."""
    reads: dict[str, int] = {}
    real_open = open

    class Counting:
        def __init__(self, f, name: str) -> None:
            self._f, self._name = f, name

        def read(self, n: int = -1) -> bytes:
            data = self._f.read(n)
            reads[self._name] = reads.get(self._name, 0) + len(data)
            return data

        def __enter__(self):
            return self

        def __exit__(self, *exc) -> None:
            self._f.close()

    monkeypatch.setattr(fp, "open", lambda path, mode="r": Counting(real_open(path, mode), os.path.basename(path)), raising=False)
    return reads


def _header_len(path) -> int:
    with open(path, "rb") as f:
        return 8 + struct.unpack("<Q", f.read(8))[0]


def test_the_fingerprint_reads_headers_only_and_each_file_once(tmp_path, monkeypatch):
    ckpt = make_tiny_checkpoint(tmp_path / "ckpt")
    files = sorted(ckpt.glob("*.safetensors"))
    loaded = load_model(ckpt)
    reads = _count_reads(monkeypatch)
    first = loaded.fingerprint
    assert reads == {f.name: _header_len(f) for f in files}
    assert all(reads[f.name] < f.stat().st_size // 10 for f in files)  # not the tensor data
    again = load_model(ckpt).fingerprint  # a restart in the same process, the same files
    assert again == first
    assert reads == {f.name: _header_len(f) for f in files}  # nothing was read a second time


def test_rewriting_the_weights_changes_the_fingerprint(tmp_path):
    ckpt = make_tiny_checkpoint(tmp_path / "ckpt")
    before = load_model(ckpt).fingerprint
    weights = sorted(ckpt.glob("*.safetensors"))[0]
    st = weights.stat()
    os.utime(weights, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    assert load_model(ckpt).fingerprint != before
    copy = make_tiny_checkpoint(tmp_path / "other", seed=1)  # same shapes, other values, other files
    assert load_model(copy).fingerprint != before

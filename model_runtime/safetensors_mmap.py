"""Zero-copy safetensors reading through a private memory map, with integrity checks.

Role: parse a `.safetensors` header ourselves so tensors can view a copy-on-write `mmap` of the
file (pages are read on first touch; nothing is copied until a dtype or device change needs it)
and so every truncated or corrupt file gives an error naming the file and the tensor.

Invariant: the map is private (ACCESS_COPY): writing to a loaded tensor never touches the file.
"""

from __future__ import annotations

import json
import mmap
import os
import struct
from collections.abc import Sequence
from pathlib import Path

import torch
from safetensors.torch import save_file

DTYPES = {
    "F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
    "F8_E4M3": torch.float8_e4m3fn, "F8_E5M2": torch.float8_e5m2,
    "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8, "U8": torch.uint8,
    "BOOL": torch.bool,
}
MAX_HEADER = 100 << 20


class CheckpointError(ValueError):
    """A checkpoint directory or file cannot be loaded; the message names the file and tensor."""


class CorruptCheckpointError(CheckpointError):
    pass


class SafetensorsFile:
    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            size = path.stat().st_size
            with open(path, "rb") as f:
                raw = f.read(8)
                if len(raw) < 8:
                    raise CorruptCheckpointError(f"{path}: truncated (no safetensors header)")
                (n,) = struct.unpack("<Q", raw)
                if n > min(size - 8, MAX_HEADER):
                    raise CorruptCheckpointError(f"{path}: header length {n} exceeds the file ({size} bytes): truncated or not safetensors")
                header = json.loads(f.read(n))
        except OSError as exc:
            raise CheckpointError(f"{path}: cannot read: {exc}") from exc
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise CorruptCheckpointError(f"{path}: corrupt safetensors header: {exc}") from exc
        if not isinstance(header, dict):
            raise CorruptCheckpointError(f"{path}: corrupt safetensors header (not an object)")
        header.pop("__metadata__", None)
        self.data_start = 8 + n
        self.entries: dict[str, dict] = {}
        for name, entry in header.items():
            self.entries[name] = self._validate(name, entry, size)
        self._map: mmap.mmap | None = None

    def _validate(self, name: str, entry, size: int) -> dict:
        try:
            dtype = DTYPES[entry["dtype"]]
            shape = [int(d) for d in entry["shape"]]
            begin, end = (int(x) for x in entry["data_offsets"])
        except (KeyError, TypeError, ValueError) as exc:
            raise CorruptCheckpointError(f"{self.path}: tensor {name}: bad header entry ({exc!r})") from exc
        numel = 1
        for d in shape:
            numel *= d
        if end - begin != numel * dtype.itemsize or begin < 0:
            raise CorruptCheckpointError(f"{self.path}: tensor {name}: {end - begin} bytes for shape {shape} {entry['dtype']}")
        if self.data_start + end > size:
            raise CorruptCheckpointError(
                f"{self.path}: tensor {name} ends at byte {self.data_start + end} but the file has {size}: truncated"
            )
        return {"dtype": dtype, "shape": shape, "offset": self.data_start + begin, "numel": numel}

    def tensor(self, name: str) -> torch.Tensor:
        entry = self.entries[name]
        if entry["numel"] == 0:
            return torch.empty(entry["shape"], dtype=entry["dtype"])
        flat = torch.frombuffer(self._mapped(), dtype=entry["dtype"], count=entry["numel"], offset=entry["offset"])
        return flat.view(entry["shape"])

    def rows(self, names: Sequence[str]) -> torch.Tensor | None:
        """The 2-D tensors `names` as one tensor of their rows, in that order, viewing the map
        like `tensor`, when the file stores them back to back with one dtype and width; else None."""
        entries = [self.entries[name] for name in names]
        first = entries[0]
        if any(len(e["shape"]) != 2 or e["dtype"] != first["dtype"] or e["shape"][1] != first["shape"][1] for e in entries):
            return None
        if any(a["offset"] + a["numel"] * a["dtype"].itemsize != b["offset"] for a, b in zip(entries, entries[1:])):
            return None
        count = sum(e["numel"] for e in entries)
        if count == 0:
            return None
        flat = torch.frombuffer(self._mapped(), dtype=first["dtype"], count=count, offset=first["offset"])
        return flat.view(-1, first["shape"][1])

    def _mapped(self) -> mmap.mmap:
        if self._map is None:
            fd = os.open(self.path, os.O_RDONLY)
            try:
                self._map = mmap.mmap(fd, 0, access=mmap.ACCESS_COPY)
            finally:
                os.close(fd)
        return self._map


def save_tensors(tensors: dict[str, torch.Tensor], path: Path, metadata: dict[str, str] | None = None) -> None:
    """Write a safetensors file atomically (temp file, fsync, rename)."""
    tmp = path.with_name(path.name + ".tmp")
    save_file(tensors, str(tmp), metadata=metadata)
    with open(tmp, "rb+") as f:
        os.fsync(f.fileno())
    os.replace(tmp, path)

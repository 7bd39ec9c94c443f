"""Read packed shards (written by `training.data`) as a resumable stream of batches.

Role: what the training loop and the held-out evaluation read. No tokenizer, no torch: rows come
back as numpy arrays memory-mapped from the `.npy` shards.

Invariants:
- A directory is readable only once its `index.json` exists (written last by the builder) and
  every shard it lists has the recorded shape.
- `BatchStream` visits every row exactly once per epoch, in a permutation drawn from
  (seed, epoch); the last incomplete batch of an epoch is dropped. Its `state()` (epoch and
  offset) restores exactly the same following batches.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from training.data import INDEX_FORMAT, DataError


class PackedDataset:
    """The rows of one shard directory."""

    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory)
        index_file = self.directory / "index.json"
        try:
            self.index = json.loads(index_file.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise DataError(f"{index_file}: unreadable ({exc}); build it with python -m training.data") from exc
        if self.index.get("format") != INDEX_FORMAT:
            raise DataError(f"{index_file}: format {self.index.get('format')!r}, expected {INDEX_FORMAT}")
        self.seq_len: int = self.index["seq_len"]
        self.vocab_size: int = self.index["vocab_size"]
        self._tokens, self._masks = [], []
        for shard in self.index["shards"]:
            tokens = np.load(self.directory / shard["tokens"], mmap_mode="r")
            mask = np.load(self.directory / shard["mask"], mmap_mode="r")
            expected = (shard["rows"], self.seq_len)
            if tokens.shape != expected or mask.shape != expected:
                raise DataError(f"{self.directory}: shard {shard['tokens']} has shape {tokens.shape}, expected {expected}")
            self._tokens.append(tokens)
            self._masks.append(mask)
        self._starts = np.cumsum([0] + [s["rows"] for s in self.index["shards"]])

    def __len__(self) -> int:
        return int(self._starts[-1])

    def rows(self, indices: np.ndarray | list[int]) -> tuple[np.ndarray, np.ndarray]:
        """(tokens int64 [n, seq_len], mask bool [n, seq_len]) of the given rows."""
        indices = np.asarray(indices, dtype=np.int64)
        if indices.size and (indices.min() < 0 or indices.max() >= len(self)):
            raise IndexError(f"row index out of range [0, {len(self)})")
        shard = np.searchsorted(self._starts, indices, side="right") - 1
        tokens = np.empty((len(indices), self.seq_len), dtype=np.int64)
        mask = np.empty((len(indices), self.seq_len), dtype=bool)
        for i, (s, row) in enumerate(zip(shard, indices - self._starts[shard])):
            tokens[i] = self._tokens[s][row]
            mask[i] = self._masks[s][row]
        return tokens, mask


@dataclass(frozen=True, slots=True)
class StreamState:
    epoch: int = 0
    offset: int = 0  # rows of this epoch's permutation already served


class BatchStream:
    """Shuffled batches of `batch_size` rows, epoch after epoch, resumable from a `StreamState`."""

    def __init__(self, dataset: PackedDataset, batch_size: int, seed: int, state: StreamState = StreamState()) -> None:
        if not 0 < batch_size <= len(dataset):
            raise ValueError(f"batch_size {batch_size} must be in [1, {len(dataset)}] (rows in the dataset)")
        self.dataset, self.batch_size, self.seed = dataset, batch_size, seed
        self._epoch, self._offset = state.epoch, state.offset
        self._order = self._permutation(self._epoch)

    def _permutation(self, epoch: int) -> np.ndarray:
        return np.random.default_rng([self.seed, epoch]).permutation(len(self.dataset))

    def state(self) -> StreamState:
        return StreamState(self._epoch, self._offset)

    def next(self) -> tuple[np.ndarray, np.ndarray]:
        if self._offset + self.batch_size > len(self._order):
            self._epoch, self._offset = self._epoch + 1, 0
            self._order = self._permutation(self._epoch)
        rows = self._order[self._offset : self._offset + self.batch_size]
        self._offset += self.batch_size
        return self.dataset.rows(rows)

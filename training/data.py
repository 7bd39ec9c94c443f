"""The packed, pre-tokenized training stream: build it from the corpus, and read it back.

Role: turn the corpus manifest's documents of one split into fixed-length rows of token ids
(`training.samples`: FIM in both orders, plain left-to-right, cross-file headers), packed without
splitting a sample, stored as numpy `.npy` shards that the training loop memory-maps. Reading
needs no tokenizer and no torch.

Layout of an output directory: `tokens-NNNNN.npy` (uint16 [rows, seq_len]), `mask-NNNNN.npy`
(uint8 [rows, seq_len], 1 where the token is a training target, 0 for scaffolding and padding)
and `index.json` (config, shard list, statistics), written last, so a directory without it is an
unfinished build.

Invariants:
- Deterministic given the manifest, the tokenizer and the flags (seed included): documents are
  visited by package directory in a seeded order; each document draws its FIM choices from its
  own `random.Random` of (seed, epoch, source, path), and its windows are sized to the free room
  of the packer's open rows (so padding stays small), which depends on the visiting order.
- Siblings for cross-file headers come from the same split only, so held-out definitions never
  reach training samples.
- Rows are padded with `<|endoftext|>` under mask 0; a sample never crosses a row boundary.
- `BatchStream` visits every row once per epoch in a seeded permutation, and its position
  (`state()`) is all a resumed run needs to continue with exactly the same batches.

Run: `python -m training.data --split train` (and `--split heldout`), writes `data/shards/<split>/`.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import posixpath
import random
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from training.corpus import DEFAULT_MANIFEST, REPO_ROOT, Document, load_documents
from training.samples import MIDDLES, LiteralEncoder, Sample, SampleConfig, document_samples
from training.snippets import SiblingIndex
from training.tokenizer import DEFAULT_OUT as DEFAULT_TOKENIZER

INDEX_FORMAT = 1
DEFAULT_SHARDS = REPO_ROOT / "data" / "shards"
SHARD_ROWS = 2048
OPEN_ROWS = 64  # rows kept open for best-fit packing
MIN_ROOM = 192  # free space worth sizing a window to; smaller gaps wait for small files


class DataError(RuntimeError):
    """A shard directory is missing, unfinished or inconsistent."""


class Packer:
    """Best-fit packing of samples into rows of `seq_len` tokens over a window of open rows."""

    def __init__(self, seq_len: int, pad_id: int, open_rows: int = OPEN_ROWS) -> None:
        self.seq_len, self.pad_id, self.open_rows = seq_len, pad_id, open_rows
        self._rows: list[tuple[list[int], list[int]]] = []

    def add(self, sample: Sample) -> list[tuple[list[int], list[int]]]:
        """Place `sample`; returns the rows this closed (padded to `seq_len`)."""
        n = len(sample.ids)
        if n > self.seq_len:
            raise ValueError(f"sample of {n} tokens does not fit seq_len {self.seq_len}")
        fits = [r for r in self._rows if self.seq_len - len(r[0]) >= n]
        if fits:
            ids, mask = min(fits, key=lambda r: self.seq_len - len(r[0]))
            ids += sample.ids
            mask += sample.mask
            return []
        self._rows.append((list(sample.ids), list(sample.mask)))
        if len(self._rows) <= self.open_rows:
            return []
        fullest = max(self._rows, key=lambda r: len(r[0]))
        self._rows.remove(fullest)
        return [self._pad(fullest)]

    def room(self, min_room: int) -> int:
        """The largest free space of an open row if at least `min_room`, else a whole row."""
        free = max((self.seq_len - len(r[0]) for r in self._rows), default=0)
        return free if free >= min_room else self.seq_len

    def flush(self) -> list[tuple[list[int], list[int]]]:
        rows, self._rows = self._rows, []
        return [self._pad(r) for r in rows]

    def _pad(self, row: tuple[list[int], list[int]]) -> tuple[list[int], list[int]]:
        ids, mask = row
        missing = self.seq_len - len(ids)
        return ids + [self.pad_id] * missing, mask + [0] * missing


class ShardWriter:
    def __init__(self, out: Path, seq_len: int, shard_rows: int = SHARD_ROWS) -> None:
        self.out, self.seq_len, self.shard_rows = out, seq_len, shard_rows
        self.shards: list[dict] = []
        self._pending: list[tuple[list[int], list[int]]] = []

    def write(self, rows: list[tuple[list[int], list[int]]]) -> None:
        self._pending += rows
        while len(self._pending) >= self.shard_rows:
            self._emit(self._pending[: self.shard_rows])
            self._pending = self._pending[self.shard_rows :]

    def close(self) -> None:
        if self._pending:
            self._emit(self._pending)
        self._pending = []

    def _emit(self, rows: list[tuple[list[int], list[int]]]) -> None:
        n = len(self.shards)
        tokens = np.array([r[0] for r in rows], dtype=np.uint16)
        mask = np.array([r[1] for r in rows], dtype=np.uint8)
        names = {"tokens": f"tokens-{n:05d}.npy", "mask": f"mask-{n:05d}.npy"}
        np.save(self.out / names["tokens"], tokens)
        np.save(self.out / names["mask"], mask)
        self.shards.append(names | {"rows": len(rows)})


def directory_groups(documents: list[Document], seed: int, epoch: int) -> list[list[Document]]:
    """Documents grouped by (source, directory), groups in a seeded order, paths sorted inside."""
    groups: dict[tuple[str, str], list[Document]] = defaultdict(list)
    for doc in documents:
        groups[(doc.source, posixpath.dirname(doc.path))].append(doc)

    def order(key: tuple[str, str]) -> bytes:
        return hashlib.sha256(f"{seed}:{epoch}:{key[0]}:{key[1]}".encode()).digest()

    return [sorted(groups[k], key=lambda d: d.path) for k in sorted(groups, key=order)]


def group_samples(group: list[Document], seed: int, epoch: int, packer: Packer, enc: LiteralEncoder, cfg: SampleConfig) -> Iterator[Sample]:
    """The samples of a directory's documents, each window sized to the packer's free room."""
    texts = {doc.path: doc.read() for doc in group}
    index = SiblingIndex(texts if len(texts) > 1 else {})
    for doc in group:
        rng = random.Random(f"{seed}:{epoch}:{doc.source}:{doc.path}")
        text = texts[doc.path]
        yield from document_samples(
            text, doc.path, lambda path=doc.path, text=text: index.for_file(path, text),
            lambda: packer.room(MIN_ROOM), rng, enc, cfg,
        )


@dataclass(frozen=True, slots=True)
class _Group:
    epoch: int
    documents: list[Document]


def _groups(documents: list[Document], build_cfg: BuildConfig) -> Iterator[_Group]:
    for epoch in range(build_cfg.epochs):
        for group in directory_groups(documents, build_cfg.seed, epoch):
            yield _Group(epoch, group)


@dataclass(frozen=True, slots=True)
class BuildConfig:
    split: str = "train"
    seed: int = 0
    epochs: int = 1
    max_tokens: int = 0  # stop after this many real (non-padding) tokens; 0 = no limit


def build(manifest: Path, tokenizer_dir: Path, out: Path, cfg: SampleConfig, build_cfg: BuildConfig, progress: bool = False) -> dict:
    """Write the shards of `build_cfg.split` to `out`; returns the index."""
    enc = LiteralEncoder(tokenizer_dir)
    if enc.vocab_size > np.iinfo(np.uint16).max + 1:
        raise DataError(f"vocab of {enc.vocab_size} does not fit uint16 shards")
    documents = load_documents(manifest, build_cfg.split)
    out.mkdir(parents=True, exist_ok=True)
    (out / "index.json").unlink(missing_ok=True)
    packer, writer, stats = Packer(cfg.seq_len, enc.eos), ShardWriter(out, cfg.seq_len), Counter()
    started = shown = time.monotonic()
    for group in _groups(documents, build_cfg):
        for sample in group_samples(group.documents, build_cfg.seed, group.epoch, packer, enc, cfg):
            writer.write(packer.add(sample))
            stats.update({f"samples_{sample.mode.value}": 1, "tokens": len(sample.ids),
                          "target_tokens": sum(sample.mask), "snippet_samples": sample.snippets > 0})
        stats["documents"] += len(group.documents)
        if progress and time.monotonic() - shown >= 1:
            shown = time.monotonic()
            print(f"\r{stats['documents']} documents, {stats['tokens'] / 1e6:.1f}M tokens, "
                  f"{time.monotonic() - started:.0f} s", end="", flush=True)
        if build_cfg.max_tokens and stats["tokens"] >= build_cfg.max_tokens:
            break
    writer.write(packer.flush())
    writer.close()
    rows = sum(s["rows"] for s in writer.shards)
    index = {
        "format": INDEX_FORMAT,
        "seq_len": cfg.seq_len,
        "vocab_size": enc.vocab_size,
        "pad_id": enc.eos,
        "tokenizer_sha256": hashlib.sha256((tokenizer_dir / "tokenizer.json").read_bytes()).hexdigest(),
        "sample_config": asdict(cfg),
        "build_config": asdict(build_cfg),
        "shards": writer.shards,
        "stats": dict(stats) | {"rows": rows, "padding_fraction": 1 - stats["tokens"] / max(1, rows * cfg.seq_len)},
    }
    (out / "index.json").write_text(json.dumps(index, indent=1))
    return index


def main(argv: list[str] | None = None) -> int:
    defaults = SampleConfig()
    parser = argparse.ArgumentParser(description="Build packed token shards of one corpus split.")
    parser.add_argument("--split", choices=("train", "heldout"), default="train")
    parser.add_argument("--manifest", type=Path, default=DEFAULT_MANIFEST)
    parser.add_argument("--tokenizer", type=Path, default=DEFAULT_TOKENIZER)
    parser.add_argument("--out", type=Path, help="default: data/shards/<split>")
    parser.add_argument("--seq-len", type=int, default=defaults.seq_len)
    parser.add_argument("--fim-rate", type=float, default=defaults.fim_rate)
    parser.add_argument("--spm-rate", type=float, default=defaults.spm_rate)
    parser.add_argument("--snippet-rate", type=float, default=defaults.snippet_rate)
    parser.add_argument("--middle", choices=MIDDLES, default=defaults.middle,
                        help="FIM middles: editor-like spans (mixed) or whole lines only (lines)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--epochs", type=int, default=1, help="passes over the split, each with fresh FIM draws")
    parser.add_argument("--max-tokens", type=int, default=0, help="stop after about this many tokens (0: all)")
    args = parser.parse_args(argv)
    cfg = SampleConfig(seq_len=args.seq_len, fim_rate=args.fim_rate, spm_rate=args.spm_rate, snippet_rate=args.snippet_rate,
                       middle=args.middle)
    out = args.out or DEFAULT_SHARDS / args.split
    index = build(args.manifest, args.tokenizer, out, cfg, BuildConfig(args.split, args.seed, args.epochs, args.max_tokens), progress=True)
    print()
    print(json.dumps(index["stats"], indent=1))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""A compact, self-contained copy of the training data for a GPU machine, and its unpacking.

Role: the GPU machine gets only the working tree (plus carried paths, 64 MiB in all) and has
neither this machine's site-packages (the corpus's source) nor our shards. `pack` writes the
packed training rows, the held-out rows, the held-out source files (for exact match and the
plain-window loss) and the tokenizer into one directory of LZMA-compressed files, each under
`MAX_FILE_BYTES`; `unpack` turns it back into ordinary shard directories (`training.stream`
reads them) and a corpus manifest of the held-out files (`training.evaluate` reads it).

Layout: `pack.json` (shard list, sample config, statistics, sha256 of every file),
`tokenizer.json`, `tokenizer_config.json`, `<split>-NNN.npz.xz` (tokens uint16 and the mask as
packed bits, per shard), `heldout-src.json.xz` ({source, path, text} of each held-out file).

The way back: a file larger than the device tool returns (16 MiB) travels as `<name>.partNN`
pieces plus `<name>.parts.json` (`split_file`); `join_parts` (or `--join DIR`) puts it together
and checks its sha256.

Invariants:
- Unpacked rows and masks equal the packed shards' bit for bit; a file whose hash differs from
  `pack.json` is refused (a truncated copy must not train silently).
- Held-out files never enter the training rows: they come from the held-out split only.

Run: `python -m training.gpu_pack --out data/gpu --max-bytes 60000000` (after `training.prepare`);
`python -m training.gpu_pack --join DIR` to reassemble returned pieces.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import lzma
import shutil
import sys
from pathlib import Path

import numpy as np

from training.corpus import DEFAULT_MANIFEST, MANIFEST_FORMAT, load_documents
from training.data import DEFAULT_SHARDS, INDEX_FORMAT, DataError
from training.stream import PackedDataset
from training.tokenizer import DEFAULT_OUT as DEFAULT_TOKENIZER

PACK_FORMAT = 1
MAX_FILE_BYTES = 19_000_000  # under the 20 MB a committed or carried file may take
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")


def _compress(arrays: dict[str, np.ndarray]) -> bytes:
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    return lzma.compress(buf.getvalue(), preset=6)


def _pack_split(data: PackedDataset, split: str, out: Path, budget: int, rows_per_file: int) -> tuple[list[dict], int]:
    """Compressed files of `data`'s rows until `budget` bytes are used; (file list, bytes)."""
    files, used = [], 0
    for start in range(0, len(data), rows_per_file):
        tokens, mask = data.rows(list(range(start, min(len(data), start + rows_per_file))))
        blob = _compress({"tokens": tokens.astype(np.uint16), "mask": np.packbits(mask, axis=-1)})
        if len(blob) > MAX_FILE_BYTES:
            raise DataError(f"{split}: {rows_per_file} rows compress to {len(blob)} bytes; use fewer --rows-per-file")
        if used + len(blob) > budget:
            break
        name = f"{split}-{len(files):03d}.npz.xz"
        (out / name).write_bytes(blob)
        files.append({"name": name, "rows": len(tokens), "sha256": hashlib.sha256(blob).hexdigest()})
        used += len(blob)
    return files, used


def pack(train: Path, heldout: Path, manifest: Path, tokenizer: Path, out: Path, max_bytes: int, rows_per_file: int = 4096) -> dict:
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("*.xz"):
        old.unlink()
    for name in TOKENIZER_FILES:
        shutil.copy(tokenizer / name, out / name)
    docs = [{"source": d.source, "path": d.path, "text": d.read()} for d in load_documents(manifest, "heldout")]
    src = lzma.compress(json.dumps(docs).encode(), preset=6)
    (out / "heldout-src.json.xz").write_bytes(src)
    train_data, held_data = PackedDataset(train), PackedDataset(heldout)
    held_files, held_bytes = _pack_split(held_data, "heldout", out, MAX_FILE_BYTES, rows_per_file)
    budget = max_bytes - len(src) - held_bytes
    train_files, train_bytes = _pack_split(train_data, "train", out, budget, rows_per_file)
    if not train_files:
        raise DataError(f"--max-bytes {max_bytes} leaves no room for training rows")
    index = {
        "format": PACK_FORMAT, "seq_len": train_data.seq_len, "vocab_size": train_data.vocab_size,
        "pad_id": train_data.index["pad_id"], "tokenizer_sha256": train_data.index["tokenizer_sha256"],
        "sample_config": train_data.index["sample_config"], "train_stats": train_data.index["stats"],
        "train": train_files, "heldout": held_files, "heldout_src": hashlib.sha256(src).hexdigest(),
        "bytes": len(src) + held_bytes + train_bytes,
        "train_rows": sum(f["rows"] for f in train_files), "heldout_files": len(docs),
    }
    (out / "pack.json").write_text(json.dumps(index, indent=1) + "\n")
    return index


def _read(pack_dir: Path, name: str, sha256: str) -> bytes:
    blob = (pack_dir / name).read_bytes()
    if hashlib.sha256(blob).hexdigest() != sha256:
        raise DataError(f"{pack_dir / name}: contents differ from pack.json (truncated copy?)")
    return lzma.decompress(blob)


def _unpack_split(pack_dir: Path, index: dict, split: str, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    shards, rows = [], 0
    for i, f in enumerate(index[split]):
        arrays = np.load(io.BytesIO(_read(pack_dir, f["name"], f["sha256"])))
        tokens = arrays["tokens"]
        mask = np.unpackbits(arrays["mask"], axis=-1, count=index["seq_len"]).astype(np.uint8)
        names = {"tokens": f"tokens-{i:05d}.npy", "mask": f"mask-{i:05d}.npy"}
        np.save(out / names["tokens"], tokens)
        np.save(out / names["mask"], mask)
        shards.append(names | {"rows": len(tokens)})
        rows += len(tokens)
    stats = index["train_stats"] if split == "train" else {}
    (out / "index.json").write_text(json.dumps({
        "format": INDEX_FORMAT, "seq_len": index["seq_len"], "vocab_size": index["vocab_size"], "pad_id": index["pad_id"],
        "tokenizer_sha256": index["tokenizer_sha256"], "sample_config": index["sample_config"],
        "build_config": {"split": split, "from_pack": True}, "shards": shards, "stats": stats | {"rows": rows},
    }, indent=1))


def unpack(pack_dir: Path, out: Path) -> dict[str, Path]:
    """Shard directories, tokenizer and held-out manifest under `out`; returns their paths."""
    try:
        index = json.loads((pack_dir / "pack.json").read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise DataError(f"{pack_dir / 'pack.json'}: unreadable ({exc}); build it with python -m training.gpu_pack") from exc
    if index.get("format") != PACK_FORMAT:
        raise DataError(f"{pack_dir}: pack format {index.get('format')!r}, expected {PACK_FORMAT}")
    paths = {"train": out / "shards" / "train", "heldout": out / "shards" / "heldout", "tokenizer": out / "tokenizer",
             "manifest": out / "corpus" / "manifest.json"}
    for split in ("train", "heldout"):
        _unpack_split(pack_dir, index, split, paths[split])
    paths["tokenizer"].mkdir(parents=True, exist_ok=True)
    for name in TOKENIZER_FILES:
        shutil.copy(pack_dir / name, paths["tokenizer"] / name)
    _write_manifest(json.loads(_read(pack_dir, "heldout-src.json.xz", index["heldout_src"])), out / "corpus")
    return paths


def split_file(path: Path, max_bytes: int) -> list[Path]:
    """Replace `path` by pieces of at most `max_bytes` and a `<name>.parts.json`; a small file stays whole."""
    size = path.stat().st_size
    if size <= max_bytes:
        return [path]
    blob = path.read_bytes()
    pieces = []
    for i, start in enumerate(range(0, size, max_bytes)):
        piece = path.with_name(f"{path.name}.part{i:02d}")
        piece.write_bytes(blob[start:start + max_bytes])
        pieces.append(piece)
    listing = path.with_name(f"{path.name}.parts.json")
    listing.write_text(json.dumps({"name": path.name, "bytes": size, "sha256": hashlib.sha256(blob).hexdigest(),
                                   "parts": [p.name for p in pieces]}, indent=1) + "\n")
    path.unlink()
    return [*pieces, listing]


def join_parts(directory: Path) -> list[Path]:
    """Reassemble every `<name>.parts.json` group under `directory`; refuse a missing or damaged piece."""
    joined = []
    for listing in sorted(directory.glob("*.parts.json")):
        spec = json.loads(listing.read_text())
        try:
            blob = b"".join((directory / name).read_bytes() for name in spec["parts"])
        except FileNotFoundError as exc:
            raise DataError(f"{listing}: piece missing ({exc.filename})") from exc
        if len(blob) != spec["bytes"] or hashlib.sha256(blob).hexdigest() != spec["sha256"]:
            raise DataError(f"{listing}: the pieces do not add up to {spec['name']} (size or sha256 differs)")
        target = directory / spec["name"]
        target.write_bytes(blob)
        for name in spec["parts"]:
            (directory / name).unlink()
        listing.unlink()
        joined.append(target)
    return joined


def _write_manifest(docs: list[dict], corpus: Path) -> None:
    """The held-out files on disk and a manifest that lists them (held-out split only)."""
    root = corpus / "heldout-src"
    files, sources = [], {}
    for d in docs:
        data = d["text"].encode()
        path = root / d["source"] / d["path"]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        sources[d["source"]] = str(root / d["source"])
        files.append({"source": d["source"], "path": d["path"], "sha256": hashlib.sha256(data).hexdigest(),
                      "bytes": len(data), "split": "heldout"})
    manifest = {"format": MANIFEST_FORMAT, "sources": [{"id": s, "root": r} for s, r in sources.items()], "files": files}
    (corpus / "manifest.json").write_text(json.dumps(manifest))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="Pack the training data for a GPU machine.")
    p.add_argument("--train", type=Path, default=DEFAULT_SHARDS / "train")
    p.add_argument("--heldout", type=Path, default=DEFAULT_SHARDS / "heldout")
    p.add_argument("--manifest", type=Path, default=DEFAULT_MANIFEST)
    p.add_argument("--tokenizer", type=Path, default=DEFAULT_TOKENIZER)
    p.add_argument("--out", type=Path, default=Path("data/gpu"))
    p.add_argument("--max-bytes", type=int, default=60_000_000, help="total size of the pack")
    p.add_argument("--rows-per-file", type=int, default=4096)
    p.add_argument("--join", type=Path, metavar="DIR", help="only reassemble the split files returned in DIR")
    args = p.parse_args(argv)
    if args.join:
        try:
            joined = join_parts(args.join)
        except DataError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        print("\n".join(str(path) for path in joined) or f"nothing to join in {args.join}")
        return 0
    index = pack(args.train, args.heldout, args.manifest, args.tokenizer, args.out, args.max_bytes, args.rows_per_file)
    print(f"{index['train_rows']} training rows, {index['heldout_files']} held-out files, "
          f"{index['bytes'] / 1e6:.1f} MB in {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

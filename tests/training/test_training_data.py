"""Packing and shard building: rows, padding, determinism, cross-file headers (training.data, training.stream)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from training.data import BuildConfig, DataError, Packer, build
from training.samples import LiteralEncoder, Mode, Sample, SampleConfig
from training.stream import BatchStream, PackedDataset


def sample(n: int, start: int = 1) -> Sample:
    return Sample(list(range(start, start + n)), [0, 0] + [1] * (n - 2), Mode.PLAIN, 0)


def test_packer_never_splits_a_sample_and_pads_under_mask_zero():
    packer = Packer(seq_len=10, pad_id=99, open_rows=2)
    rows = []
    for n in (6, 3, 7, 4, 2, 9, 5):
        rows += packer.add(sample(n, start=n * 10))
    rows += packer.flush()
    placed = sorted(len([t for t in ids if t != 99]) for ids, _ in rows)
    assert sum(placed) == 6 + 3 + 7 + 4 + 2 + 9 + 5
    for ids, mask in rows:
        assert len(ids) == len(mask) == 10
        assert all(m == 0 for t, m in zip(ids, mask) if t == 99)
        runs = [t // 10 for t in ids if t != 99]  # each sample's ids share a tens digit
        assert runs == sorted(runs, key=runs.index)  # a sample's tokens are contiguous
    with pytest.raises(ValueError, match="does not fit"):
        packer.add(sample(11))


def test_packer_room_offers_the_largest_gap_worth_filling():
    packer = Packer(seq_len=100, pad_id=0)
    assert packer.room(min_room=20) == 100
    packer.add(sample(70))
    assert packer.room(min_room=20) == 30
    assert packer.room(min_room=40) == 100


@pytest.fixture(scope="module")
def built(manifest_path, tokenizer_dir, tmp_path_factory):
    cfg = SampleConfig(seq_len=400, snippet_rate=1.0)
    out = tmp_path_factory.mktemp("shards")
    index = build(manifest_path, tokenizer_dir, out, cfg, BuildConfig(split="train", seed=3))
    return out, index, cfg


def test_build_writes_readable_rows_that_start_with_a_prompt(built, tokenizer_dir):
    out, index, cfg = built
    enc = LiteralEncoder(tokenizer_dir)
    data = PackedDataset(out)
    assert len(data) == index["stats"]["rows"] > 0 and data.seq_len == 400
    tokens, mask = data.rows(range(len(data)))
    assert tokens.shape == (len(data), 400) and mask.dtype == bool
    assert (tokens[:, 0] == enc.special.require("gmask")).all()
    assert not mask[tokens == enc.eos].all()  # padding (eos, mask 0) exists; real eos are targets
    assert index["stats"]["target_tokens"] == int(mask.sum())
    assert index["stats"]["documents"] == 6  # all but the held-out polygon.py


def test_build_is_deterministic(built, manifest_path, tokenizer_dir, tmp_path):
    out, _, cfg = built
    build(manifest_path, tokenizer_dir, tmp_path, cfg, BuildConfig(split="train", seed=3))
    for name in sorted(p.name for p in out.glob("*.npy")):
        assert (out / name).read_bytes() == (tmp_path / name).read_bytes()


def test_siblings_give_headers_and_held_out_files_never_leak(built, tokenizer_dir):
    out, _, _ = built
    enc = LiteralEncoder(tokenizer_dir)
    text = enc.decode(PackedDataset(out).rows(range(len(PackedDataset(out))))[0].ravel().tolist())
    assert "# file: shapes/geometry.py\nclass Point:" in text  # imported by shapes/__init__.py
    assert "perimeter" not in text and "polygon.py" not in text


def test_max_tokens_stops_early(manifest_path, tokenizer_dir, tmp_path):
    index = build(manifest_path, tokenizer_dir, tmp_path, SampleConfig(seq_len=192), BuildConfig(max_tokens=1))
    assert index["stats"]["documents"] < 6


def test_batch_stream_covers_each_row_once_per_epoch_and_resumes_exactly(built):
    data = PackedDataset(built[0])
    batch = 2
    stream = BatchStream(data, batch, seed=5)
    per_epoch = len(data) // batch
    seen = [tuple(map(tuple, stream.next()[0])) for _ in range(per_epoch)]
    rows = [r for b in seen for r in b]
    assert len(set(rows)) == len(rows) == per_epoch * batch
    state = stream.state()
    ahead = [stream.next()[0] for _ in range(3)]
    resumed = BatchStream(data, batch, seed=5, state=state)
    for expected in ahead:
        np.testing.assert_array_equal(resumed.next()[0], expected)
    assert resumed.state() == stream.state() != state


def test_unfinished_or_corrupt_shard_directories_are_refused(built, tmp_path):
    with pytest.raises(DataError, match="training.data"):
        PackedDataset(tmp_path)
    index = json.loads((built[0] / "index.json").read_text())
    index["seq_len"] = 7
    (tmp_path / "index.json").write_text(json.dumps(index))
    for p in built[0].glob("*.npy"):
        (tmp_path / p.name).write_bytes(p.read_bytes())
    with pytest.raises(DataError, match="shape"):
        PackedDataset(tmp_path)
    with pytest.raises(IndexError):
        PackedDataset(built[0]).rows([10**6])
    with pytest.raises(ValueError, match="batch_size"):
        BatchStream(PackedDataset(built[0]), 10**6, seed=0)


def test_cli_builds_a_split(manifest_path, tokenizer_dir, tmp_path, capsys):
    from training.data import main

    args = ["--split", "heldout", "--manifest", str(manifest_path), "--tokenizer", str(tokenizer_dir),
            "--out", str(tmp_path), "--seq-len", "257", "--fim-rate", "0"]
    assert main(args) == 0
    assert "samples_plain" in capsys.readouterr().out
    index = json.loads((tmp_path / "index.json").read_text())
    assert index["stats"]["documents"] == 1 and index["stats"].get("samples_spm", 0) == 0
    assert PackedDataset(tmp_path).seq_len == 257

"""The GPU run, dry-run on the CPU: compact data pack, training for a time budget, export that both
loaders read alike, the evaluation table (training.gpu_pack, training.gpu_run)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from training.data import DataError
from training.gpu_pack import pack, unpack
from training.stream import PackedDataset


@pytest.fixture(scope="module")
def packed(shards, manifest_path, tokenizer_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("pack")
    pack(shards / "train", shards / "heldout", manifest_path, tokenizer_dir, out, max_bytes=10_000_000, rows_per_file=3)
    return out


def test_unpacked_rows_equal_the_shards_and_held_out_files_stay_held_out(packed, shards, tmp_path):
    index = json.loads((packed / "pack.json").read_text())
    assert len(index["train"]) > 1  # several files: the row split really happened
    paths = unpack(packed, tmp_path)
    for split in ("train", "heldout"):
        ours, theirs = PackedDataset(paths[split]), PackedDataset(shards / split)
        everything = list(range(len(theirs)))
        assert len(ours) == len(theirs)
        for a, b in zip(ours.rows(everything), theirs.rows(everything)):
            assert np.array_equal(a, b)
    manifest = json.loads(paths["manifest"].read_text())
    assert [f["path"] for f in manifest["files"]] == ["shapes/polygon.py"]
    assert {f["split"] for f in manifest["files"]} == {"heldout"}


def test_a_byte_budget_keeps_whole_files_and_a_damaged_file_is_refused(packed, shards, manifest_path, tokenizer_dir, tmp_path):
    full = json.loads((packed / "pack.json").read_text())
    small = pack(shards / "train", shards / "heldout", manifest_path, tokenizer_dir, tmp_path / "small",
                 max_bytes=full["bytes"] - 1, rows_per_file=3)
    assert 0 < small["train_rows"] < full["train_rows"] and small["bytes"] < full["bytes"]
    damaged = tmp_path / "small" / small["train"][0]["name"]
    damaged.write_bytes(damaged.read_bytes()[:-10])
    with pytest.raises(DataError, match="differ"):
        unpack(tmp_path / "small", tmp_path / "unpacked")


def test_cpu_dry_run_exports_a_checkpoint_both_loaders_agree_on(packed, tmp_path):
    from transformers import GlmMoeDsaForCausalLM

    from model_runtime.runtime import load_model
    from training.gpu_run import main

    out = tmp_path / "out"
    status = main(["--pack", str(packed), "--out", str(out), "--work", str(tmp_path / "work"), "--minutes", "0.03",
                   "--preset", "tiny", "--batch-size", "2", "--device", "cpu", "--no-compile", "--threads", "1"])
    assert status == 0
    assert sorted(p.name for p in out.iterdir()) == sorted([
        "config.json", "generation_config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
        "report.json", "table.md"])
    report = json.loads((out / "report.json").read_text())
    assert report["training"]["steps"] >= 1 and report["training"]["wall_time_s"] >= 1.8
    assert set(report["heldout"]) == {"trained here", "reference: shipped"}
    assert "| trained here |" in (out / "table.md").read_text()

    ours = load_model(out)
    hf = GlmMoeDsaForCausalLM.from_pretrained(out, dtype=torch.float32).eval()
    ids = torch.tensor(ours.tokenizer.encode("def perimeter(points):\n    total = 0.0\n" * 4)[: ours.config.index_topk])
    with torch.no_grad():
        reference = hf(ids[None]).logits[0]
    assert (ours.logits(ids) - reference).abs().max().item() <= 1e-4


def test_a_large_file_travels_in_pieces_and_comes_back_whole_or_is_refused(tmp_path):
    from training.gpu_pack import join_parts, split_file

    blob = np.random.default_rng(0).integers(0, 256, 2500, dtype=np.uint8).tobytes()
    big, small = tmp_path / "model.safetensors", tmp_path / "config.json"
    big.write_bytes(blob)
    small.write_text("{}")
    assert split_file(small, 1000) == [small]
    pieces = split_file(big, 1000)
    assert [p.name for p in pieces] == ["model.safetensors.part00", "model.safetensors.part01",
                                        "model.safetensors.part02", "model.safetensors.parts.json"]
    assert not big.exists() and max(p.stat().st_size for p in pieces[:3]) <= 1000
    assert join_parts(tmp_path) == [big] and big.read_bytes() == blob
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.json", "model.safetensors"]

    pieces = split_file(big, 1000)
    pieces[1].write_bytes(pieces[1].read_bytes()[:-1])
    with pytest.raises(DataError, match="do not add up"):
        join_parts(tmp_path)
    pieces[1].unlink()
    with pytest.raises(DataError, match="piece missing"):
        join_parts(tmp_path)


def test_a_failed_scoring_run_keeps_the_export_and_exits_3(packed, tmp_path, monkeypatch):
    from training import evaluate
    from training.gpu_run import main

    def broken(argv):
        raise RuntimeError("no kernel for this GPU")

    monkeypatch.setattr(evaluate, "main", broken)
    out = tmp_path / "out"
    status = main(["--pack", str(packed), "--out", str(out), "--work", str(tmp_path / "work"), "--minutes", "0.01",
                   "--preset", "tiny", "--batch-size", "2", "--device", "cpu", "--no-compile", "--threads", "1",
                   "--reference", "none", "--max-file-bytes", "100000"])
    assert status == 3
    names = {p.name for p in out.iterdir()}
    assert {"config.json", "model.safetensors.parts.json", "report.json", "table.md"} <= names
    report = json.loads((out / "report.json").read_text())
    assert report["heldout"]["trained here"] == {"error": "RuntimeError: no kernel for this GPU"}
    assert "scoring failed: RuntimeError: no kernel for this GPU" in (out / "table.md").read_text()

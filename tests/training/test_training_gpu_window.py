"""A GPU training window, dry-run on the CPU at tiny shapes: calls that resume, the old path
when the fast one raises, at most 8 returned files, the plan that fills the carried room
(training.gpu_window)."""

from __future__ import annotations

import json
import tarfile

import pytest

from model_runtime.model import Experts
from training.gpu_pack import pack
from training.gpu_window import MAX_RETURNED, collect, main, plan, tracked_bytes


@pytest.fixture(scope="module")
def packed(shards, manifest_path, tokenizer_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("pack")
    pack(shards / "train", shards / "heldout", manifest_path, tokenizer_dir, out, max_bytes=10_000_000, rows_per_file=3)
    return out


def _call(packed, tmp_path, out: str, seconds: str, *extra: str) -> int:
    carry = tmp_path / "carry"
    if not carry.exists():
        carry.mkdir()
        (carry / "pack").symlink_to(packed)
    return main(["run", "--carry", str(carry), "--state", str(tmp_path / "state"), "--out", str(tmp_path / out),
                 "--seconds", seconds, "--budget", "8", "--init", "scratch", "--preset", "tiny", "--batch-size", "2",
                 "--device", "cpu", "--no-compile", "--no-bf16", "--threads", "1", "--eval-rows", "4", *extra])


def _report(out) -> dict:
    with tarfile.open(out / "window.tar.xz") as tar:
        return json.load(tar.extractfile("report.json"))


def test_two_calls_resume_one_schedule_and_return_a_model_in_few_files(packed, tmp_path):
    assert _call(packed, tmp_path, "first", "3") == 0
    first = _report(tmp_path / "first")
    assert first["attempts"] == [{"path": "fast", "step": first["training"]["steps"]}]
    assert first["heldout_before"]["heldout_loss"] > 0 and first["training"]["heldout"]["heldout_loss"] > 0
    assert 0 < first["budget_used"] < 1
    assert _call(packed, tmp_path, "second", "30") == 0  # resumes: same data position, same schedule
    second = _report(tmp_path / "second")
    assert "heldout_before" not in second and second["budget_used"] >= 1
    assert second["training"]["steps"] > first["training"]["steps"]
    assert second["training"]["heldout"]["heldout_loss"] < first["heldout_before"]["heldout_loss"]
    returned = list((tmp_path / "second").iterdir())
    assert len(returned) <= MAX_RETURNED and all(p.stat().st_size <= 16 * 2**20 for p in returned)

    from model_runtime.runtime import load_model

    model_dir = collect(tmp_path / "second", tmp_path / "model")
    loaded = load_model(model_dir)
    assert loaded.config.max_position_embeddings == 128 and (model_dir / "report.json").is_file()


def test_pieces_come_back_whole(packed, tmp_path):
    assert _call(packed, tmp_path, "out", "2", "--max-file-bytes", "200000") == 0
    names = sorted(p.name for p in (tmp_path / "out").iterdir())
    assert "model.safetensors.part00" in names and "window.tar.xz" in names and len(names) <= MAX_RETURNED
    model_dir = collect(tmp_path / "out", tmp_path / "model")
    assert (model_dir / "model.safetensors").is_file() and not list(model_dir.glob("*.part*"))


def test_the_old_path_trains_when_the_fast_path_raises(packed, tmp_path, monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("no kernel image for this device")

    monkeypatch.setattr(Experts, "forward_capacity", broken)
    assert _call(packed, tmp_path, "out", "2") == 0
    report = _report(tmp_path / "out")
    assert report["attempts"][0] == {"path": "fast", "error": "RuntimeError: no kernel image for this device"}
    assert report["attempts"][1]["path"] == "old" and report["attempts"][1]["step"] >= 1


def test_plan_carries_unsent_files_that_fit_and_remembers_them(packed, tmp_path, monkeypatch):
    index = json.loads((packed / "pack.json").read_text())
    fixed = sum((packed / n).stat().st_size for n in ("pack.json", "heldout-src.json.xz", "tokenizer.json", "tokenizer_config.json"))
    fixed += sum((packed / f["name"]).stat().st_size for f in index["heldout"])
    sizes = [(packed / f["name"]).stat().st_size for f in index["train"]]
    room = tracked_bytes() + 2 * 2**20 + fixed + sizes[0] + sizes[1]  # two files' room
    ledger = tmp_path / "ledger.json"
    first = plan(packed, tmp_path / "carry", ledger, None, False, room=room)
    carried = json.loads((tmp_path / "carry" / "pack" / "pack.json").read_text())
    assert first["train_files"] == len(carried["train"]) == 2 and len(index["train"]) > 2
    second = plan(packed, tmp_path / "carry", ledger, None, False, room=room)
    again = json.loads((tmp_path / "carry" / "pack" / "pack.json").read_text())
    assert second["train_files"] >= 1
    assert not {f["sha256"] for f in carried["train"]} & {f["sha256"] for f in again["train"]}
    assert len(json.loads(ledger.read_text())["sent"]) == 2 + second["train_files"]


def test_a_stashed_shipped_model_travels_once_as_the_warm_start_and_comes_back(packed, tmp_path):
    from training.gpu_window import restore

    shipped = tmp_path / "shipped"
    shipped.mkdir()
    for name in ("model.safetensors", "config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json"):
        (shipped / name).write_text(name)
    carry = tmp_path / "window" / "carry"
    result = plan(packed, carry, tmp_path / "ledger.json", None, True, room=10**9, shipped_dir=shipped)
    assert result["stashed"] and not (shipped / "model.safetensors").exists()
    assert (carry / "warm" / "model.safetensors").read_text() == "model.safetensors"
    assert not (carry / "stash").exists()  # the stash is beside the carried directory, not in it
    assert restore(carry, shipped) and (shipped / "model.safetensors").read_text() == "model.safetensors"
    assert not restore(carry, shipped)

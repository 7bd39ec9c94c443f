"""The CPU-time budget of the training loop (training.train `--cpu-budget`): it ends a run with an
export, its clock survives a resume, and a resumed budget-driven run repeats the uninterrupted one."""

from __future__ import annotations

import itertools
import json

import pytest
import torch
from safetensors.torch import load_file

from training import sweep, train
from training.train import main

from training_support import log_records, train_args

MANY_TOKENS = str(10_000 * 2 * 128)  # a step schedule far longer than the budget


def test_the_cpu_budget_ends_the_run_with_an_export(shards, tokenizer_dir, tmp_path):
    args = train_args(shards, tokenizer_dir, tmp_path, "--total-tokens", MANY_TOKENS, "--cpu-budget", "1.5")
    assert main(args) == 0
    summary = json.loads((tmp_path / "training.json").read_text())
    assert (tmp_path / "export" / "model.safetensors").is_file()
    assert 1 <= summary["steps"] < 10_000
    assert summary["cpu_time_s"] >= 1.5
    steps = [r for r in log_records(tmp_path) if "loss" in r]
    assert steps[-2]["cpu_s"] <= 1.5 <= steps[-1]["cpu_s"], "it stops at the first step past the budget (logged to 0.01 s)"


def test_a_budget_driven_run_resumes_exactly(shards, tokenizer_dir, tmp_path, monkeypatch):
    """With a clock that charges 0.125 CPU-s per step, the schedule (learning rate, DSA phase)
    follows CPU progress deterministically, so an interrupted run must repeat the straight one."""
    budget = ("--total-tokens", "0", "--cpu-budget", "1")  # 8 steps of 0.125 s
    straight, split = tmp_path / "straight", tmp_path / "split"
    monkeypatch.setattr(train, "cpu_clock", _fake_clock())
    assert main(train_args(shards, tokenizer_dir, straight, *budget)) == 0
    monkeypatch.setattr(train, "cpu_clock", _fake_clock())
    assert main(train_args(shards, tokenizer_dir, split, *budget, "--max-steps", "3")) == 0
    assert not (split / "export").exists()
    monkeypatch.setattr(train, "cpu_clock", _fake_clock(start=1000.0))  # a new process starts its clock anew
    assert main(train_args(shards, tokenizer_dir, split, *budget)) == 0
    steps = lambda run: [(r["step"], r["loss"], r["lr"], r["phase"], r["cpu_s"]) for r in log_records(run) if "loss" in r]  # noqa: E731
    assert len(steps(straight)) == 8 and steps(split) == steps(straight)
    assert {s[3] for s in steps(straight)} == {"dense-warmup", "sparse"}
    ours, reference = load_file(split / "export/model.safetensors"), load_file(straight / "export/model.safetensors")
    assert all(torch.equal(ours[k], reference[k]) for k in reference)
    assert json.loads((split / "training.json").read_text())["cpu_time_s"] == pytest.approx(1.0)


def test_a_run_needs_some_budget(shards, tokenizer_dir, tmp_path):
    with pytest.raises(SystemExit):
        main(train_args(shards, tokenizer_dir, tmp_path, "--total-tokens", "0"))


def _fake_clock(start: float = 0.0):
    """Each call advances by 0.125 s (the loop reads it before and after each step)."""
    ticks = itertools.count()
    return lambda: start + 0.125 * next(ticks)


def test_the_sweep_gives_every_variant_the_same_cpu_budget_and_seed(tmp_path):
    args = sweep.parse_args(["--cpu-seconds", "900", "--variants", "today,muon,muon-lines-bf16", "--seed", "3", "--out", str(tmp_path)])
    parsed = [train.parse_args(sweep.train_flags(sweep.VARIANTS[name], args, tmp_path / name)) for name in args.variants]
    assert [(a.cpu_budget, a.total_tokens, a.seed) for a in parsed] == [(900.0, 0, 3)] * 3
    assert [(a.optimizer, a.muon_ns_dtype) for a in parsed] == [("adamw", "float32"), ("muon", "float32"), ("muon", "bfloat16")]
    with pytest.raises(SystemExit):
        sweep.parse_args(["--cpu-seconds", "900", "--tokens", "1000"])


def test_a_variants_own_flags_override_the_sweeps_shared_ones(tmp_path):
    """The batch-size and learning-rate variants change exactly that flag: the sweep's shared
    `--batch-size 4` and default peak rate hold for the others."""
    names = "muon-lines-bf16,muon-lines-bf16-b2,muon-lines-bf16-lr6e-3"
    args = sweep.parse_args(["--cpu-seconds", "1200", "--variants", names, "--batch-size", "4", "--out", str(tmp_path)])
    parsed = [train.parse_args(sweep.train_flags(sweep.VARIANTS[name], args, tmp_path / name)) for name in args.variants]
    assert [(a.batch_size, a.lr) for a in parsed] == [(4, 3e-3), (2, 3e-3), (4, 6e-3)]
    assert {(a.optimizer, a.muon_ns_dtype, a.cpu_budget) for a in parsed} == {("muon", "bfloat16", 1200.0)}
    assert len({str(sweep.VARIANTS[name].train_data) for name in args.variants}) == 1  # all line-level FIM

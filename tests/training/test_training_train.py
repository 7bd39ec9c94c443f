"""The training loop: exact resume, DSA phases, MoE bias balancing, schedule, export (training.train)."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file

from model_runtime.config import ModelConfig
from model_runtime.model import MoE, Transformer
from training.balance import BiasBalancer
from training.presets import PRESETS, model_config, parameter_counts
from training.schedule import LrSchedule, dsa_phase
from training.train import main

from training_support import log_records, train_args


def test_interrupted_run_resumes_exactly(straight_run, shards, tokenizer_dir, tmp_path):
    assert main(train_args(shards, tokenizer_dir, tmp_path, "--max-steps", "3")) == 0
    assert not (tmp_path / "export").exists()
    assert main(train_args(shards, tokenizer_dir, tmp_path)) == 0
    ours, reference = load_file(tmp_path / "export/model.safetensors"), load_file(straight_run / "export/model.safetensors")
    assert ours.keys() == reference.keys()
    for name in reference:
        assert torch.equal(ours[name], reference[name]), name
    steps = lambda run: [(r["step"], r["loss"]) for r in log_records(run) if "loss" in r]  # noqa: E731
    assert steps(tmp_path) == steps(straight_run)


def test_dsa_phases_indexer_kl_mtp_and_balancing_are_logged(straight_run):
    records = [r for r in log_records(straight_run) if "loss" in r]
    assert [r["phase"] for r in records] == ["dense-warmup"] * 2 + ["sparse"] * 6
    assert all(r["indexer_kl"] != 0 and r["mtp_loss"] > 0 and r["max_load_ratio"] >= 1 for r in records)
    lrs = [r["lr"] for r in records]
    assert lrs[0] < lrs[1] and lrs[1] > lrs[-1]  # warm-up, then decay
    evals = [r for r in log_records(straight_run) if "heldout_loss" in r]
    assert [r["step"] for r in evals] == [4, 8]


def test_indexer_can_train_on_every_nth_step_only(shards, tokenizer_dir, tmp_path):
    assert main(train_args(shards, tokenizer_dir, tmp_path, "--indexer-every", "3")) == 0
    with_kl = [r["step"] for r in log_records(tmp_path) if "indexer_kl" in r]
    assert with_kl == [1, 4, 7]


def test_mtp_layer_can_train_on_every_nth_step_only(shards, tokenizer_dir, tmp_path):
    assert main(train_args(shards, tokenizer_dir, tmp_path, "--mtp-every", "3")) == 0
    records = [r for r in log_records(tmp_path) if "loss" in r]
    assert [r["step"] for r in records if "mtp_loss" in r] == [1, 4, 7]
    assert all(r["loss"] == pytest.approx(r["lm_loss"] + r.get("indexer_kl", 0.0), rel=1e-4) for r in records if "mtp_loss" not in r)


def test_export_is_a_runtime_checkpoint_with_tokenizer_and_summary(straight_run):
    from model_runtime.runtime import load_model

    loaded = load_model(straight_run / "export")
    assert loaded.config.index_topk < loaded.config.max_position_embeddings == 128
    ids = loaded.tokenizer.encode("def f(x):\n    return x\n" * 12)
    assert len(ids) > loaded.config.index_topk  # long enough for sparse attention
    assert torch.isfinite(loaded.logits(ids)).all()
    summary = json.loads((straight_run / "training.json").read_text())
    assert summary["steps"] == 8 and summary["tokens"] == 8 * 2 * 128 and summary["heldout"]["heldout_loss"] > 0


def test_a_stop_request_saves_a_checkpoint_and_exits_130(shards, tokenizer_dir, tmp_path):
    from training.train import Trainer, parse_args

    trainer = Trainer(parse_args(train_args(shards, tokenizer_dir, tmp_path)))
    original = trainer.step

    def step_then_signal():
        metrics = original()
        trainer._request_stop(15, None)  # as SIGTERM's handler does
        return metrics

    trainer.step = step_then_signal
    assert trainer.run() == 130
    assert (tmp_path / "checkpoint.pt").is_file() and not (tmp_path / "export").exists()
    assert [r["step"] for r in log_records(tmp_path)] == [1]


def test_a_compiler_that_raises_leaves_training_eager_with_the_same_losses(straight_run, shards, tokenizer_dir,
                                                                           tmp_path, monkeypatch, capsys):
    calls = []

    def broken_compile(fn):
        def compiled(*args, **kwargs):
            calls.append(1)
            raise RuntimeError("inductor exploded")
        return compiled

    monkeypatch.setattr(torch, "compile", broken_compile)
    assert main(train_args(shards, tokenizer_dir, tmp_path, "--compile")) == 0
    assert calls == [1]  # tried once, then eager for good
    assert "torch.compile failed (RuntimeError: inductor exploded); training eager from step 0" in capsys.readouterr().err
    steps = lambda run: [(r["step"], r["loss"]) for r in log_records(run) if "loss" in r]  # noqa: E731
    assert steps(tmp_path) == steps(straight_run)


def test_a_compiler_failing_mid_step_keeps_the_earlier_micro_batches_gradients(shards, tokenizer_dir, tmp_path,
                                                                              monkeypatch, capsys):
    eager_dir, fallback_dir = tmp_path / "eager", tmp_path / "fallback"
    assert main(train_args(shards, tokenizer_dir, eager_dir, "--grad-accum", "2")) == 0
    calls = []

    def compile_failing_on_the_second_call(fn):
        def compiled(*args, **kwargs):
            calls.append(1)
            if len(calls) == 2:  # the second micro-batch of step 0
                raise RuntimeError("inductor exploded")
            return fn(*args, **kwargs)
        return compiled

    monkeypatch.setattr(torch, "compile", compile_failing_on_the_second_call)
    assert main(train_args(shards, tokenizer_dir, fallback_dir, "--grad-accum", "2", "--compile")) == 0
    assert calls == [1, 1]
    assert "training eager from step 0" in capsys.readouterr().err
    steps = lambda run: [(r["step"], r["loss"]) for r in log_records(run) if "loss" in r]  # noqa: E731
    assert len(steps(eager_dir)) >= 2 and steps(fallback_dir) == steps(eager_dir)


def test_resume_with_a_different_configuration_is_refused(straight_run, shards, tokenizer_dir, capsys):
    args = train_args(shards, tokenizer_dir, straight_run)
    args[args.index("--batch-size") + 1] = "4"
    assert main(args) == 2
    assert "batch_size" in capsys.readouterr().err


def test_bias_balancer_favours_underloaded_experts():
    cfg = ModelConfig.tiny(num_nextn_predict_layers=0)
    model = Transformer(cfg)
    balancer = BiasBalancer(model, rate=0.5)
    moe = next(m for m in model.modules() if isinstance(m, MoE))
    load = torch.zeros(cfg.n_routed_experts, dtype=torch.long)
    load[0], load[1] = 10, 1  # mean 11/8: expert 0 over, experts 1..7 under
    moe.last_load = load
    balancer.observe()
    stats = balancer.step()
    bias = moe.gate.e_score_correction_bias
    assert bias[0] == -0.5 and (bias[1:] == 0.5).all()
    assert stats["max_load_ratio"] == pytest.approx(10 / (11 / 8))
    assert balancer.step() == {}  # nothing observed since


def test_schedules():
    lr = LrSchedule(peak=1.0, warmup_steps=4, min_ratio=0.1)
    assert [lr.at(s, 0.0) for s in range(4)] == [0.25, 0.5, 0.75, 1.0]
    assert lr.at(100, 0.5) == pytest.approx(0.55) and lr.at(100, 1.0) == pytest.approx(0.1)
    assert not dsa_phase(0.05, 0.1).sparse and dsa_phase(0.1, 0.1).sparse
    assert dsa_phase(0.0, 0.1).train_indexer and dsa_phase(0.9, 0.1).train_indexer


def test_presets_keep_dsa_sparse_and_fit_the_shipping_budget():
    for name in PRESETS:
        if name == "tiny":
            continue
        cfg = model_config(name, vocab_size=8192, eos_id=8179, context=1024)
        assert cfg.index_topk < 1024 and cfg.num_nextn_predict_layers == 1
        assert any(cfg.is_moe_layer(i) for i in range(cfg.num_hidden_layers)) and not cfg.is_moe_layer(0)
        assert parameter_counts(cfg)["total"] * 2 < 64e6  # bf16 bytes
    with pytest.raises(ValueError, match="below the context"):
        model_config("small", 8192, 8179, context=256)

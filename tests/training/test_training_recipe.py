"""Recipe options of the training loop: Muon, the MTP stride, and resuming after a hard kill
(training.muon, training.train)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from model_runtime.config import ModelConfig
from model_runtime.model import Transformer, init_weights
from training.muon import MuonAdamW, muon_groups, orthogonalize
from training.train import main

from training_support import log_records, train_args

REPO = Path(__file__).resolve().parents[2]


def test_orthogonalize_flattens_the_singular_values():
    g = torch.randn(64, 24) @ torch.diag(torch.logspace(-1, 1, 24))  # singular values over two decades
    s = torch.linalg.svdvals(orthogonalize(g))
    assert s.shape == (24,) and s.min() > 0.5 and s.max() < 1.3
    assert torch.linalg.svdvals(g).max() / torch.linalg.svdvals(g).min() > 50


def test_muon_takes_the_block_matrices_and_adamw_the_rest():
    model = Transformer(ModelConfig.tiny())
    groups = muon_groups(model, weight_decay=0.1)
    names = {id(p): n for n, p in model.named_parameters()}
    muon = {names[id(p)] for p in groups[0]["params"]}
    adamw = {names[id(p)] for g in groups[1:] for p in g["params"]}
    assert "layers.0.self_attn.q_a_proj.weight" in muon and "mtp.0.eh_proj.weight" in muon
    assert {"embed_tokens.weight", "lm_head.weight", "layers.1.mlp.gate.weight"} <= adamw
    assert not muon & adamw and len(muon | adamw) == len(names)
    assert groups[2]["weight_decay"] == 0.0 and all(p.dim() < 2 for p in groups[2]["params"])


def test_muon_lowers_the_loss_of_a_tiny_model():
    torch.manual_seed(0)
    model = Transformer(ModelConfig.tiny(num_nextn_predict_layers=0))
    init_weights(model)
    opt = MuonAdamW(muon_groups(model, 0.0), lr=3e-3)
    losses = _six_steps(model, opt)
    assert losses[-1] < losses[0] - 0.1


def _six_steps(model: Transformer, opt: torch.optim.Optimizer) -> list[float]:
    """The LM loss before each of six optimizer steps on one random batch."""
    ids = torch.randint(0, model.cfg.vocab_size, (2, 33))
    losses = []
    for _ in range(6):
        out = model.forward_train(ids[:, :-1], ids[:, 1:], torch.ones(2, 32), sparse=False, mtp_weight=0.0)
        out.loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(float(out.lm_loss.detach()))
    return losses


def test_newton_schulz_in_bf16_stays_close_to_fp32_and_semi_orthogonal():
    g = torch.randn(96, 48, generator=torch.Generator().manual_seed(1))
    exact, low = orthogonalize(g), orthogonalize(g, dtype=torch.bfloat16)
    assert low.dtype == torch.float32 and low.shape == g.shape
    assert float((low - exact).norm() / exact.norm()) < 0.05
    singular = torch.linalg.svdvals(low)
    assert 0.5 < float(singular.min()) and float(singular.max()) < 1.3


def test_muon_with_bf16_newton_schulz_lowers_the_loss_and_rejects_other_dtypes():
    torch.manual_seed(0)
    model = Transformer(ModelConfig.tiny(num_nextn_predict_layers=0))
    init_weights(model)
    with pytest.raises(ValueError, match="ns_dtype"):
        MuonAdamW(muon_groups(model, 0.0), lr=3e-3, ns_dtype="float16")
    opt = MuonAdamW(muon_groups(model, 0.0), lr=3e-3, ns_dtype="bfloat16")
    losses = _six_steps(model, opt)
    assert losses[-1] < losses[0] - 0.1
    assert opt.state_dict()["param_groups"][0]["ns_dtype"] == "bfloat16"


def test_mtp_stride_scores_only_every_nth_position():
    torch.manual_seed(0)
    model = Transformer(ModelConfig.tiny())
    init_weights(model)
    ids = torch.randint(0, model.cfg.vocab_size, (2, 41))
    picked = torch.zeros(2, 40)
    picked[:, 2::2] = 1  # MTP target t+2 of position t: with stride 2 the odd positions of targets[:, 1:]
    kw = dict(sparse=False, train_indexer=False)
    strided = model.forward_train(ids[:, :-1], ids[:, 1:], torch.ones(2, 40), mtp_stride=2, **kw)
    full = model.forward_train(ids[:, :-1], ids[:, 1:], torch.ones(2, 40), **kw)
    only_picked = model.forward_train(ids[:, :-1], ids[:, 1:], picked, **kw)
    assert torch.equal(strided.lm_loss, full.lm_loss)
    assert not torch.allclose(strided.mtp_loss, full.mtp_loss)
    assert torch.allclose(strided.mtp_loss, only_picked.mtp_loss, atol=1e-6)


def test_muon_run_with_the_fast_options_resumes_exactly(shards, tokenizer_dir, tmp_path):
    options = ("--optimizer", "muon", "--mtp-stride", "2", "--indexer-every", "2")
    straight, split = tmp_path / "straight", tmp_path / "split"
    assert main(train_args(shards, tokenizer_dir, straight, *options)) == 0
    assert main(train_args(shards, tokenizer_dir, split, *options, "--max-steps", "3")) == 0
    assert main(train_args(shards, tokenizer_dir, split, *options)) == 0
    ours, reference = load_file(split / "export/model.safetensors"), load_file(straight / "export/model.safetensors")
    assert all(torch.equal(ours[k], reference[k]) for k in reference)
    steps = lambda run: [(r["step"], r["loss"]) for r in log_records(run) if "loss" in r]  # noqa: E731
    assert steps(split) == steps(straight)
    resumed_with_adamw = train_args(shards, tokenizer_dir, split, "--max-steps", "1")
    (split / "export").rename(split / "done")
    assert main(resumed_with_adamw) == 2  # the optimizer is part of the run's identity


def test_a_killed_run_resumes_from_its_last_checkpoint_with_the_same_losses(straight_run, shards, tokenizer_dir, tmp_path):
    args = train_args(shards, tokenizer_dir, tmp_path, "--checkpoint-minutes", "0")
    env = os.environ | {"PYTHONPATH": str(REPO)}
    proc = subprocess.Popen([sys.executable, "-m", "training.train", *args], cwd=REPO, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    log = tmp_path / "log.jsonl"
    try:
        while proc.poll() is None and sum('"loss"' in line for line in _lines(log)) < 3:
            time.sleep(0.05)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert not (tmp_path / "export").exists(), "the run ended before it could be killed"
    assert main(args) == 0
    logged: dict[int, set[float]] = {}
    for r in log_records(tmp_path):
        if "loss" in r:
            logged.setdefault(r["step"], set()).add(r["loss"])
    reference = {r["step"]: r["loss"] for r in log_records(straight_run) if "loss" in r}
    assert logged == {step: {loss} for step, loss in reference.items()}


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.is_file() else []

"""The trainer's fast paths against the paths they replace: batched Muon, static-capacity MoE,
the cheaper DSA selection and statistics read every N steps (training.muon, model_runtime.model's
training-only paths, training.train)."""

from __future__ import annotations

import pytest
import torch

from model_runtime.config import ModelConfig
from model_runtime.model import MLA, MoE, Transformer, init_weights
from model_runtime.topk import topk_mask
from training.muon import MuonAdamW, muon_groups, newton_schulz_wide, orthogonalize
from training.train import main

from training_support import log_records, train_args


def _tiny(seed: int = 0, **overrides) -> Transformer:
    torch.manual_seed(seed)
    model = Transformer(ModelConfig.tiny(**overrides))
    init_weights(model)
    return model.train()


def _steps(model: Transformer, opt: torch.optim.Optimizer, n: int, sparse: bool) -> list[float]:
    """The loss before each of `n` optimizer steps on one random batch (sparse: DSA really selects)."""
    gen = torch.Generator().manual_seed(1)
    ids = torch.randint(0, model.cfg.vocab_size, (2, 97), generator=gen)
    losses = []
    for _ in range(n):
        out = model.forward_train(ids[:, :-1], ids[:, 1:], torch.ones(2, 96), sparse=sparse, mtp_weight=0.3)
        out.loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(float(out.lm_loss.detach()))
    return losses


@pytest.mark.parametrize("ns_dtype", ["float32", "bfloat16"])
def test_batched_muon_equals_the_matrix_by_matrix_muon(ns_dtype):
    single, batched = _tiny(), _tiny()
    opts = [MuonAdamW(muon_groups(m, 0.1), lr=3e-3, ns_dtype=ns_dtype, impl=impl)
            for m, impl in ((single, "single"), (batched, "batched"))]
    assert _steps(single, opts[0], 3, sparse=False) == pytest.approx(_steps(batched, opts[1], 3, sparse=False), abs=1e-5)
    for (name, a), b in zip(single.named_parameters(), batched.parameters()):
        assert torch.allclose(a, b, atol=1e-6, rtol=0), name
    state_a, state_b = opts[0].state_dict()["state"], opts[1].state_dict()["state"]
    assert state_a.keys() == state_b.keys()
    for key in state_a:  # the same state under both: a run may switch implementation on resume
        for name, value in state_a[key].items():
            assert torch.allclose(value, state_b[key][name], atol=1e-6), (key, name)


def test_stacked_newton_schulz_equals_each_matrix_and_compiles_to_one_graph():
    gen = torch.Generator().manual_seed(0)
    stack = torch.randn(3, 24, 40, generator=gen)
    each = torch.stack([orthogonalize(g) for g in stack])
    assert torch.allclose(newton_schulz_wide(stack, 5, torch.float32), each, atol=1e-5)
    torch._dynamo.reset()
    compiled = torch.compile(newton_schulz_wide, backend="eager", fullgraph=True, dynamic=True)
    assert torch.allclose(compiled(stack, 5, torch.float32), each, atol=1e-5)
    other = torch.randn(5, 16, 32, generator=gen)  # another shape reuses the dynamic graph
    assert torch.allclose(compiled(other, 5, torch.float32), torch.stack([orthogonalize(g) for g in other]), atol=1e-5)


def test_a_compiler_failing_in_newton_schulz_leaves_the_update_unchanged(capsys):
    reference, failing = _tiny(), _tiny()
    opt_ref = MuonAdamW(muon_groups(reference, 0.1), lr=3e-3)
    opt = MuonAdamW(muon_groups(failing, 0.1), lr=3e-3)

    def broken(*args):
        raise RuntimeError("inductor exploded")

    opt.newton_schulz = broken
    assert _steps(reference, opt_ref, 2, sparse=False) == _steps(failing, opt, 2, sparse=False)
    assert "running it eager" in capsys.readouterr().err and opt.newton_schulz is newton_schulz_wide


def _moe_and_input(seed: int = 0):
    model = _tiny(seed)
    moe = next(m for m in model.modules() if isinstance(m, MoE))
    x = torch.randn(3, 40, model.cfg.hidden_size, generator=torch.Generator().manual_seed(seed), requires_grad=True)
    return moe, x


def test_static_capacity_moe_equals_the_dynamic_dispatch_when_nothing_overflows():
    moe, x = _moe_and_input()
    dynamic = moe(x)
    load = moe.last_load.clone()
    grads = torch.autograd.grad(dynamic.square().sum(), [x, *moe.parameters()])
    moe.capacity_factor = float(moe.gate.weight.shape[0])  # room for every pair in one expert
    static = moe(x)
    assert torch.equal(moe.last_load, load) and int(moe.last_dropped) == 0
    assert torch.allclose(static, dynamic, atol=1e-6)
    for a, b in zip(grads, torch.autograd.grad(static.square().sum(), [x, *moe.parameters()])):
        assert torch.allclose(a, b, atol=1e-5)


def test_static_capacity_drops_the_pairs_past_an_experts_capacity():
    moe, x = _moe_and_input()
    dynamic = moe(x)
    n_pairs = x.shape[0] * x.shape[1] * moe.gate.topk
    moe.capacity_factor = 0.5
    static = moe(x)
    capacity = -(-n_pairs // 2 // moe.gate.weight.shape[0])
    assert int(moe.last_dropped) == int((moe.last_load - capacity).clamp_min(0).sum()) > 0
    changed = (static - dynamic).abs().amax(-1).flatten() > 1e-6
    assert 0 < int(changed.sum()) <= int(moe.last_dropped)  # only tokens that lost a pair change


def test_fast_selection_picks_k_visible_keys_mostly_the_exact_ones():
    model = _tiny(index_topk=16)
    attn = next(m for m in model.modules() if isinstance(m, MLA) and m.indexer is not None)
    x = torch.randn(2, 64, model.cfg.hidden_size, generator=torch.Generator().manual_seed(3))
    from model_runtime.model import _causal_mask
    from model_runtime.rope import rope_tables

    positions = torch.arange(64).expand(2, 64)
    rope = rope_tables(positions, model.cfg.qk_rope_head_dim, model.cfg.rope_theta)
    q_lat = attn.project(x, rope)[0]
    allowed = _causal_mask(2, 64, None, x.device)
    exact = attn._select_dense(x, q_lat, rope, allowed)
    fast = attn._select_fast(x, q_lat, rope, allowed) & allowed
    visible = allowed.sum(-1)
    assert torch.equal(fast.sum(-1), visible.clamp(max=16))
    assert torch.equal(exact.sum(-1), fast.sum(-1))
    assert float((fast & exact).sum() / exact.sum()) > 0.9


@pytest.mark.parametrize("path", ["old", "fast"])
def test_a_training_step_on_either_path_lowers_the_loss(path):
    model = _tiny()
    if path == "fast":
        for m in model.modules():
            if isinstance(m, MoE):
                m.capacity_factor = 2.0
            elif isinstance(m, MLA):
                m.fast_select = True
    opt = MuonAdamW(muon_groups(model, 0.0), lr=3e-3, impl="batched" if path == "fast" else "single")
    losses = _steps(model, opt, 6, sparse=True)
    assert losses[-1] < losses[0] - 0.1


def test_statistics_read_every_n_steps_are_the_means_of_the_steps_they_cover(shards, tokenizer_dir, tmp_path):
    every, fast = tmp_path / "every", tmp_path / "fast"
    assert main(train_args(shards, tokenizer_dir, every)) == 0
    assert main(train_args(shards, tokenizer_dir, fast, "--stats-every", "3")) == 0
    per_step = [r for r in log_records(every) if "loss" in r]
    grouped = [r for r in log_records(fast) if "loss" in r]
    assert [r["step"] for r in grouped] == [3, 6, 8]  # the last read at the end of the run
    for record, start in zip(grouped, (0, 3, 6)):
        covered = per_step[start:record["step"]]
        assert record["loss"] == pytest.approx(sum(r["loss"] for r in covered) / len(covered), rel=1e-5)
        assert record["max_load_ratio"] >= 1
    assert _same_exports(every, fast)


def _same_exports(a, b) -> bool:
    """Reading the statistics less often changes no weight."""
    from safetensors.torch import load_file

    wa, wb = load_file(a / "export/model.safetensors"), load_file(b / "export/model.safetensors")
    return wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)


def test_the_fast_flags_train_and_export(shards, tokenizer_dir, tmp_path):
    flags = ("--optimizer", "muon", "--muon-impl", "batched", "--moe-capacity", "2", "--indexer-select", "fast",
             "--stats-every", "2")
    assert main(train_args(shards, tokenizer_dir, tmp_path, *flags)) == 0
    records = [r for r in log_records(tmp_path) if "loss" in r]
    assert [r["step"] for r in records] == [2, 4, 6, 8]
    assert all("moe_dropped" in r and 0 <= r["moe_dropped"] < 1 for r in records)
    assert (tmp_path / "export/model.safetensors").is_file()

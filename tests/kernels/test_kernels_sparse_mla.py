"""sparse_mla_attention: the reference against dense causal attention, the Triton twin against
the reference (decode with split-K, prefill, -1 / out-of-range indices, lonely queries), and
argument validation."""

from __future__ import annotations

import math

import pytest
import torch

from kernels import chunks, sparse_mla
from kernels.testing import TOLERANCES, paged_layout, sampled_indices

TWINS = [sparse_mla.sparse_mla_attention_ref, sparse_mla.sparse_mla_attention_triton]
D, D_V = 576, 512


def _dense_causal(q, kv_cache, layout, seq_ids, positions, scale, d_v):
    """Plain softmax attention of each query over keys 0..position of its sequence."""
    rows = kv_cache.reshape(-1, kv_cache.shape[-1]).float()
    out = torch.empty(q.shape[0], q.shape[1], d_v)
    lse = torch.empty(q.shape[0], q.shape[1])
    for b in seq_ids.unique().tolist():
        sel = (seq_ids == b).nonzero().squeeze(1)
        keys = rows[layout.slots(b)]  # [T, D] in position order
        scores = torch.einsum("shd,td->sht", q[sel].float(), keys) * scale
        hidden = torch.arange(keys.shape[0])[None, None, :] > positions[sel, None, None]
        scores = scores.masked_fill(hidden, float("-inf"))
        out[sel] = torch.softmax(scores, -1) @ keys[:, :d_v]
        lse[sel] = torch.logsumexp(scores, -1)
    return out, lse


def _prefill(gen, dtype=torch.float32, heads=3):
    layout = paged_layout([21, 13], block_size=4, generator=gen, spare_blocks=3)
    seq_ids = torch.tensor([0] * 9 + [1] * 5)
    positions = torch.cat([torch.arange(12, 21), torch.arange(8, 13)])
    kv = torch.randn(layout.num_blocks, 4, D, generator=gen).to(dtype)
    q = torch.randn(len(seq_ids), heads, D, generator=gen).to(dtype)
    indices = sampled_indices(layout, seq_ids, positions, topk=24, generator=gen)  # all causal keys
    return q, kv, indices, layout, seq_ids, positions


def test_reference_equals_dense_causal_attention_in_prefill(gen):
    q, kv, indices, layout, seq_ids, positions = _prefill(gen)
    out, lse = sparse_mla.sparse_mla_attention_ref(q, kv, indices, 0.0625, D_V)
    want_out, want_lse = _dense_causal(q, kv, layout, seq_ids, positions, 0.0625, D_V)
    TOLERANCES[torch.float32].check("out", out, want_out)
    TOLERANCES[torch.float32].check("lse", lse, want_lse)


def test_reference_equals_dense_attention_in_decode_over_disjoint_sequences(gen):
    layout = paged_layout([30, 17, 5], block_size=8, generator=gen, spare_blocks=2)
    seq_ids, positions = torch.tensor([0, 1, 2]), torch.tensor([29, 16, 4])
    kv = torch.randn(layout.num_blocks, 8, D, generator=gen)
    q = torch.randn(3, 2, D, generator=gen)
    indices = sampled_indices(layout, seq_ids, positions, topk=32, generator=gen)
    out, lse = sparse_mla.sparse_mla_attention_ref(q, kv, indices, 0.05, D_V)
    want_out, want_lse = _dense_causal(q, kv, layout, seq_ids, positions, 0.05, D_V)
    TOLERANCES[torch.float32].check("out", out, want_out)
    TOLERANCES[torch.float32].check("lse", lse, want_lse)


def test_reference_counts_a_repeated_index_twice(gen):
    kv = torch.randn(1, 4, 8, generator=gen)
    q = torch.randn(1, 1, 8, generator=gen)
    out, lse = sparse_mla.sparse_mla_attention_ref(q, kv, torch.tensor([[2, 2, 0]], dtype=torch.int32), 0.5, 8)
    s = (kv[0] @ q[0, 0]) * 0.5
    weights = torch.softmax(torch.stack([s[2], s[2], s[0]]), 0)
    want = weights[0] * kv[0, 2] + weights[1] * kv[0, 2] + weights[2] * kv[0, 0]
    TOLERANCES[torch.float32].check("out", out[0, 0], want)
    TOLERANCES[torch.float32].check("lse", lse[0, 0], torch.logsumexp(torch.stack([s[2], s[2], s[0]]), 0))


def test_reference_chunking_does_not_change_results(gen, monkeypatch):
    q, kv, indices, *_ = _prefill(gen)
    whole = sparse_mla.sparse_mla_attention_ref(q, kv, indices, 0.0625, D_V)
    monkeypatch.setattr(chunks, "MEMORY_BUDGET", 1)  # one query per chunk
    one_by_one = sparse_mla.sparse_mla_attention_ref(q, kv, indices, 0.0625, D_V)
    TOLERANCES[torch.float32].check("out", one_by_one[0], whole[0])
    TOLERANCES[torch.float32].check("lse", one_by_one[1], whole[1])


@pytest.mark.parametrize("twin", TWINS, ids=["ref", "triton"])
def test_lonely_query_gets_zero_output_and_infinite_lse(twin, device, gen):
    kv = torch.randn(2, 4, D, generator=gen).to(device)
    q = torch.randn(2, 3, D, generator=gen).to(device)
    indices = torch.tensor([[-1, -1, 99, -7], [1, -1, 5, 2]], dtype=torch.int32, device=device)
    out, lse = twin(q, kv, indices, 0.1, D_V)
    assert torch.equal(out[0], torch.zeros_like(out[0]))
    assert torch.isposinf(lse[0]).all()
    assert torch.isfinite(lse[1]).all() and out[1].abs().sum() > 0


def _edge_case_inputs(gen, dtype, num_q, heads, k, dim=D):
    kv = torch.randn(5, 16, dim, generator=gen).to(dtype)
    q = torch.randn(num_q, heads, dim, generator=gen).to(dtype)
    # slots 0..79 are real; -1 and >= 80 mean "no token"; repeats are allowed
    indices = torch.randint(-1, 90, (num_q, k), generator=gen, dtype=torch.int32)
    if num_q > 1:
        indices[1] = -1
    return q, kv, indices


CASES = {
    "decode-split": dict(num_q=1, heads=3, k=100),
    "decode-64-heads": dict(num_q=1, heads=64, k=50),
    "decode-batch": dict(num_q=3, heads=5, k=70),
    "prefill": dict(num_q=9, heads=2, k=40),
    "no-keys": dict(num_q=2, heads=4, k=0),
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("case", CASES, ids=list(CASES))
def test_triton_matches_reference(case, dtype, device, gen):
    q, kv, indices = (t.to(device) for t in _edge_case_inputs(gen, dtype, **CASES[case]))
    got_out, got_lse = sparse_mla.sparse_mla_attention_triton(q, kv, indices, 1 / 24, D_V)
    ref_out, ref_lse = sparse_mla.sparse_mla_attention_ref(q, kv, indices, 1 / 24, D_V)
    assert got_out.dtype == dtype and got_lse.dtype == torch.float32
    TOLERANCES[dtype].check("out", got_out, ref_out)
    TOLERANCES[torch.float32].check("lse", got_lse, ref_lse)


def test_triton_matches_reference_for_other_head_dims(device, gen):
    q, kv, indices = (t.to(device) for t in _edge_case_inputs(gen, torch.float32, 3, 4, 33, dim=72))
    for d_v in (40, 72):  # a rope tail that is not a power of two, and none at all
        got = sparse_mla.sparse_mla_attention_triton(q, kv, indices, 0.2, d_v)
        ref = sparse_mla.sparse_mla_attention_ref(q, kv, indices, 0.2, d_v)
        TOLERANCES[torch.float32].check(f"out d_v={d_v}", got[0], ref[0])
        TOLERANCES[torch.float32].check(f"lse d_v={d_v}", got[1], ref[1])


@pytest.mark.parametrize(
    "num_q, head_blocks, k, target, want_splits",
    [(1, 4, 2048, 264, 64), (64, 4, 2048, 264, 2), (1, 1, 100, 4, 4), (300, 4, 2048, 264, 1), (1, 1, 40, 64, 2)],
)
def test_split_plan_fills_the_device_and_covers_every_key_once(num_q, head_blocks, k, target, want_splits):
    splits, per_split = sparse_mla.split_plan(num_q, head_blocks, k, 32, target)
    assert splits == want_splits
    assert per_split % 32 == 0 and (splits - 1) * per_split < k <= splits * per_split


def test_split_plan_without_keys_is_one_empty_split():
    assert sparse_mla.split_plan(5, 1, 0, 32, 4) == (1, 0)


def _good_args(device="cpu"):
    return dict(
        q=torch.zeros(2, 3, 16, device=device),
        kv_cache=torch.zeros(4, 2, 16, device=device),
        indices=torch.zeros(2, 5, dtype=torch.int32, device=device),
        sm_scale=math.sqrt(1 / 16),
        d_v=8,
    )


BAD_ARGS = {
    "q must be 3-D": dict(q=torch.zeros(2, 16)),
    "kv_cache dtype": dict(kv_cache=torch.zeros(4, 2, 16, dtype=torch.float16)),
    "indices must have dtype": dict(indices=torch.zeros(2, 5)),
    "indices dim 0 must be 2": dict(indices=torch.zeros(3, 5, dtype=torch.int32)),
    "kv_cache dim 2 must be 16": dict(kv_cache=torch.zeros(4, 2, 12)),
    "d_v=17 exceeds": dict(d_v=17),
    "sm_scale must be a finite number": dict(sm_scale=0.0),
    "kv_cache must be contiguous": dict(kv_cache=torch.zeros(2, 4, 16).transpose(0, 1)),
    "q must have a contiguous last dimension": dict(q=torch.zeros(2, 16, 3).transpose(1, 2)),
}


@pytest.mark.parametrize("twin", TWINS, ids=["ref", "triton"])
@pytest.mark.parametrize("message", BAD_ARGS, ids=list(BAD_ARGS))
def test_bad_arguments_raise_a_clear_error(twin, message):
    args = _good_args() | BAD_ARGS[message]
    with pytest.raises(ValueError, match=f"^sparse_mla_attention: {message}"):
        twin(**args)

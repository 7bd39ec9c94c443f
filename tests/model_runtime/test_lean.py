"""The lean CPU path (`model_runtime.lean`) against the kernels' torch references it stands in for.

Each op is compared with its reference on the same inputs (exactly where the maths is the same
sequence of operations), and a whole engine run on a tiny random checkpoint with the lean path
gives the tokens and, step by step, the logits of the reference path (`kernels.runs_triton`
forced true, so every op goes through `kernels`' dispatch to its reference, as before the lean
path existed).
"""

from __future__ import annotations

import pytest
import torch

import kernels
from kernels.indexer import indexer_topk_ref
from kernels.norm import rms_norm_ref
from kernels.rope import rope_interleaved_ref
from kernels.sparse_mla import sparse_mla_attention_ref
from model_runtime import lean
from model_runtime.api import GenerationRequest, SamplingParams
from model_runtime.config import EngineConfig
from model_runtime.engine import Engine
from model_runtime.paged import AttentionCost, PagedBatch

BLOCK = 4


def decode_batch(lens: list[int], num_blocks: int = 16, seed: int = 0) -> PagedBatch:
    """A decode step (one new token per sequence) over shuffled, disjoint blocks."""
    free = torch.randperm(num_blocks, generator=torch.Generator().manual_seed(seed)).tolist()
    tables = [[free.pop() for _ in range(-(-n // BLOCK))] for n in lens]
    return PagedBatch.build([(n - 1, n) for n in lens], tables, BLOCK, 4, (8, 10000.0))


@pytest.mark.parametrize("topk", [3, 8, 40])
def test_decode_topk_matches_the_reference_with_ties(topk):
    lens = [13, 5, 29]
    batch = decode_batch(lens)
    g = torch.Generator().manual_seed(1)
    cache = torch.randn(16, BLOCK, 8, generator=g)
    cache[:, ::2] = cache[:, 1::2]  # duplicated keys: equal scores at many positions
    q = torch.randn(3, 4, 8, generator=g)
    q[:, :2] = -q[:, :2].abs()  # ReLU zeros: exact ties
    w = torch.randn(3, 4, generator=g)
    seq_lens = torch.tensor(lens)
    ref = indexer_topk_ref(q, w, cache, batch.block_table, batch.seq_ids, batch.positions, seq_lens, 0.25, topk)
    got = lean.decode_topk(q, w, cache, batch.key_slots, 0.25, topk)
    assert got.dtype == ref.dtype and torch.equal(got, ref)
    assert ((got >= 0).sum(1) == torch.tensor([min(topk, n) for n in lens])).all()


def test_decode_topk_over_shared_blocks_matches_the_reference():
    """An n-best's decode step: four sequences on one prompt's blocks, each with its own last
    block. The shared-key path gathers the prompt's keys once; its choice is the reference's."""
    prompt_blocks, lens = [5, 2, 9, 14, 0, 20, 17, 31, 24, 28], [42, 41, 43, 44]
    tables = [prompt_blocks + [own] for own in (3, 7, 11, 12)]
    batch = PagedBatch.build([(n - 1, n) for n in lens], tables, BLOCK, 4, (8, 10000.0))
    shared = batch.shared_keys
    assert shared is not None and sorted(shared.blocks.tolist()) == sorted({*prompt_blocks, 3, 7, 11, 12})
    g = torch.Generator().manual_seed(4)
    cache = torch.randn(32, BLOCK, 8, generator=g)
    q, w = torch.randn(4, 4, 8, generator=g), torch.randn(4, 4, generator=g)
    for topk in (3, 8, 40):
        ref = indexer_topk_ref(q, w, cache, batch.block_table, batch.seq_ids, batch.positions, torch.tensor(lens), 0.25, topk)
        assert torch.equal(lean.decode_topk(q, w, cache, batch.key_slots, 0.25, topk, shared), ref)
        assert torch.equal(lean.decode_topk(q, w, cache, batch.key_slots, 0.25, topk), ref)


def test_a_few_tokens_per_sequence_take_the_lean_path_with_causal_key_slots():
    """A step verifying drafts (2-3 new tokens per sequence) runs the lean forms: each query's
    choice over its own keys (up to its position) is the reference's, ties included."""
    spans, g = [(11, 13), (27, 30), (4, 5)], torch.Generator().manual_seed(5)
    free = torch.randperm(16, generator=g).tolist()
    batch = PagedBatch.build(spans, [[free.pop() for _ in range(-(-e // BLOCK))] for _, e in spans], BLOCK, 4, (8, 10000.0))
    assert batch.lean_decode and not batch.one_token_each
    n = batch.positions.shape[0]
    assert torch.equal((batch.causal_slots >= 0).sum(1), batch.positions + 1)  # each query sees keys 0..its position
    cache = torch.randn(16, BLOCK, 8, generator=g)
    cache[:, ::2] = cache[:, 1::2]
    q, w = torch.randn(n, 4, 8, generator=g), torch.randn(n, 4, generator=g)
    q[:, :2] = -q[:, :2].abs()
    lens = torch.tensor([e for _, e in spans])
    for topk in (3, 8, 40):
        ref = indexer_topk_ref(q, w, cache, batch.block_table, batch.seq_ids, batch.positions, lens, 0.25, topk)
        assert torch.equal(lean.decode_topk(q, w, cache, batch.causal_slots, 0.25, topk), ref)


def test_drafts_over_shared_blocks_read_each_key_once_per_query():
    prompt_blocks, lens = [5, 2, 9, 14, 0, 20, 17, 31, 24, 28], [42, 43]
    tables = [prompt_blocks + [own] for own in (3, 7)]
    batch = PagedBatch.build([(n - 2, n) for n in lens], tables, BLOCK, 4, (8, 10000.0))
    shared = batch.shared_keys
    assert shared is not None and shared.columns.shape == (4, 43)
    g = torch.Generator().manual_seed(6)
    cache = torch.randn(32, BLOCK, 8, generator=g)
    q, w = torch.randn(4, 4, 8, generator=g), torch.randn(4, 4, generator=g)
    for topk in (3, 40):
        ref = indexer_topk_ref(q, w, cache, batch.block_table, batch.seq_ids, batch.positions, torch.tensor(lens), 0.25, topk)
        assert torch.equal(lean.decode_topk(q, w, cache, batch.causal_slots, 0.25, topk, shared), ref)


def test_longer_feeds_stay_on_the_references():
    assert decode_batch([13]).lean_decode
    four = PagedBatch.build([(9, 13)], [[0, 1, 2, 3]], BLOCK, 4, (8, 10000.0))
    five = PagedBatch.build([(8, 13)], [[0, 1, 2, 3]], BLOCK, 4, (8, 10000.0))
    assert four.lean_decode and not five.lean_decode


def test_shared_keys_only_where_sequences_share_blocks():
    assert decode_batch([13, 5, 29]).shared_keys is None  # disjoint blocks: one gather per sequence is cheaper
    assert decode_batch([13]).shared_keys is None
    prompt = list(range(1, 11))
    same = PagedBatch.build([(40, 41), (40, 41)], [prompt + [11], prompt + [12]], BLOCK, 4, (8, 10000.0))
    assert same.shared_keys is not None and same.shared_keys.columns.shape == (2, 41)
    little = PagedBatch.build([(12, 13), (12, 13)], [[1, 2, 3, 4], [1, 2, 5, 6]], BLOCK, 4, (8, 10000.0))
    assert little.shared_keys is None  # half the blocks shared: each sequence's own gather costs less


def test_decode_attention_matches_the_reference():
    g = torch.Generator().manual_seed(2)
    kv = torch.randn(16, BLOCK, 24, generator=g)
    q = torch.randn(3, 4, 24, generator=g)
    idx = torch.randint(0, 64, (3, 10), generator=g, dtype=torch.int32)
    idx[1, 6:] = -1  # a shorter list
    out_ref, _ = sparse_mla_attention_ref(q, kv, idx, 0.3, 16)
    got = lean.decode_attention(q, kv.view(-1, 24), idx, 0.3, 16)
    torch.testing.assert_close(got, out_ref, rtol=1e-6, atol=1e-6)
    one_ref, _ = sparse_mla_attention_ref(q[:1], kv, idx[:1], 0.3, 16)
    assert torch.equal(lean.decode_attention(q[:1], kv.view(-1, 24), idx[:1], 0.3, 16), one_ref)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rms_norm_and_rope_match_the_references(dtype):
    g = torch.Generator().manual_seed(3)
    x = torch.randn(5, 32, generator=g).to(dtype)
    weight = torch.rand(32, generator=g).to(dtype) + 0.5
    assert torch.equal(lean.rms_norm(x, weight, 1e-6), rms_norm_ref(x, weight, 1e-6)[0])
    heads = torch.randn(5, 3, 8, generator=g).to(dtype)
    angles = torch.rand(5, 4, generator=g) * 6
    assert torch.equal(
        lean.rope(heads, angles.cos(), angles.sin()), rope_interleaved_ref(heads, angles.cos(), angles.sin())
    )


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rotate_with_a_complex_table_matches_the_reference_on_strided_slices(dtype):
    """The step's complex table rotates q's rope slice in place of its strides, a slice at an odd
    offset (copied first) and 2-D key rows, as the reference rotates a copy."""
    g = torch.Generator().manual_seed(4)
    angles = torch.rand(5, 4, generator=g) * 6
    cos, sin = angles.cos(), angles.sin()
    table = torch.complex(cos, sin)
    wide = torch.randn(5, 3, 25, generator=g).to(dtype)
    before = wide.clone()
    for x in (wide[..., 8:16], wide[..., 1:9], wide[:, 0, 16:24]):
        heads = x if x.dim() == 3 else x[:, None]
        expected = rope_interleaved_ref(heads.contiguous(), cos, sin)
        got = lean.rotate(x, table)
        assert torch.equal(got if x.dim() == 3 else got[:, None], expected)
    assert torch.equal(wide, before)  # nothing written into x


def _run(loaded, prompt: list[int], new: int) -> tuple[list[int], list[torch.Tensor]]:
    """Greedy tokens and every step's logits of one request through the engine."""
    engine = Engine(loaded, EngineConfig(max_cache_tokens=1024))
    logits: list[torch.Tensor] = []
    run = engine.runner.run

    def keep(feeds, recorder=None):
        out = run(feeds, recorder)
        logits.extend(out.logits)
        return out

    engine.runner.run = keep
    seq = engine.add(GenerationRequest("r", tuple(prompt), SamplingParams(max_tokens=new, stop_token_ids=())))
    engine.run_until_idle()
    return seq.output_ids, logits


def test_engine_decode_matches_the_reference_path(tiny, monkeypatch):
    """A prompt longer than index_topk (8), so decode steps select sparse keys."""
    prompt = torch.randint(3, tiny.config.vocab_size, (40,), generator=torch.Generator().manual_seed(4)).tolist()
    lean_tokens, lean_logits = _run(tiny, prompt, 12)
    with monkeypatch.context() as m:
        m.setattr(kernels, "runs_triton", lambda tensor: True)  # every op through kernels' dispatch
        ref_tokens, ref_logits = _run(tiny, prompt, 12)
    assert lean_tokens == ref_tokens and len(lean_tokens) == 12
    assert len(lean_logits) == len(ref_logits) == 12
    for a, b in zip(lean_logits, ref_logits):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


def _speculative(loaded, prompt: list[int]) -> tuple[list[int], list[torch.Tensor], tuple[int, int]]:
    """Greedy tokens, every step's logits and (drafted, accepted) of one request with MTP drafts."""
    engine = Engine(loaded, EngineConfig(max_cache_tokens=1024, use_mtp=True))
    logits: list[torch.Tensor] = []
    run = engine.runner.run
    engine.runner.run = lambda feeds, recorder=None: (out := run(feeds, recorder), logits.extend(out.logits))[0]
    seq = engine.add(GenerationRequest("r", tuple(prompt), SamplingParams(max_tokens=12, stop_token_ids=())))
    engine.run_until_idle()
    assert seq.error is None, seq.error
    stats = engine.stats()
    return seq.output_ids, logits, (stats.spec_drafted, stats.spec_accepted)


def test_engine_speculative_steps_match_the_reference_path(tiny, monkeypatch):
    """With MTP drafts every decode step feeds two tokens (the last one and the draft): the lean
    path gives the reference path's tokens and logits, and the MTP layer's drafts (run on the lean
    path too) are accepted as often."""
    prompt = torch.randint(3, tiny.config.vocab_size, (40,), generator=torch.Generator().manual_seed(7)).tolist()
    lean_tokens, lean_logits, drafts = _speculative(tiny, prompt)
    with monkeypatch.context() as m:
        m.setattr(kernels, "runs_triton", lambda tensor: True)
        ref_tokens, ref_logits, ref_drafts = _speculative(tiny, prompt)
    assert drafts[0] >= 5 and drafts == ref_drafts
    assert lean_tokens == ref_tokens and len(lean_tokens) == 12
    assert [len(x) for x in lean_logits] == [len(x) for x in ref_logits] and max(len(x) for x in lean_logits) == 2
    for a, b in zip(lean_logits, ref_logits):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


def test_eager_steps_ignore_a_compile_running_in_another_thread(tiny):
    """While any thread compiles, torch holds a process-wide flag that makes
    `torch.compiler.is_compiling()` true in every thread (dynamo's compile session). The eager
    engine thread must not take the branches meant for traced graphs: with the flag held, a
    request with MTP drafts (two-token lean steps) gives the same tokens, logits and drafts as
    without. Before, its steps read each sequence's keys instead of each query's and failed."""
    prompt = torch.randint(3, tiny.config.vocab_size, (40,), generator=torch.Generator().manual_seed(7)).tolist()
    alone = _speculative(tiny, prompt)
    with torch.compiler._compile_session_context():  # what a compile in another thread holds
        assert torch.compiler.is_compiling()
        beside = _speculative(tiny, prompt)
    assert beside[0] == alone[0] and len(alone[0]) == 12 and max(len(x) for x in alone[1]) == 2
    assert beside[2] == alone[2]
    for a, b in zip(beside[1], alone[1], strict=True):
        assert torch.equal(a, b)


MID_SHAPE = AttentionCost(heads=8, kv_rank=128, nope=64, rope=32, v=64, element_size=4)  # bench_runtime's mid model


def _absorbed(spans: list[tuple[int, int]], cost: AttentionCost | None, topk: int = 256) -> bool:
    per_seq = max(e for _, e in spans) // BLOCK + 1
    tables = [list(range(i * per_seq, (i + 1) * per_seq)) for i in range(len(spans))]
    return PagedBatch.build(spans, tables, BLOCK, topk, (8, 10000.0), cost=cost).use_absorbed


def test_auto_attention_expands_a_sparse_prefill_on_the_cpu_while_it_fits_and_costs_less():
    assert not _absorbed([(0, 40)], MID_SHAPE, topk=8)  # sparse (40 keys > top-k 8), a prefill: expanded
    assert not _absorbed([(0, 1200)], MID_SHAPE)  # a 1,200-token prefill: expanding is cheaper
    assert not _absorbed([(0, 200)], MID_SHAPE)  # dense (200 keys <= top-k 256), a prefill: expanded
    assert _absorbed([(39, 40)], MID_SHAPE, topk=8)  # a decode step: absorbed
    assert _absorbed([(0, 40)], None, topk=8)  # no shape given: sparse steps stay absorbed
    over = AttentionCost(heads=8, kv_rank=128, nope=(256 << 20) // (39 * 8 * 4), rope=32, v=0, element_size=4)
    assert _absorbed([(0, 40)], over, topk=8)  # expanded keys over the budget: absorbed


def test_auto_attention_absorbs_a_few_new_tokens_over_a_long_cached_context():
    assert _absorbed([(3600, 3624)] * 6, MID_SHAPE)  # scoring six candidates after a 3.6k prompt
    assert _absorbed([(3565, 3600)], MID_SHAPE)  # a restart: 35 new prompt tokens after 3,565 cached
    assert _absorbed([(0, 3600)], MID_SHAPE)  # a 3,600-token prefill: each query sees 256 of 3,600 keys

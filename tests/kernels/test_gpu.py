"""GPU checks at GLM-5's real shapes: every Triton kernel against its torch reference in bf16, and
the memory bandwidth the sparse MLA decode kernel achieves against the GPU's copy bandwidth.

Run as one script (about a minute on an H100-class GPU; prints a table):
    python -m pytest tests/kernels/test_gpu.py -m gpu -s

Anchor: FlashMLA (deepseek-ai/FlashMLA README, H800 SXM5, CUDA 12.8) reaches up to 3000 GB/s in
memory-bound dense BF16 MLA decode, and 410 TFLOPS in compute-bound sparse decode with an FP8
cache (656 B/token). Our cache is bf16 (1152 B/token), so bandwidth is the comparable number.
"""

from __future__ import annotations

import pytest
import torch

from kernels import fp8, indexer, norm, rope, sparse_mla
from kernels.testing import TOLERANCES, assert_topk_valid, paged_layout, sampled_indices

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]

H, D, D_V, TOPK = 64, 576, 512, 2048  # MLA in FlashMLA's MQA mode
HI, DI = 32, 128  # indexer heads x head dim
BS, SEQ_LEN, BATCH = 64, 8192, 64
SM_SCALE = 256**-0.5
BF16 = torch.bfloat16


@pytest.fixture(scope="module")
def cache():
    """BATCH sequences of SEQ_LEN tokens in permuted blocks: latent KV and indexer keys, bf16."""
    gen = torch.Generator().manual_seed(5)
    layout = paged_layout([SEQ_LEN] * BATCH, BS, gen, spare_blocks=BATCH, device="cuda")
    kv = torch.randn(layout.num_blocks, BS, D, device="cuda", dtype=BF16)
    keys = torch.randn(layout.num_blocks, BS, DI, device="cuda", dtype=BF16)
    return layout, kv, keys, gen


def _decode_indices(layout, gen, batch):
    seq_ids = torch.arange(batch, device="cuda")
    positions = torch.full((batch,), SEQ_LEN - 1, device="cuda")
    return sampled_indices(layout, seq_ids, positions, TOPK, gen)


def test_sparse_mla_decode_matches_reference(cache):
    layout, kv, _, gen = cache
    indices = _decode_indices(layout, gen, BATCH)
    indices[3, 100:] = -1  # a short list
    indices[5] = -1  # a lonely query
    q = torch.randn(BATCH, H, D, device="cuda", dtype=BF16)
    got = sparse_mla.sparse_mla_attention_triton(q, kv, indices, SM_SCALE, D_V)
    want = sparse_mla.sparse_mla_attention_ref(q, kv, indices, SM_SCALE, D_V)
    TOLERANCES[BF16].check("decode out", got[0], want[0])
    TOLERANCES[torch.float32].check("decode lse", got[1], want[1])


def test_sparse_mla_prefill_matches_reference(cache):
    layout, kv, _, gen = cache
    seq_ids = torch.zeros(1024, dtype=torch.int64, device="cuda")
    positions = torch.arange(SEQ_LEN - 1024, SEQ_LEN, device="cuda")
    indices = sampled_indices(layout, seq_ids, positions, TOPK, gen)
    q = torch.randn(1024, H, D, device="cuda", dtype=BF16)
    got = sparse_mla.sparse_mla_attention_triton(q, kv, indices, SM_SCALE, D_V)
    want = sparse_mla.sparse_mla_attention_ref(q, kv, indices, SM_SCALE, D_V)
    TOLERANCES[BF16].check("prefill out", got[0], want[0])
    TOLERANCES[torch.float32].check("prefill lse", got[1], want[1])


def test_indexer_matches_reference_in_decode_and_prefill(cache):
    layout, _, keys, _ = cache
    seq_ids = torch.cat([torch.arange(BATCH), torch.ones(256, dtype=torch.int64)]).cuda()
    positions = torch.cat([torch.full((BATCH,), SEQ_LEN - 1), torch.arange(256) * 32]).cuda()
    q = torch.randn(len(seq_ids), HI, DI, device="cuda", dtype=BF16)
    w = torch.randn(len(seq_ids), HI, device="cuda") * HI**-0.5
    args = (q, w, keys, layout.block_table, seq_ids, positions, layout.seq_lens, DI**-0.5)
    scores = indexer.indexer_scores_ref(*args)
    TOLERANCES[torch.float32].check("scores", indexer.indexer_scores_triton(*args), scores)
    got = indexer.indexer_topk_triton(*args, TOPK)
    slots = indexer.key_slots(layout.block_table, layout.num_blocks, BS)
    assert_topk_valid("topk", got.cpu(), scores.cpu(), slots.cpu(), seq_ids.cpu(), TOPK, atol=1e-3)


def test_norm_rope_and_fp8_match_reference_at_model_shapes():
    gen = torch.Generator().manual_seed(6)
    x = torch.randn(4096, 6144, generator=gen).to("cuda", BF16)
    residual = torch.randn(4096, 6144, generator=gen).to("cuda", BF16)
    weight = torch.randn(6144, generator=gen).to("cuda", BF16)
    got, want = norm.rms_norm_triton(x, weight, 1e-5, residual), norm.rms_norm_ref(x, weight, 1e-5, residual)
    TOLERANCES[BF16].check("rms_norm y", got[0], want[0])
    assert torch.equal(got[1], want[1])
    q = torch.randn(4096, H, 256, generator=gen).to("cuda", BF16)
    phase = torch.rand(4096, 32, generator=gen).cuda() * 1000
    got = rope.rope_interleaved_triton(q[..., 192:], phase.cos(), phase.sin())
    TOLERANCES[BF16].check("rope", got, rope.rope_interleaved_ref(q[..., 192:], phase.cos(), phase.sin()))
    w = (torch.randn(28672, 512, generator=gen) * 50).to(torch.float8_e4m3fn).cuda()
    scale_inv = torch.rand(224, 4, generator=gen).cuda()
    got, want = fp8.fp8_block_dequant_triton(w, scale_inv), fp8.fp8_block_dequant_ref(w, scale_inv)
    assert torch.equal(got, want)


def _copy_bandwidth() -> float:
    """GB/s of a device-to-device copy of 1 GiB: the achievable peak."""
    from triton.testing import do_bench

    src = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    ms = do_bench(lambda: dst.copy_(src))
    return 2 * src.numel() / ms / 1e6


def test_sparse_mla_decode_bandwidth_table(cache):
    """Prints achieved bandwidth per batch size; asserts only that each timed call is correct."""
    from triton.testing import do_bench

    layout, kv, _, gen = cache
    peak = _copy_bandwidth()
    print(f"\n{torch.cuda.get_device_name()}: copy bandwidth {peak:.0f} GB/s")
    print(f"{'batch':>5} {'triton us':>10} {'torch us':>10} {'KV GB/s':>9} {'of copy':>8} {'TFLOPS':>7}")
    for batch in (1, 8, 32, 64):
        indices = _decode_indices(layout, gen, batch)
        q = torch.randn(batch, H, D, device="cuda", dtype=BF16)
        args = (q, kv, indices, SM_SCALE, D_V)
        want = sparse_mla.sparse_mla_attention_ref(*args)[0]
        TOLERANCES[BF16].check(f"out batch={batch}", sparse_mla.sparse_mla_attention_triton(*args)[0], want)
        ms = do_bench(lambda: sparse_mla.sparse_mla_attention_triton(*args))
        ref_ms = do_bench(lambda: sparse_mla.sparse_mla_attention_ref(*args), rep=50)
        gathered = batch * TOPK * D * kv.element_size()
        gbs = gathered / ms / 1e6
        tflops = batch * H * TOPK * (D + D_V) * 2 / ms / 1e9
        print(f"{batch:>5} {ms * 1e3:>10.1f} {ref_ms * 1e3:>10.1f} {gbs:>9.0f} {gbs / peak:>8.0%} {tflops:>7.1f}")
    print("anchor: FlashMLA dense bf16 decode up to 3000 GB/s on H800 (~90% of 3350 GB/s)")

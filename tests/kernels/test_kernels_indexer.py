"""indexer_scores / indexer_topk: the reference against a per-key loop, top-k semantics
(k = min(topk, visible keys), exactly dense when every key fits), the Triton twins against the
reference over permuted and gapped block tables, and argument validation."""

from __future__ import annotations

import pytest
import torch

from kernels import chunks, indexer
from kernels.testing import TOLERANCES, assert_topk_valid, paged_layout

SCORE_TWINS = [indexer.indexer_scores_ref, indexer.indexer_scores_triton]
TOPK_TWINS = [indexer.indexer_topk_ref, indexer.indexer_topk_triton]
HI, DI, BS = 3, 20, 4


def _per_key_loop(q, w, cache, table, seq_ids, positions, seq_lens, scale):
    """Score one (query, key) pair at a time, straight from the definition."""
    out = torch.full((q.shape[0], table.shape[1] * BS), float("-inf"))
    for s in range(q.shape[0]):
        b = int(seq_ids[s])
        if not 0 <= b < table.shape[0]:
            continue
        for t in range(min(int(positions[s]) + 1, int(seq_lens[b]), out.shape[1])):
            block = int(table[b, t // BS])
            if 0 <= block < cache.shape[0]:
                k = cache[block, t % BS].float()
                out[s, t] = sum(float(w[s, h]) * max(0.0, scale * float(q[s, h].float() @ k)) for h in range(HI))
    return out


def _inputs(gen, dtype=torch.float32):
    """Three sequences over permuted blocks with spare (gap) blocks, an unused (-1) block inside
    sequence 0, a query of an unknown sequence, and a query whose position precedes all keys."""
    layout = paged_layout([18, 10, 3], BS, gen, spare_blocks=4, extra_columns=1)
    table = layout.block_table.clone()
    table[0, 2] = -1
    seq_ids = torch.tensor([0, 0, 1, 2, 1, 7, 0])
    positions = torch.tensor([17, 6, 9, 2, 0, 3, -1])
    cache = torch.randn(layout.num_blocks, BS, DI, generator=gen).to(dtype)
    q = torch.randn(len(seq_ids), HI, DI, generator=gen).to(dtype)
    w = torch.randn(len(seq_ids), HI, generator=gen) * HI**-0.5
    return q, w, cache, table, seq_ids, positions, layout.seq_lens


def test_reference_scores_equal_the_per_key_definition(gen):
    args = _inputs(gen)
    got = indexer.indexer_scores_ref(*args, 0.3)
    TOLERANCES[torch.float32].check("scores", got, _per_key_loop(*args, 0.3))
    assert torch.isfinite(got).sum(1).tolist() == [14, 7, 10, 3, 1, 0, 0]


def test_keys_past_each_context_never_reach_a_score(gen):
    """The reference rounds the keys it gathers up to a multiple of `KEY_ALIGN`, past a sequence's
    context: whatever the cache holds there (NaN here, as in never-written blocks) stays masked."""
    q, w, cache, table, seq_ids, positions, seq_lens = _inputs(gen)
    live = torch.zeros(cache.shape[0] * BS, dtype=torch.bool)
    for b, length in enumerate(seq_lens.tolist()):
        for t in range(length):
            if int(table[b, t // BS]) >= 0:
                live[int(table[b, t // BS]) * BS + t % BS] = True
    poisoned = cache.reshape(-1, DI).masked_fill(~live[:, None], float("nan")).reshape(cache.shape)
    got = indexer.indexer_scores_ref(q, w, poisoned, table, seq_ids, positions, seq_lens, 0.3)
    assert not bool(got.isnan().any())
    TOLERANCES[torch.float32].check("scores", got, _per_key_loop(q, w, cache, table, seq_ids, positions, seq_lens, 0.3))
    assert torch.isfinite(got).sum(1).tolist() == [14, 7, 10, 3, 1, 0, 0]


def test_reference_chunking_does_not_change_scores(gen, monkeypatch):
    args = _inputs(gen)
    whole = indexer.indexer_scores_ref(*args, 0.3)
    monkeypatch.setattr(chunks, "MEMORY_BUDGET", 1)
    TOLERANCES[torch.float32].check("scores", indexer.indexer_scores_ref(*args, 0.3), whole)


@pytest.mark.parametrize("twin", TOPK_TWINS, ids=["ref", "triton"])
@pytest.mark.parametrize("topk", [1, 5, 12, 40])
def test_topk_selects_min_topk_visible_best_keys(twin, topk, device, gen):
    args = _inputs(gen)
    scores = _per_key_loop(*args, 0.3)
    got = twin(*(t.to(device) for t in args), 0.3, topk).cpu()
    assert got.shape == (7, topk) and got.dtype == torch.int32
    slots = indexer.key_slots(args[3], args[2].shape[0], BS)
    assert_topk_valid("topk", got, scores, slots, args[4], topk, atol=1e-5)


@pytest.mark.parametrize("twin", TOPK_TWINS, ids=["ref", "triton"])
def test_topk_is_exactly_dense_when_every_key_fits(twin, device, gen):
    layout = paged_layout([9, 6], BS, gen, spare_blocks=2)
    seq_ids, positions = torch.tensor([0, 0, 1]), torch.tensor([8, 3, 5])
    cache = torch.randn(layout.num_blocks, BS, DI, generator=gen)
    q, w = torch.randn(3, HI, DI, generator=gen), torch.randn(3, HI, generator=gen)
    args = (q, w, cache, layout.block_table, seq_ids, positions, layout.seq_lens)
    got = twin(*(t.to(device) for t in args), 0.3, 2048).cpu()
    for s, (b, pos) in enumerate(zip(seq_ids.tolist(), positions.tolist())):
        causal = set(layout.slots(b)[: pos + 1].tolist())
        assert set(got[s, : len(causal)].tolist()) == causal
        assert (got[s, len(causal) :] == -1).all()


@pytest.mark.parametrize("twin", TOPK_TWINS, ids=["ref", "triton"])
def test_topk_breaks_ties_toward_the_earliest_keys_and_lists_them_in_position_order(twin, device, gen):
    """A zero query scores every key exactly 0: the selection is then the first k positions."""
    layout = paged_layout([23, 9], BS, gen, spare_blocks=2)
    seq_ids, positions = torch.tensor([0, 1, 0]), torch.tensor([22, 8, 5])
    q = torch.randn(3, HI, DI, generator=gen)
    q[0] = 0.0
    cache = torch.randn(layout.num_blocks, BS, DI, generator=gen)
    args = (q, torch.randn(3, HI, generator=gen), cache, layout.block_table, seq_ids, positions, layout.seq_lens)
    got = twin(*(t.to(device) for t in args), 0.3, 7).cpu()
    assert got[0].tolist() == layout.slots(0)[:7].tolist()
    for s, b in ((1, 1), (2, 0)):  # distinct scores: whatever is chosen comes in position order
        order = {slot: t for t, slot in enumerate(layout.slots(b).tolist())}
        chosen = [order[slot] for slot in got[s].tolist() if slot >= 0]
        assert chosen == sorted(chosen)


@pytest.mark.parametrize("topk", [1, 5, 16, 40])
def test_best_columns_is_a_stable_sort_by_score_then_position(topk, gen):
    """Rows without ties (the unsorted top-k's shortcut), rows with exact ties straddling the
    k-th score, and rows with fewer than k finite scores, in one call: each chooses what sorting
    its finite scores by (score descending, position ascending) and taking k chooses."""
    scores = torch.randint(0, 4, (12, 32), generator=gen).float()  # exact ties everywhere
    scores[:4] = torch.randn(4, 32, generator=gen)
    scores[5, 10:] = float("-inf")
    scores[6] = float("-inf")
    scores[7, ::2] = float("-inf")
    columns, chosen = indexer.best_columns(scores, topk)
    assert columns.shape == chosen.shape == (12, min(topk, 32))
    for r in range(12):
        finite = [t for t in range(32) if scores[r, t] > float("-inf")]
        best = sorted(finite, key=lambda t: (-float(scores[r, t]), t))[:topk]
        assert columns[r][chosen[r]].tolist() == sorted(best)
        assert chosen[r].tolist() == [i < len(best) for i in range(min(topk, 32))]
    alone, all_chosen = indexer.best_columns(scores[:4], topk)  # only rows without ties: one mask read for all
    assert torch.equal(alone, columns[:4]) and bool(all_chosen.all())


@pytest.mark.parametrize("topk", [5, 40])
def test_reference_scores_only_the_queries_that_see_more_than_topk_keys(topk, gen, monkeypatch):
    """A query that sees at most topk keys selects all of them, so the reference does not score
    it (the first topk rows of a prefill); the selection is still the best-k one."""
    args = _inputs(gen)
    scored, score_rows = [], indexer._score_rows
    monkeypatch.setattr(indexer, "_score_rows", lambda q, *rest: scored.append(q.shape[0]) or score_rows(q, *rest))
    got = indexer.indexer_topk_ref(*args, 0.3, topk)
    scores = _per_key_loop(*args, 0.3)
    assert sum(scored) == int((torch.isfinite(scores).sum(1) > topk).sum())  # 3 rows for 5, none for 40
    assert_topk_valid("topk", got, scores, indexer.key_slots(args[3], args[2].shape[0], BS), args[4], topk, atol=1e-5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
def test_triton_scores_match_reference(dtype, device, gen):
    args = [t.to(device) for t in _inputs(gen, dtype)]
    got = indexer.indexer_scores_triton(*args, 0.3)
    TOLERANCES[torch.float32].check("scores", got, indexer.indexer_scores_ref(*args, 0.3))


def test_triton_scores_match_reference_across_key_tiles(device, gen):
    layout = paged_layout([150, 70], 16, gen, spare_blocks=3)
    seq_ids, positions = torch.tensor([0, 1, 0]), torch.tensor([149, 69, 63])
    cache = torch.randn(layout.num_blocks, 16, 32, generator=gen)
    q, w = torch.randn(3, 17, 32, generator=gen), torch.randn(3, 17, generator=gen)
    args = [t.to(device) for t in (q, w, cache, layout.block_table, seq_ids, positions, layout.seq_lens)]
    got = indexer.indexer_scores_triton(*args, 0.1)
    TOLERANCES[torch.float32].check("scores", got, indexer.indexer_scores_ref(*args, 0.1))


@pytest.mark.parametrize("twin", SCORE_TWINS, ids=["ref", "triton"])
def test_empty_block_table_gives_no_columns(twin, device):
    q, w = torch.randn(2, HI, DI), torch.randn(2, HI)
    table = torch.empty(1, 0, dtype=torch.int32)
    ids, lens = torch.zeros(2, dtype=torch.int64), torch.zeros(1, dtype=torch.int64)
    args = (q, w, torch.randn(1, BS, DI), table, ids, ids, lens)
    assert twin(*(t.to(device) for t in args), 0.3).shape == (2, 0)


def _good_args():
    return [
        torch.zeros(2, HI, DI), torch.zeros(2, HI), torch.zeros(3, BS, DI),
        torch.zeros(1, 2, dtype=torch.int32), torch.zeros(2, dtype=torch.int64),
        torch.zeros(2, dtype=torch.int64), torch.zeros(1, dtype=torch.int64), 0.3,
    ]  # fmt: skip


BAD_ARGS = {
    "q must be 3-D": (0, torch.zeros(2, DI)),
    "weights dim 1 must be 3": (1, torch.zeros(2, 4)),
    "index_cache dtype": (2, torch.zeros(3, BS, DI, dtype=torch.float16)),
    "index_cache dim 2 must be 20": (2, torch.zeros(3, BS, 8)),
    "block_table must have dtype": (3, torch.zeros(1, 2)),
    "seq_ids dim 0 must be 2": (4, torch.zeros(3, dtype=torch.int64)),
    "seq_lens dim 0 must be 1": (6, torch.zeros(2, dtype=torch.int64)),
    "positions must be contiguous": (5, torch.zeros(4, dtype=torch.int64)[::2]),
    "softmax_scale must be a finite number": (7, float("nan")),
}


@pytest.mark.parametrize(
    "twin", SCORE_TWINS + TOPK_TWINS, ids=["scores-ref", "scores-triton", "topk-ref", "topk-triton"]
)
@pytest.mark.parametrize("message", BAD_ARGS, ids=list(BAD_ARGS))
def test_bad_arguments_raise_a_clear_error(twin, message):
    args = _good_args()
    position, value = BAD_ARGS[message]
    args[position] = value
    if twin in TOPK_TWINS:
        args.append(4)
    with pytest.raises(ValueError, match=f"^indexer_(scores|topk): {message}"):
        twin(*args)


@pytest.mark.parametrize("twin", TOPK_TWINS, ids=["ref", "triton"])
@pytest.mark.parametrize("topk", [0, -3, 2.0])
def test_topk_must_be_a_positive_int(twin, topk):
    with pytest.raises(ValueError, match="^indexer_topk: topk must be an int >= 1"):
        twin(*_good_args(), topk)

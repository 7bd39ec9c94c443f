"""kernels.testing: the comparison helpers catch what they promise to catch, and the input
factories build the layouts the kernel tests rely on."""

from __future__ import annotations

import pytest
import torch

from kernels.testing import assert_close, assert_topk_valid, paged_layout, sampled_indices

INF = float("inf")


def test_equal_tensors_pass_with_zero_error():
    x = torch.tensor([[1.0, -INF], [float("nan"), 3.0]])
    result = assert_close("x", x, x.clone(), atol=0, rtol=0, cos_tol=0)
    assert (result.max_abs, result.cos_diff) == (0.0, 0.0)


@pytest.mark.parametrize(
    "got, label",
    [([1.0, INF, 2.0], r"\+inf positions differ .* first at \(1,\)"), ([1.0, 5.0, float("nan")], "nan positions")],
)
def test_special_values_must_sit_at_the_same_positions(got, label):
    with pytest.raises(AssertionError, match=label):
        assert_close("x", torch.tensor(got), torch.tensor([1.0, 5.0, 2.0]), atol=1e9, rtol=1e9, cos_tol=1)


def test_the_worst_element_is_named_with_both_values():
    ref = torch.zeros(2, 3)
    got = ref.clone()
    got[0, 1], got[1, 2] = 0.5, 2.0
    with pytest.raises(AssertionError, match=r"2/6 elements .* worst at \(1, 2\): got 2, reference 0"):
        assert_close("out", got, ref, atol=0.1, rtol=0.0, cos_tol=1.0)


def test_cosine_difference_catches_a_systematic_drift_within_elementwise_bounds():
    ref = torch.linspace(1, 2, 100)
    with pytest.raises(AssertionError, match="cosine difference"):
        assert_close("out", ref * 1.001, ref, atol=0.0, rtol=2e-3, cos_tol=1e-8)


def test_shapes_must_match():
    with pytest.raises(AssertionError, match=r"shape \(2,\) != reference \(3,\)"):
        assert_close("x", torch.zeros(2), torch.zeros(3), atol=1, rtol=1, cos_tol=1)


SCORES = torch.tensor([[3.0, 1.0, 1.0, 0.0, -INF]])
SLOTS = torch.tensor([[10, 11, 12, 13, 14]])
SEQ = torch.tensor([0])


@pytest.mark.parametrize("row", [[10, 11, -1, -1], [10, 12, -1, -1]], ids=["tie-a", "tie-b"])
def test_topk_check_accepts_either_side_of_a_tie(row):
    got = torch.tensor([row], dtype=torch.int32)
    assert_topk_valid("topk", got[:, :2], SCORES, SLOTS, SEQ, 2, atol=0.0)
    assert_topk_valid("topk", torch.tensor([[10, 11, 12, 13, -1]]), SCORES, SLOTS, SEQ, 5, atol=0.0)


@pytest.mark.parametrize(
    "row, message",
    [
        ([10, 13], "leaves out a key scoring 1"),
        ([10, 10], "selects hidden, unknown or repeated"),
        ([10, 14], "selects hidden, unknown or repeated"),
        ([10, -1], "has 1 slots, expected 2"),
    ],
)
def test_topk_check_rejects_wrong_selections(row, message):
    with pytest.raises(AssertionError, match=message):
        assert_topk_valid("topk", torch.tensor([row]), SCORES, SLOTS, SEQ, 2, atol=0.0)


def test_paged_layout_hands_out_disjoint_permuted_blocks_with_gaps():
    gen = torch.Generator().manual_seed(0)
    layout = paged_layout([9, 4, 0], 4, gen, spare_blocks=3, extra_columns=2)
    table = layout.block_table
    used = table[table >= 0]
    assert table.shape == (3, 5) and layout.num_blocks == 3 + 1 + 0 + 3
    assert used.numel() == used.unique().numel() == 4 and int(used.max()) < layout.num_blocks
    assert (table[0, 3:] == -1).all() and (table[2] == -1).all()
    slots = torch.cat([layout.slots(b) for b in range(3)])
    assert slots.numel() == slots.unique().numel() == 13


def test_sampled_indices_are_distinct_visible_slots_then_padding():
    gen = torch.Generator().manual_seed(1)
    layout = paged_layout([12, 5], 4, gen)
    seq_ids, positions = torch.tensor([0, 1, 0]), torch.tensor([11, 4, 2])
    got = sampled_indices(layout, seq_ids, positions, 6, gen)
    for s, (b, pos) in enumerate(zip(seq_ids.tolist(), positions.tolist())):
        valid = got[s][got[s] >= 0].tolist()
        assert len(valid) == len(set(valid)) == min(6, pos + 1)
        assert set(valid) <= set(layout.slots(b)[: pos + 1].tolist())
        assert (got[s, len(valid) :] == -1).all()

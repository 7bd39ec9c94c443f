"""Helpers for proving kernels against their references: a diagnostic comparison, per-dtype
tolerances, a top-k check that is blind to ties, and paged-cache input factories.

Role: every kernel test, the GPU checks and the benchmark compare through these, so a failure
names the worst element and both values (FlashMLA's `check_is_allclose` style).

Invariants:
- `assert_close` demands that nan / +inf / -inf sit at the same positions, then bounds the
  elementwise error (|got − ref| <= atol + rtol·|ref|) and the cosine difference
  1 − 2·Σ(g·r) / Σ(g² + r²) of the finite part, all in float64.
- Factories take an explicit `torch.Generator`, so every input is reproducible.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True, slots=True)
class Comparison:
    """What `assert_close` measured (it raised if a bound failed)."""

    max_abs: float
    max_rel: float
    cos_diff: float


def _position(mask_index: int, shape: torch.Size) -> tuple[int, ...]:
    return tuple(int(i) for i in torch.unravel_index(torch.tensor(mask_index), shape))


def _check_special_values(name: str, got: torch.Tensor, ref: torch.Tensor) -> None:
    for label, where in (("nan", torch.isnan), ("+inf", torch.isposinf), ("-inf", torch.isneginf)):
        differ = (where(got) != where(ref)).flatten()
        if differ.any():
            first = int(differ.nonzero()[0])
            at = _position(first, got.shape)
            raise AssertionError(
                f"{name}: {label} positions differ at {int(differ.sum())} elements; first at {at}: "
                f"got {got.flatten()[first].item()}, reference {ref.flatten()[first].item()}"
            )


def assert_close(
    name: str, got: torch.Tensor, ref: torch.Tensor, *, atol: float, rtol: float, cos_tol: float
) -> Comparison:
    """Raise AssertionError naming the worst element unless `got` matches `ref` (see module doc)."""
    if got.shape != ref.shape:
        raise AssertionError(f"{name}: shape {tuple(got.shape)} != reference {tuple(ref.shape)}")
    g = got.detach().flatten().double()
    r = ref.detach().flatten().double().to(g.device)
    _check_special_values(name, g.view(got.shape), r.view(got.shape))
    finite = torch.isfinite(r)
    gf, rf = g[finite], r[finite]
    if gf.numel() == 0:
        return Comparison(0.0, 0.0, 0.0)
    err = (gf - rf).abs()
    allowed = atol + rtol * rf.abs()
    bad = err > allowed
    if bad.any():
        worst = int((err / allowed).argmax())
        at = _position(int(finite.nonzero()[worst]), got.shape)
        raise AssertionError(
            f"{name}: {int(bad.sum())}/{gf.numel()} elements exceed atol={atol}, rtol={rtol}; "
            f"worst at {at}: got {gf[worst].item():.8g}, reference {rf[worst].item():.8g} "
            f"(|diff| {err[worst].item():.3g}, max |diff| {err.max().item():.3g})"
        )
    denom = float((gf * gf + rf * rf).sum())
    cos_diff = 0.0 if denom == 0 else 1.0 - 2.0 * float((gf * rf).sum()) / denom
    if cos_diff > cos_tol:
        raise AssertionError(f"{name}: cosine difference {cos_diff:.3g} exceeds {cos_tol:.3g}")
    max_rel = float((err / rf.abs().clamp(min=atol)).max())
    return Comparison(float(err.max()), max_rel, cos_diff)


@dataclass(frozen=True, slots=True)
class Tolerance:
    """Bounds for `assert_close` at one dtype."""

    atol: float
    rtol: float
    cos_tol: float

    def check(self, name: str, got: torch.Tensor, ref: torch.Tensor) -> Comparison:
        return assert_close(name, got, ref, atol=self.atol, rtol=self.rtol, cos_tol=self.cos_tol)


# Outputs rounded to a 16-bit dtype may differ by a couple of ulps between twins (different
# summation order; the Triton interpreter also rounds bf16 stores toward zero).
TOLERANCES: dict[torch.dtype, Tolerance] = {
    torch.float32: Tolerance(atol=1e-5, rtol=1e-5, cos_tol=1e-10),
    torch.float16: Tolerance(atol=2e-3, rtol=2e-3, cos_tol=1e-6),
    torch.bfloat16: Tolerance(atol=1.6e-2, rtol=1.6e-2, cos_tol=5e-5),
}


def assert_topk_valid(
    name: str, got: torch.Tensor, scores: torch.Tensor, key_slots: torch.Tensor,
    seq_ids: torch.Tensor, topk: int, *, atol: float,
) -> None:  # fmt: skip
    """`got` [S, topk] slots is a correct top-k of `scores` [S, T], blind to ties.

    key_slots [B, T] maps each key position of a sequence to its slot (-1 unused). Per row:
    the valid entries come first, are distinct and number k = min(topk, finite scores); each
    names a visible key; and no unselected key outscores a selected one by more than `atol`.
    """
    for s in range(got.shape[0]):
        row, finite = got[s], torch.isfinite(scores[s])
        k = min(topk, int(finite.sum()))
        valid = row[row >= 0].long()
        if valid.numel() != k or bool((row[k:] != -1).any()):
            raise AssertionError(f"{name}: row {s} has {valid.numel()} slots, expected {k} then -1: {row.tolist()}")
        if k == 0:
            continue
        chosen = torch.isin(key_slots[int(seq_ids[s])], valid) & finite
        if int(chosen.sum()) != k:
            raise AssertionError(f"{name}: row {s} selects hidden, unknown or repeated slots: {valid.tolist()}")
        rest = finite & ~chosen
        if rest.any() and float(scores[s][rest].max()) > float(scores[s][chosen].min()) + atol:
            raise AssertionError(
                f"{name}: row {s} leaves out a key scoring {float(scores[s][rest].max()):.6g} while "
                f"selecting one scoring {float(scores[s][chosen].min()):.6g}"
            )


@dataclass(frozen=True, slots=True)
class PagedLayout:
    """Where each sequence's tokens live in a paged cache."""

    block_table: torch.Tensor  # [B, MB] int32, -1 padded
    seq_lens: torch.Tensor  # [B] int64
    num_blocks: int
    block_size: int

    def slots(self, b: int) -> torch.Tensor:
        """[seq_lens[b]] int64 slot of each position of sequence b."""
        t = torch.arange(int(self.seq_lens[b]), device=self.block_table.device)
        return self.block_table[b, t // self.block_size].long() * self.block_size + t % self.block_size


def paged_layout(
    seq_lens: list[int], block_size: int, generator: torch.Generator, *,
    spare_blocks: int = 0, extra_columns: int = 0, device: torch.device | str = "cpu",
) -> PagedLayout:  # fmt: skip
    """Blocks handed out in random order: sequences get non-contiguous, permuted blocks, and
    `spare_blocks` unused blocks leave gaps. `extra_columns` widens the table with -1 entries."""
    needed = [-(-n // block_size) for n in seq_lens]
    num_blocks = sum(needed) + spare_blocks
    order = torch.randperm(num_blocks, generator=generator)
    width = max(needed, default=0) + extra_columns
    table = torch.full((len(seq_lens), width), -1, dtype=torch.int32)
    start = 0
    for b, n in enumerate(needed):
        table[b, :n] = order[start : start + n].int()
        start += n
    lens = torch.tensor(seq_lens, dtype=torch.int64)
    return PagedLayout(table.to(device), lens.to(device), num_blocks, block_size)


def sampled_indices(
    layout: PagedLayout, seq_ids: torch.Tensor, positions: torch.Tensor, topk: int,
    generator: torch.Generator,
) -> torch.Tensor:  # fmt: skip
    """[S, topk] int32: for each query, min(topk, position + 1) distinct visible slots of its
    sequence in random order, then -1 (what the indexer hands to sparse attention)."""
    out = torch.full((seq_ids.shape[0], topk), -1, dtype=torch.int32)
    for s in range(seq_ids.shape[0]):
        slots = layout.slots(int(seq_ids[s]))[: int(positions[s]) + 1].cpu()
        chosen = torch.randperm(slots.numel(), generator=generator)[:topk]
        out[s, : chosen.numel()] = slots[chosen].int()
    return out.to(layout.block_table.device)

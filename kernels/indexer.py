"""DSA lightning indexer: score every cached key for each query, and pick each query's top-k slots.

Role: the indexer decides which `topk` keys the sparse MLA attention reads. Keys live in a paged
per-layer cache; key t of sequence b is at slot block_table[b, t // BS] * BS + t % BS.

Maths, for query s of sequence b = seq_ids[s] and key position t:
    I[s, t] = Σ_h weights[s, h] · ReLU(softmax_scale · q[s, h]·k[t])    (ReLU per head, then a
    signed weighted sum; the caller has already folded Hi^-½ into the weights)
    I[s, t] = -inf when t > positions[s], t >= seq_lens[b], or the key's block is unused (< 0).
    topk[s] = the physical slots of the k = min(topk, number of finite scores) best keys in
    key-position order, -1 after; ties at the k-th score go to the lowest positions.

Invariants:
- `indexer_scores` returns [S, T] with T = MB · BS, the block table's capacity, so that its shape
  never depends on tensor values (no host synchronisation; CUDA-graph friendly).
- A block id outside [0, NB) or a seq_id outside [0, B) is never read: those keys are -inf.
- `indexer_topk` chunks over queries in both twins, so its memory stays bounded at any length.
  The reference scores only the queries that can see more than `topk` keys: one that sees
  fewer selects all of them whatever their scores (the first `topk` rows of a prefill).
- Top-k is deterministic: ties (ReLU makes many scores exactly 0) go to the lowest positions, so
  a query selects the same keys in a full prefill, a chunked prefill and a decode step. Selected
  slots come in key-position order (memory order within a block, for the attention's gathers).
  Twins may still differ where two scores are within rounding of each other: compare selections
  modulo near-ties.
"""

from __future__ import annotations

import torch

from kernels import launch
from kernels.chunks import chunks, rows_per_chunk
from kernels.rows import gather_rows
from kernels.validate import (
    FLOAT_DTYPES,
    INDEX_DTYPES,
    check_contiguous,
    check_dim,
    check_inner_contiguous,
    check_int,
    check_positive,
    check_same_device,
    check_tensor,
)

jit = launch.LazyModule("kernels.jit.indexer")  # the @triton.jit kernels: triton loads only when a Triton twin runs

SCORES = "indexer_scores"
TOPK = "indexer_topk"
SELECT_BYTES = 40  # temporaries per score while selecting: masks, running counts, slots
TILE_BYTES = 2 << 20  # logits the reference scores at a time, about one core's L2 cache (see `_score_rows`)
TILE_MIN_ROWS = 16  # queries the reference scores at a time at least, however long the context
KEY_ALIGN = 16  # the keys a tile scores are rounded up to a multiple of this (aligned rows of logits)


def _validate(
    q: torch.Tensor, weights: torch.Tensor, index_cache: torch.Tensor, block_table: torch.Tensor,
    seq_ids: torch.Tensor, positions: torch.Tensor, seq_lens: torch.Tensor, softmax_scale: float,
    op: str = SCORES,
) -> None:  # fmt: skip
    check_tensor(op, "q", q, dims="S, Hi, D", dtypes=FLOAT_DTYPES)
    check_tensor(op, "weights", weights, dims="S, Hi", dtypes=FLOAT_DTYPES)
    check_tensor(op, "index_cache", index_cache, dims="NB, BS, D", dtypes=FLOAT_DTYPES)
    check_tensor(op, "block_table", block_table, dims="B, MB", dtypes=INDEX_DTYPES)
    for name, t in (("seq_ids", seq_ids), ("positions", positions), ("seq_lens", seq_lens)):
        check_tensor(op, name, t, dims="N", dtypes=INDEX_DTYPES)
        check_contiguous(op, name, t)
    check_same_device(
        op, q=q, weights=weights, index_cache=index_cache, block_table=block_table,
        seq_ids=seq_ids, positions=positions, seq_lens=seq_lens,
    )  # fmt: skip
    if index_cache.dtype != q.dtype:
        raise ValueError(f"{op}: index_cache dtype {index_cache.dtype} must match q dtype {q.dtype}")
    num_q, heads, dim = q.shape
    check_dim(op, "weights", weights, 0, num_q, "q's number of queries S")
    check_dim(op, "weights", weights, 1, heads, "q's number of heads Hi")
    check_dim(op, "index_cache", index_cache, 2, dim, "q's head dim D")
    check_dim(op, "seq_ids", seq_ids, 0, num_q, "q's number of queries S")
    check_dim(op, "positions", positions, 0, num_q, "q's number of queries S")
    check_dim(op, "seq_lens", seq_lens, 0, block_table.shape[0], "block_table's number of sequences B")
    check_positive(op, "softmax_scale", softmax_scale)
    for name, t in (("q", q), ("weights", weights), ("block_table", block_table)):
        check_inner_contiguous(op, name, t)
    check_contiguous(op, "index_cache", index_cache)


def key_slots(block_table: torch.Tensor, num_blocks: int, block_size: int) -> torch.Tensor:
    """[B, MB·BS] int64 physical slot of every key position, -1 where its block is unused."""
    offsets = torch.arange(block_table.shape[1] * block_size, device=block_table.device)
    blocks = block_table.long()[:, offsets // block_size]
    slots = blocks * block_size + offsets % block_size
    return slots.masked_fill((blocks < 0) | (blocks >= num_blocks), -1)


def _score_rows(
    q: torch.Tensor, weights: torch.Tensor, cache: torch.Tensor, slots: torch.Tensor,
    seq_ids: torch.Tensor, positions: torch.Tensor, seq_lens: torch.Tensor, scale: float,
) -> torch.Tensor:  # fmt: skip
    """Scores [c, T] of a chunk of queries; keys are gathered once per sequence in the chunk.

    A sequence's queries are scored `TILE_BYTES` of [rows, Hi, keys] logits at a time, but at
    least `TILE_MIN_ROWS` rows, each tile against the keys its last query can see (rounded up
    to `KEY_ALIGN`, as is the sequence's gathered width: the keys past a query's position are
    masked, and widths of 4,047-4,059 keys ran ~10% slower than aligned ones, 85-89 against
    96-98 GFLOP/s, where 9 candidates are scored after a 4k prompt): a prefill skips the causally
    hidden keys. Short contexts get tiles that stay in the L2 cache; long ones keep the rows
    that make the thin [rows·Hi, Di] x [Di, keys] matmuls efficient (on a 2-vCPU Xeon, 16 rows
    against 4 at 4k keys: 16.0 against 20.5 ms for 9 continuations of 14 tokens after a 4k
    prompt, 54-61 against 63-65 ms for the last 512 rows of a 4k prefill). The 344 scored rows
    of a 600-token prefill (16 heads): 5.1-6.3 against 6.0-11.2 ms a layer with 4 MiB tiles of
    unaligned widths, four runs; the 4k cases above unchanged (`bench/bench_indexer.py`)."""
    out = torch.full((q.shape[0], slots.shape[1]), float("-inf"), device=q.device)
    seq_ids = seq_ids.long()
    known = (seq_ids >= 0) & (seq_ids < slots.shape[0])
    for b in torch.unique(seq_ids[known]).tolist():
        rows = (seq_ids == b).nonzero().squeeze(1)
        visible = min(int(seq_lens[b]), int(positions[rows].max()) + 1)
        width = min(slots.shape[1], _aligned(visible))  # the keys past the context are masked below
        if width <= 0:
            continue
        key_slot = slots[b, :width]
        keys = gather_rows(cache, key_slot.clamp(min=0)).float()  # [width, D]
        for tile in chunks(rows.numel(), max(TILE_MIN_ROWS, TILE_BYTES // (4 * q.shape[1] * width))):
            r = rows[tile]
            seen = min(width, _aligned(int(positions[r].max()) + 1))
            logits = torch.matmul(q[r].float() * scale, keys[:seen].T).relu_()  # [r, Hi, seen]; the scale on the smaller side
            scores = torch.matmul(weights[r].float()[:, None, :], logits).squeeze(1)
            hidden = (key_slot[None, :seen] < 0) | (torch.arange(seen, device=q.device) > positions[r, None])
            out[r, :seen] = scores.masked_fill_(hidden, float("-inf"))
    return out


def _aligned(keys: int) -> int:
    return -(-keys // KEY_ALIGN) * KEY_ALIGN


def _ref_chunks(q: torch.Tensor, table_width: int) -> int:
    return rows_per_chunk(table_width * (4 * q.shape[1] + SELECT_BYTES))


def indexer_scores_ref(
    q: torch.Tensor, weights: torch.Tensor, index_cache: torch.Tensor, block_table: torch.Tensor,
    seq_ids: torch.Tensor, positions: torch.Tensor, seq_lens: torch.Tensor, softmax_scale: float,
) -> torch.Tensor:  # fmt: skip
    """Torch reference. Shapes and maths: see `indexer_scores_triton`."""
    _validate(q, weights, index_cache, block_table, seq_ids, positions, seq_lens, softmax_scale)
    num_blocks, block_size, dim = index_cache.shape
    slots = key_slots(block_table, num_blocks, block_size)
    cache = index_cache.reshape(-1, dim)
    out = torch.empty(q.shape[0], slots.shape[1], device=q.device)
    for rows in chunks(q.shape[0], _ref_chunks(q, slots.shape[1])):
        args = (q[rows], weights[rows], cache, slots, seq_ids[rows], positions[rows], seq_lens)
        out[rows] = _score_rows(*args, softmax_scale)
    return out


def indexer_topk_ref(
    q: torch.Tensor, weights: torch.Tensor, index_cache: torch.Tensor, block_table: torch.Tensor,
    seq_ids: torch.Tensor, positions: torch.Tensor, seq_lens: torch.Tensor, softmax_scale: float,
    topk: int,
) -> torch.Tensor:  # fmt: skip
    """Torch reference. Shapes and maths: see `indexer_topk_triton`."""
    _validate(q, weights, index_cache, block_table, seq_ids, positions, seq_lens, softmax_scale, TOPK)
    check_int(TOPK, "topk", topk, minimum=1)
    num_blocks, block_size, dim = index_cache.shape
    slots = key_slots(block_table, num_blocks, block_size)
    cache = index_cache.reshape(-1, dim)
    out = torch.full((q.shape[0], topk), -1, dtype=torch.int32, device=q.device)
    few = _sees_at_most(topk, slots, seq_ids, positions, seq_lens)
    if bool(few.any()):
        out[few] = _select_visible(slots, seq_ids[few], positions[few], seq_lens, topk)
    scored = (~few).nonzero().squeeze(1)
    for part in chunks(scored.numel(), _ref_chunks(q, slots.shape[1])):
        rows = scored[part]
        args = (q[rows], weights[rows], cache, slots, seq_ids[rows], positions[rows], seq_lens)
        out[rows] = _select(_score_rows(*args, softmax_scale), slots, seq_ids[rows], topk)
    return out


def _sees_at_most(topk: int, slots: torch.Tensor, seq_ids: torch.Tensor, positions: torch.Tensor, seq_lens: torch.Tensor) -> torch.Tensor:
    """[S] bool: queries that can see at most `topk` keys (the first rows of a prefill). Such a
    query selects every key it sees, whatever their scores, so the reference skips scoring it."""
    b = seq_ids.long().clamp(0, slots.shape[0] - 1)
    return torch.minimum(positions.long() + 1, seq_lens.long()[b]) <= topk


def _select_visible(slots: torch.Tensor, seq_ids: torch.Tensor, positions: torch.Tensor, seq_lens: torch.Tensor, topk: int) -> torch.Tensor:
    """`_select` for queries that see at most `topk` keys, all of them among the first `topk`
    positions: every key they see is chosen (scores 0 where seen, -inf where hidden)."""
    width = min(topk, slots.shape[1])
    seq = seq_ids.long()
    known = (seq >= 0) & (seq < slots.shape[0])
    b = seq.clamp(0, slots.shape[0] - 1)
    first = slots[b, :width]
    t = torch.arange(width, device=slots.device)
    seen = known[:, None] & (first >= 0) & (t <= positions.long()[:, None]) & (t < seq_lens.long()[b, None])
    if bool((seen[:, 1:] <= seen[:, :-1]).all()):  # each query sees a prefix of positions: nothing to compact
        out = torch.full((seen.shape[0], topk), -1, dtype=torch.int32, device=slots.device)
        out[:, :width] = first.masked_fill(~seen, -1)
        return out
    scores = torch.zeros(seen.shape, device=slots.device).masked_fill_(~seen, float("-inf"))
    return _select(scores, slots[:, :width], seq_ids, topk)


def _select(scores: torch.Tensor, slots: torch.Tensor, seq_ids: torch.Tensor, topk: int) -> torch.Tensor:
    """[c, topk] int32 slots of each row's best finite scores in key-position order, -1 padded
    (`best_columns`'s choice, read from each row's sequence in `slots`)."""
    out = torch.full((scores.shape[0], topk), -1, dtype=torch.int32, device=scores.device)
    if min(topk, scores.shape[1]) == 0 or slots.shape[0] == 0:
        return out
    columns, chosen = best_columns(scores, topk)
    rows = seq_ids.long().clamp(0, slots.shape[0] - 1)
    out[:, : columns.shape[1]] = slots[rows[:, None], columns].int().masked_fill_(~chosen, -1)
    return out


def best_columns(scores: torch.Tensor, topk: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Columns [R, k] (k = min(topk, T)) of each row's k best finite scores in position order,
    and [R, k] bool: which exist (a row with fewer than k finite scores has them first).

    Ties at the k-th score go to the lowest positions, so a query selects the same keys whatever
    the row width (full prefill, chunked prefill, decode); torch.topk alone does not promise that.
    One unsorted top-k finds the k-th score; where exactly k finite scores reach it (no tie
    straddles it: the usual case) the scores that reach it are the choice, read off in position
    order (`nonzero` of that mask; sorting the top-k's columns instead took 1.4x the time for
    the 344 scored rows of a 600-token prefill, as long at 4k keys: `bench/bench_indexer.py`).
    The other rows choose by a mask over the whole row, as do compiled graphs (no
    data-dependent branch there).
    """
    k = min(topk, scores.shape[1])
    kth = scores.topk(k, dim=1, sorted=False).values.amin(1, keepdim=True)
    if torch.compiler.is_dynamo_compiling():
        return _chosen_by_mask(scores, kth, k)
    reached = scores >= kth
    clear = (kth.squeeze(1) > float("-inf")) & (reached.sum(1) == k)
    chosen = torch.ones(scores.shape[0], k, dtype=torch.bool, device=scores.device)
    if bool(clear.all()):
        return reached.nonzero()[:, 1].reshape(scores.shape[0], k), chosen
    columns = torch.empty(scores.shape[0], k, dtype=torch.long, device=scores.device)
    columns[clear] = reached[clear].nonzero()[:, 1].reshape(-1, k)
    rows = (~clear).nonzero().squeeze(1)
    columns[rows], chosen[rows] = _chosen_by_mask(scores[rows], kth[rows], k)
    return columns, chosen


def _chosen_by_mask(scores: torch.Tensor, kth: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """`best_columns` for rows whose k-th score `kth` [R, 1] may be tied or -inf."""
    finite = scores > float("-inf")
    above = (scores > kth) & finite
    ties = (scores == kth) & finite
    chosen = above | (ties & (ties.cumsum(1) <= k - above.sum(1, keepdim=True)))
    dest = (chosen.cumsum(1) - 1).masked_fill_(~chosen, k)  # unchosen land in a spare column
    positions = torch.arange(scores.shape[1], device=scores.device).expand_as(scores)
    columns = torch.zeros(scores.shape[0], k + 1, dtype=torch.long, device=scores.device).scatter_(1, dest, positions)
    count = chosen.sum(1, keepdim=True)
    return columns[:, :k], torch.arange(k, device=scores.device) < count


def _launch_scores(
    q: torch.Tensor, weights: torch.Tensor, index_cache: torch.Tensor, block_table: torch.Tensor,
    seq_ids: torch.Tensor, positions: torch.Tensor, seq_lens: torch.Tensor, softmax_scale: float,
    out: torch.Tensor,
) -> None:  # fmt: skip
    """Fill out [S, MB·BS] with the scores of the queries in q (a chunk is fine)."""
    if out.numel() == 0:
        return
    num_blocks, block_size, dim = index_cache.shape
    dot_fp32 = launch.dot_in_fp32(jit._indexer_scores_kernel, q.dtype)
    block_t = 64 if launch.is_interpreted(jit._indexer_scores_kernel) else 128
    grid = (q.shape[0] * launch.cdiv(out.shape[1], block_t),)
    jit._indexer_scores_kernel[grid](
        q, weights, index_cache, block_table, seq_ids, positions, seq_lens, out,
        q.shape[1], dim, out.shape[1], block_table.shape[0], block_size, num_blocks, softmax_scale,
        q.stride(0), q.stride(1), weights.stride(0), index_cache.stride(1), block_table.stride(0),
        out.stride(0),
        BLOCK_HI=launch.block(q.shape[1]), BLOCK_T=block_t, BLOCK_D=launch.block(dim),
        DOT_FP32=dot_fp32, PRECISION="ieee" if dot_fp32 else "tf32", num_warps=4,
    )  # fmt: skip


def indexer_scores_triton(
    q: torch.Tensor, weights: torch.Tensor, index_cache: torch.Tensor, block_table: torch.Tensor,
    seq_ids: torch.Tensor, positions: torch.Tensor, seq_lens: torch.Tensor, softmax_scale: float,
) -> torch.Tensor:  # fmt: skip
    """Indexer score of every key position of each query's sequence.

    q:           [S, Hi, D] fp32/fp16/bf16 indexer queries (GLM-5: Hi = 32, D = 128)
    weights:     [S, Hi] float per-head weights, signed, Hi^-½ already folded in
    index_cache: [NB, BS, D] q's dtype, contiguous paged indexer keys
    block_table: [B, MB] int32/int64 block ids of each sequence, -1 = unused
    seq_ids:     [S] sequence (row of block_table) of each query
    positions:   [S] absolute position of each query (it sees keys t <= position)
    seq_lens:    [B] number of keys of each sequence
    returns:     [S, MB·BS] fp32; I[s,t] = Σ_h w[s,h]·ReLU(scale·q[s,h]·k[t]), -inf where hidden
    """
    _validate(q, weights, index_cache, block_table, seq_ids, positions, seq_lens, softmax_scale)
    launch.check_launch_device(SCORES, jit._indexer_scores_kernel, q.device)
    out = torch.empty(q.shape[0], block_table.shape[1] * index_cache.shape[1], device=q.device)
    _launch_scores(q, weights, index_cache, block_table, seq_ids, positions, seq_lens, softmax_scale, out)
    return out


def indexer_topk_triton(
    q: torch.Tensor, weights: torch.Tensor, index_cache: torch.Tensor, block_table: torch.Tensor,
    seq_ids: torch.Tensor, positions: torch.Tensor, seq_lens: torch.Tensor, softmax_scale: float,
    topk: int,
) -> torch.Tensor:  # fmt: skip
    """Physical slots of each query's `topk` best keys by indexer score (Triton scores + torch.topk).

    Arguments as `indexer_scores_triton`, plus topk >= 1.
    returns: [S, topk] int32 slots in key-position order; k = min(topk, visible keys) are selected
             (ties at the k-th score to the lowest positions), the rest are -1
    """
    _validate(q, weights, index_cache, block_table, seq_ids, positions, seq_lens, softmax_scale, TOPK)
    check_int(TOPK, "topk", topk, minimum=1)
    launch.check_launch_device(TOPK, jit._indexer_scores_kernel, q.device)
    num_blocks, block_size, _ = index_cache.shape
    slots = key_slots(block_table, num_blocks, block_size)
    out = torch.full((q.shape[0], topk), -1, dtype=torch.int32, device=q.device)
    for rows in chunks(q.shape[0], rows_per_chunk(SELECT_BYTES * slots.shape[1])):
        scores = torch.empty(rows.stop - rows.start, slots.shape[1], device=q.device)
        args = (q[rows], weights[rows], index_cache, block_table, seq_ids[rows], positions[rows])
        _launch_scores(*args, seq_lens, softmax_scale, scores)
        out[rows] = _select(scores, slots, seq_ids[rows], topk)
    return out

"""Query chunking that keeps the torch references' temporaries under a memory budget.

Role: the CPU runtime calls the references at prefill sizes (tens of thousands of tokens), so a
reference never materialises a whole `[S, ...]` temporary at once. It asks `rows_per_chunk`
how many rows fit the budget given its own per-row byte count, then loops over `chunks`.

Invariant: a chunk holds at least one row, so progress is guaranteed even when one row alone
exceeds the budget.
"""

from __future__ import annotations

from collections.abc import Iterator

MEMORY_BUDGET = 256 << 20  # bytes of temporaries a reference may hold at once


def rows_per_chunk(bytes_per_row: int) -> int:
    """How many rows of `bytes_per_row` temporaries fit in MEMORY_BUDGET (at least 1)."""
    return max(1, MEMORY_BUDGET // max(1, bytes_per_row))


def chunks(n: int, size: int) -> Iterator[slice]:
    """Consecutive slices covering range(n), each at most `size` long."""
    for start in range(0, n, size):
        yield slice(start, min(start + size, n))

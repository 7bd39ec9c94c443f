"""A block-store writer process for the crash and concurrency tests (imports no torch).

Usage: python kv_writer.py DIR FIRST COUNT STEP CAPACITY [BATCH]
Writes blocks FIRST, FIRST+STEP, ... (COUNT of them; COUNT 0 = forever) in batches of BATCH,
printing "ready" once the store is open. Block n is `kv_support.block_entry(n)`.
"""

from __future__ import annotations

import itertools
import sys

from kv_support import FINGERPRINT, LAYOUT, block_entry
from model_runtime.kvstore.disk import DiskStore


def main(directory: str, first: str, count: str, step: str, capacity: str, batch: str = "3") -> None:
    store = DiskStore(directory, FINGERPRINT, LAYOUT, int(capacity))
    print("ready", flush=True)
    numbers = itertools.count(int(first), int(step))
    if int(count):
        numbers = itertools.islice(numbers, int(count))
    while chunk := list(itertools.islice(numbers, int(batch))):
        store.put(block_entry(n, 16384) for n in chunk)


if __name__ == "__main__":
    main(*sys.argv[1:])

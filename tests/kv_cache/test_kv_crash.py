"""The disk tier against real processes: writers killed with SIGKILL at random points, and two
writers plus a reader on one store at once. Whatever is left must open, and every block it
names must load, complete and exact."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import msgpack

from kv_support import FINGERPRINT, LAYOUT, block_hash, block_payload, block_tokens
from model_runtime.kvstore.disk import INDEX_NAME, DiskStore

HERE = Path(__file__).parent
ROOT = HERE.parent.parent
PAYLOAD = 16384  # bytes per block written by kv_writer.py
NUMBERS = {block_hash(n).hex(): n for n in range(20000)}


def start_writer(directory: Path, first: int, count: int, step: int, capacity: int) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(HERE)])}
    args = [sys.executable, str(HERE / "kv_writer.py"), str(directory), str(first), str(count), str(step), str(capacity)]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, env=env)
    assert proc.stdout.readline().strip() == b"ready"
    return proc


def verify(directory: Path, capacity: int) -> set[int]:
    """Open the store (recovering), check that it names exactly the block files present and that
    every one loads with its exact payload; returns the block numbers present."""
    store = DiskStore(directory, FINGERPRINT, LAYOUT, capacity)
    files = {p.name.removesuffix(".kvb") for p in store.blocks_dir.iterdir()}
    assert files == set(store.entries), "leftover temporary or unindexed files"
    assert store.total_bytes <= capacity
    present = {NUMBERS[key] for key in store.entries}
    for n in present:
        payload = store.get(block_hash(n), block_tokens(n))
        assert payload is not None and bytes(payload) == block_payload(n, PAYLOAD)
    return present


def unfinished(directory: Path) -> bool:
    names = {p.name for p in (directory / "blocks").iterdir()} | {p.name for p in directory.iterdir()}
    index = msgpack.unpackb((directory / INDEX_NAME).read_bytes())["blocks"] if (directory / INDEX_NAME).exists() else {}
    orphans = {n.removesuffix(".kvb") for n in names if n.endswith(".kvb")} - set(index)
    return any(n.endswith(".tmp") for n in names) or bool(orphans)


def test_writers_killed_mid_write_leave_a_usable_store(tmp_path):
    capacity = 40 * (PAYLOAD + 512)  # small enough that the writers also evict
    rng = random.Random(6)
    seen: set[int] = set()
    torn = 0  # kills that left a temporary file or a block file the index does not name
    for i in range(24):
        proc = start_writer(tmp_path, 500 * i, 0, 1, capacity)
        time.sleep(rng.uniform(0.0, 0.12))
        proc.send_signal(signal.SIGKILL)
        assert proc.wait() == -signal.SIGKILL
        torn += unfinished(tmp_path)
        seen |= verify(tmp_path, capacity)
    assert len(seen) > 24  # the writers got somewhere between kills
    assert torn > 0  # and some kills did land mid-write


def test_concurrent_writers_and_a_reader_do_not_corrupt_each_other(tmp_path):
    capacity = 1 << 30
    writers = [start_writer(tmp_path, 0, 60, 1, capacity), start_writer(tmp_path, 59, 60, -1, capacity)]
    reader = DiskStore(tmp_path, FINGERPRINT, LAYOUT, capacity)
    rng = random.Random(1)
    while any(w.poll() is None for w in writers):
        n = rng.randrange(60)
        payload = reader.get(block_hash(n), block_tokens(n))
        assert payload is None or bytes(payload) == block_payload(n, PAYLOAD)
    assert [w.wait() for w in writers] == [0, 0]
    assert verify(tmp_path, capacity) == set(range(60))

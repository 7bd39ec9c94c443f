"""The C allocator's policy for large temporaries: keep freed memory instead of returning it.

Role: a forward on the CPU allocates and frees many temporaries of a few MB to tens of MB
(attention scores, gathered keys, expert batches). glibc serves each one over its (dynamic)
mmap threshold with a fresh `mmap` and gives freed heap tops back to the kernel past its trim
threshold, so the next forward faults every page in again: ~500k minor faults in a 4k-token
prefill of the mid-size model (with a scoring forward and 32 decode steps). `keep_freed_memory`
fixes the mmap threshold at glibc's maximum (32 MiB) and the trim threshold at 256 MiB: the same
work takes ~80k faults and its prefill 8-11% less time (`bench/bench_allocator.py`), for a peak
resident size 5-14% higher (freed memory up to the trim threshold stays with the process).

Invariants: called at the import of `model_runtime` (before torch allocates; calling it again
changes nothing). The user's own `MALLOC_MMAP_THRESHOLD_` / `MALLOC_TRIM_THRESHOLD_` /
`GLIBC_TUNABLES` (read by glibc at start-up) win, and `GLM5_MALLOC_TUNING=0` turns it off; on a
C library without `mallopt` it does nothing.
"""

from __future__ import annotations

import ctypes
import os
import sys

M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 32 << 20  # glibc's upper bound for M_MMAP_THRESHOLD on 64-bit
TRIM_THRESHOLD = 256 << 20
USER_SETTINGS = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "GLIBC_TUNABLES")


def keep_freed_memory() -> bool:
    """Set the thresholds; True when glibc accepted both."""
    if not sys.platform.startswith("linux") or os.environ.get("GLM5_MALLOC_TUNING") == "0":
        return False
    if any(name in os.environ for name in USER_SETTINGS):
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD))

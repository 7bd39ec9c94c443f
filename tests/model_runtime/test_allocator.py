"""The allocator policy (`model_runtime.allocator`): freed large temporaries stay in the process,
so the next forward does not fault their pages in again; the user's own malloc settings win.

Each case runs in a fresh interpreter: glibc's thresholds are per process and move as memory is
freed, so only a new process starts from glibc's defaults."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from model_runtime import allocator

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="mallopt is glibc's (Linux)")

SIZE = 20 << 20  # above glibc's default mmap threshold, under the policy's 32 MiB
PAGES = SIZE // 4096

# Allocate, touch and free the same size twice, as two forwards' temporaries would; report the
# minor page faults of the second round.
ROUNDS = f"""
import ctypes, json, resource
import model_runtime
libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
libc.malloc.argtypes = (ctypes.c_size_t,)
libc.free.argtypes = (ctypes.c_void_p,)
faults = []
for _ in range(2):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    block = libc.malloc({SIZE})
    ctypes.memset(block, 1, {SIZE})
    libc.free(block)
    faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
print(json.dumps(faults))
"""


def second_round_faults(**env: str) -> int:
    clean = {k: v for k, v in os.environ.items() if k not in (*allocator.USER_SETTINGS, "GLM5_MALLOC_TUNING")}
    out = subprocess.run([sys.executable, "-c", ROUNDS], env=clean | env, capture_output=True, text=True, check=True)
    first, second = json.loads(out.stdout)
    assert first > PAGES // 2, f"the first round must fault its pages in: {first}"
    return second


def test_freed_memory_is_reused_without_faulting_it_in_again():
    assert second_round_faults() < PAGES // 10


def test_without_the_policy_the_second_round_faults_again():
    # glibc's default serves the first round by mmap, raises its threshold when it is freed,
    # then serves the second from fresh heap: every page is faulted in again.
    assert second_round_faults(GLM5_MALLOC_TUNING="0") > PAGES // 2


def test_the_users_own_malloc_setting_wins():
    assert second_round_faults(MALLOC_MMAP_THRESHOLD_=str(128 << 10)) > PAGES // 2


def test_keep_freed_memory_reports_whether_it_applied(monkeypatch):
    monkeypatch.delenv("GLM5_MALLOC_TUNING", raising=False)
    for name in allocator.USER_SETTINGS:
        monkeypatch.delenv(name, raising=False)
    assert allocator.keep_freed_memory() is True
    monkeypatch.setenv("MALLOC_TRIM_THRESHOLD_", "0")
    assert allocator.keep_freed_memory() is False

"""Fixtures: a tiny random checkpoint with a tokenizer, built once per session (nothing downloaded)."""

from __future__ import annotations

import os

import pytest

# Before torch loads (as `model_runtime/__init__` does): OpenMP threads that spin while waiting
# run the engine tests about 20x slower on a shared 2-core machine.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


@pytest.fixture(scope="session")
def tiny_ckpt(tmp_path_factory):
    from model_runtime.testing import make_tiny_checkpoint

    return make_tiny_checkpoint(tmp_path_factory.mktemp("kv-tiny"))


@pytest.fixture(scope="session")
def tiny(tiny_ckpt):
    from model_runtime import load_model

    return load_model(tiny_ckpt)

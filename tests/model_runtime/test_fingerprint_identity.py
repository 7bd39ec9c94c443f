"""`weights_identity` names the weights themselves: not their path or mtime, but their data."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from model_runtime.fingerprint import weights_digest, weights_identity
from model_runtime.testing import make_tiny_checkpoint


def test_a_copy_with_other_mtimes_is_the_same_model_and_other_data_is_not(tmp_path: Path) -> None:
    original = tmp_path / "a"
    make_tiny_checkpoint(original)
    copy = tmp_path / "b"
    shutil.copytree(original, copy)
    for file in copy.glob("*.safetensors"):
        os.utime(file, (1_000_000, 1_000_000))
    assert weights_identity(copy) == weights_identity(original)
    assert weights_digest(copy) != weights_digest(original)  # the KV store's key trusts mtimes; this does not
    retrained = tmp_path / "c"
    make_tiny_checkpoint(retrained, seed=1)
    assert weights_identity(retrained) != weights_identity(original)

"""Fixtures of the remote-engine tests: a tiny checkpoint, the `glm5-serve` daemon as a subprocess
on 127.0.0.1, and scripted OpenAI-compatible endpoints (`scripted.py`) for the failure cases.

Every server here listens on the loopback only, and every wait is bounded.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "lsp_server"))
sys.path.insert(0, str(Path(__file__).resolve().parent))


@pytest.fixture(scope="session", autouse=True)
def runtime_dir(tmp_path_factory):
    """Token files of the daemons started here (and read by their clients, subprocesses too) go
    to a private folder, not the user's runtime dir."""
    path = tmp_path_factory.mktemp("runtime")
    before = os.environ.get("GLM5_RUNTIME_DIR")
    os.environ["GLM5_RUNTIME_DIR"] = str(path)
    yield path
    if before is None:
        os.environ.pop("GLM5_RUNTIME_DIR", None)
    else:
        os.environ["GLM5_RUNTIME_DIR"] = before


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory) -> Path:
    from model_runtime.testing import make_tiny_checkpoint

    return make_tiny_checkpoint(tmp_path_factory.mktemp("tiny-glm5"))

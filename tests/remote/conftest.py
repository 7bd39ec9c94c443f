"""Fixtures of the remote-engine tests: a tiny checkpoint, the `glm5-serve` daemon as a subprocess
on 127.0.0.1, and scripted OpenAI-compatible endpoints (`scripted.py`) for the failure cases.

Every server here listens on the loopback only, and every wait is bounded.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "lsp_server"))
sys.path.insert(0, str(Path(__file__).resolve().parent))


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory) -> Path:
    from model_runtime.testing import make_tiny_checkpoint

    return make_tiny_checkpoint(tmp_path_factory.mktemp("tiny-glm5"))

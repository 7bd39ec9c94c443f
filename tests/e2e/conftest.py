"""End-to-end fixtures: one tiny random GLM-5 checkpoint per test session (built in ~1 s).

The LSP test harness lives with the server's unit tests (tests/lsp_server/lsp_harness.py);
this directory's tests import it from there.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "lsp_server"))


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory) -> Path:
    from model_runtime.testing import make_tiny_checkpoint

    return make_tiny_checkpoint(tmp_path_factory.mktemp("tiny-glm5"))

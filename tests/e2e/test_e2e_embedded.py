"""`lsp_server --stdio` with no model named runs the embedded default model end to end."""

from __future__ import annotations

import sys

import pytest

from lsp_harness import Session
from model_runtime import default_model_path

pytestmark = pytest.mark.e2e


async def test_server_without_a_model_uses_the_embedded_one(tmp_path):
    (tmp_path / "util.py").write_text("def compute_total(items):\n    return sum(items)\n")
    main = tmp_path / "main.py"
    main.write_text("from util import compute_total\n\nitems = [1, 2, 3]\ntotal = \n")
    session = await Session.start(  # the model must run: no skipping it when no candidate is in reach
        [sys.executable, "-m", "lsp_server", "--stdio"], [tmp_path], init_options={"warmup": False, "skipUnreachable": False}
    )
    try:
        await session.wait_ready()
        uri = session.open(main)
        result = await session.inline(uri, 3, 8)
        stats = await session.stats()
        assert stats["model"]["state"] == "ready"
        assert stats["model"]["path"] == str(default_model_path())
        assert stats["engine"]["requests_finished"] >= 1
        assert result.items is not None
    finally:
        assert await session.stop() == 0

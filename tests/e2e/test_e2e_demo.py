"""The README's main command shows the right completion or nothing (issue 11's proof)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]


def test_the_demo_shows_centroid_or_nothing():
    run = subprocess.run(
        [sys.executable, "-m", "lsp_server", "complete", "examples/demo/app.py:22:14", "--workspace", "examples/demo"],
        cwd=REPO, capture_output=True, text=True, timeout=300,
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() in ("", "centroid(points)"), run.stdout
    if not run.stdout.strip():
        assert "abstained" in run.stderr

"""The README's main command shows the right completion."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]


def test_the_demo_shows_centroid():
    run = subprocess.run(
        [sys.executable, "-m", "lsp_server", "complete", "examples/demo/app.py:22:14", "--workspace", "examples/demo"],
        cwd=REPO, capture_output=True, text=True, timeout=300,
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout == "centroid(points)\n", (run.stdout, run.stderr)

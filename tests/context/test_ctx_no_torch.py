"""Architecture invariant: the context layer never imports torch (nor LSP types)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

PROBE = """
import importlib, pkgutil, sys
import context
names = [m.name for m in pkgutil.iter_modules(context.__path__, "context.")]
for name in names:
    importlib.import_module(name)
banned = sorted(m for m in sys.modules if m.split(".")[0] in {"torch", "lsprotocol", "pygls"})
print(len(names), banned)
"""


def test_importing_every_context_module_loads_no_torch() -> None:
    result = subprocess.run([sys.executable, "-c", PROBE], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    count, banned = result.stdout.strip().split(" ", 1)
    assert int(count) >= 15
    assert banned == "[]"

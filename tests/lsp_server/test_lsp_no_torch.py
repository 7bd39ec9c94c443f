"""`lsp_server` (every submodule) and `context` import without pulling in torch."""

from __future__ import annotations

import subprocess
import sys

from lsp_harness import REPO

PROGRAM = """
import importlib, pkgutil, sys
import context, lsp_server
names = []
for package in (context, lsp_server):
    for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
        importlib.import_module(info.name)
        names.append(info.name)
assert "lsp_server.server" in names and "lsp_server.features.inline_completion" in names, names
heavy = sorted(m for m in sys.modules if m == "torch" or m.startswith("torch.") or m == "triton")
print(len(names), "modules;", "heavy:", heavy)
sys.exit(1 if heavy else 0)
"""


def test_importing_the_server_and_context_does_not_import_torch():
    done = subprocess.run([sys.executable, "-c", PROGRAM], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr

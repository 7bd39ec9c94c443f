"""Runs the VS Code extension's node test suite: unit tests of its logic, and the protocol test
that drives the real `python -m lsp_server --stdio` through vscode-jsonrpc.

Skipped only when node or the extension's node_modules are absent
(`editor-client/install-test-deps.sh` installs them).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys

import pytest
from editor_support import EDITOR_CLIENT, missing

pytestmark = pytest.mark.editor

VSCODE = EDITOR_CLIENT / "vscode"


def test_node_suite(tiny_model, editor_env):
    node = shutil.which("node")
    if node is None:
        missing("node is not installed")
    if not (VSCODE / "node_modules" / "typescript").is_dir():
        missing("editor-client/vscode/node_modules is not installed (run editor-client/install-test-deps.sh)")
    build = subprocess.run(
        [node, str(VSCODE / "node_modules/typescript/bin/tsc"), "-p", str(VSCODE)],
        capture_output=True, text=True, timeout=120,
    )
    assert build.returncode == 0, build.stdout + build.stderr
    env = editor_env | {"GLM5_PYTHON": sys.executable, "GLM5_MODEL": str(tiny_model)}
    env.pop("GLM5_SERVER_CMD", None)
    run = subprocess.run(
        [node, "--test", "out/test/"], cwd=VSCODE, env=env, capture_output=True, text=True, timeout=300
    )
    report = run.stdout + run.stderr
    assert run.returncode == 0, report[-6000:]
    counts = {k: int(v) for k, v in re.findall(r"^# (pass|fail|skipped|cancelled) (\d+)$", report, re.M)}
    assert counts["fail"] == counts["cancelled"] == counts["skipped"] == 0, report[-3000:]
    assert counts["pass"] >= 30, counts

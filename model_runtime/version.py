"""The package's version: one source of truth, `version` in pyproject.toml.

Role: every command line's `--version` (`lsp_server`, `glm5-serve`, `python -m model_runtime`)
and the server's `serverInfo` print this. It is read from the installed distribution's metadata
(which pip writes from pyproject.toml), else, in a checkout that was never installed, from
pyproject.toml itself. No torch.
"""

from __future__ import annotations

import tomllib
from importlib import metadata
from pathlib import Path

DISTRIBUTION = "glm5-lsp"


def package_version() -> str:
    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        pyproject = Path(__file__).resolve().parents[1] / "pyproject.toml"
        return tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]["version"]

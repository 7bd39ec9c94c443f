"""Where the embedded default model lives: a small GLM-5-architecture code model shipped in the package.

Invariant: the directory is a normal HF-layout checkpoint, loaded by the same loader as real
GLM-5 weights; `default_model_path()` raises FileNotFoundError with instructions if it is absent.
"""

from __future__ import annotations

from pathlib import Path

DEFAULT_MODEL_DIR = Path(__file__).resolve().parent / "default_model"


def default_model_path() -> Path:
    if not (DEFAULT_MODEL_DIR / "config.json").is_file():
        raise FileNotFoundError(
            f"the embedded default model is missing from {DEFAULT_MODEL_DIR}; "
            "reinstall glm5-lsp or pass a checkpoint directory with --model"
        )
    return DEFAULT_MODEL_DIR

"""GLM-5 (`glm_moe_dsa`) runtime: model, loader, tokenizer and generation engine.

Role: everything that touches torch lives below this package (and `kernels/`). The public
entry point is `load_model(path, device="cpu", dtype=torch.float32)`.

Invariant: importing `model_runtime` (or `model_runtime.api` / `model_runtime.tokenizer`)
does not import torch; torch-backed names are resolved lazily on first attribute access.
"""

from __future__ import annotations

import os
from typing import Any

from model_runtime.allocator import keep_freed_memory

# PyTorch's OpenMP threads spin while waiting. Sharing 2 cores with an editor (or anything else)
# makes that spinning 20x slower than sleeping (measured: 19.7 s vs 0.9 s for the same decode).
# Set before torch is first imported; the user's own setting wins.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

# Freed temporaries stay in the process for the next forward (see `model_runtime.allocator`).
keep_freed_memory()

__all__ = ["load_model", "LoadedModel", "ModelConfig", "default_model_path"]

_LAZY = {
    "load_model": ("model_runtime.runtime", "load_model"),
    "LoadedModel": ("model_runtime.runtime", "LoadedModel"),
    "ModelConfig": ("model_runtime.config", "ModelConfig"),
    "default_model_path": ("model_runtime.embedded", "default_model_path"),
}


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'model_runtime' has no attribute {name!r}")
    import importlib

    module_name, attr = _LAZY[name]
    return getattr(importlib.import_module(module_name), attr)

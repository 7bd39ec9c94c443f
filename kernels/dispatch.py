"""One entry point per op that runs either the Triton kernel or its torch reference.

Role: the runtime calls `kernels.<op>(...)` and never chooses an implementation itself.

Invariants:
- The backend is resolved once, at the first call: `GLM5_KERNELS=torch|triton` if set, else
  "triton" when CUDA is available, else "torch". A bad value raises a ValueError naming it.
- `use_backend(name)` overrides it for the duration of a `with` block (tests, benchmarks). The
  override is process-wide, not per thread, so it also reaches the engine thread.
- Triton runs only where it can: tensors on CUDA, or any tensor when TRITON_INTERPRET is set.
  Under the "triton" backend, CPU tensors without the interpreter go to the reference, so a CPU
  model on a CUDA machine still works.
- Every dispatched function has the twins' signature and the Triton twin's docstring (shapes,
  dtypes, maths); both twins validate their arguments identically.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import ModuleType
from typing import Any, TypeVar

import torch

from kernels import fp8, indexer, launch, norm, rope, sparse_mla

BACKENDS = ("torch", "triton")
ENV_VAR = "GLM5_KERNELS"

_resolved: str | None = None
_override: str | None = None

F = TypeVar("F", bound=Callable[..., Any])


def _check_name(name: object, source: str) -> str:
    if name not in BACKENDS:
        raise ValueError(f"{source} must be one of {BACKENDS}, got {name!r}")
    return name  # type: ignore[return-value]


def _resolve() -> str:
    requested = os.environ.get(ENV_VAR, "").strip()
    if requested:
        return _check_name(requested.lower(), f"environment variable {ENV_VAR}")
    return "triton" if torch.cuda.is_available() else "torch"


def backend() -> str:
    """The backend in force now: "triton" or "torch"."""
    global _resolved
    if _override is not None:
        return _override
    if _resolved is None:
        _resolved = _resolve()
    return _resolved


@contextmanager
def use_backend(name: str) -> Iterator[None]:
    """Run the ops inside the block on `name` ("triton" or "torch"); restores the previous one."""
    global _override
    previous = _override
    _override = _check_name(name, "use_backend(name)")
    try:
        yield
    finally:
        _override = previous


def _first_tensor(args: tuple[Any, ...], kwargs: dict[str, Any]) -> torch.Tensor | None:
    for value in (*args, *kwargs.values()):
        if isinstance(value, torch.Tensor):
            return value
    return None


def _runs_triton(args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    if backend() != "triton":
        return False
    tensor = _first_tensor(args, kwargs)
    return launch.interpreter_enabled() or (tensor is not None and tensor.is_cuda)


def runs_triton(tensor: torch.Tensor) -> bool:
    """Whether an op on `tensor` would run its Triton twin now (else its torch reference)."""
    return _runs_triton((tensor,), {})


def _dispatched(module: ModuleType, op: str, triton_twin: F) -> F:
    """`op` with the twins' signature and docstring, looking both up on `module` at call time."""

    @functools.wraps(triton_twin)
    def run(*args: Any, **kwargs: Any) -> Any:
        suffix = "_triton" if _runs_triton(args, kwargs) else "_ref"
        return getattr(module, op + suffix)(*args, **kwargs)

    run.__name__ = run.__qualname__ = op
    return run  # type: ignore[return-value]


sparse_mla_attention = _dispatched(sparse_mla, "sparse_mla_attention", sparse_mla.sparse_mla_attention_triton)
indexer_scores = _dispatched(indexer, "indexer_scores", indexer.indexer_scores_triton)
indexer_topk = _dispatched(indexer, "indexer_topk", indexer.indexer_topk_triton)
rms_norm = _dispatched(norm, "rms_norm", norm.rms_norm_triton)
rope_interleaved = _dispatched(rope, "rope_interleaved", rope.rope_interleaved_triton)
fp8_block_dequant = _dispatched(fp8, "fp8_block_dequant", fp8.fp8_block_dequant_triton)

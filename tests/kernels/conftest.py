"""Fixtures for the kernel tests: where the Triton kernels run, and seeded generators.

Triton decides whether a kernel is interpreted when `triton.jit` decorates it, i.e. when the
kernel's module (`kernels.jit.<op>`) is imported. Without CUDA this conftest sets TRITON_INTERPRET=1 before the
kernel modules are imported, and re-imports any that another test module imported earlier, so
the Triton twins run on CPU tensors through the interpreter. With CUDA the same tests run the
compiled kernels on the GPU at the same tiny shapes.
"""

from __future__ import annotations

import importlib
import os
import sys

import torch

if not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"

import pytest  # noqa: E402

from kernels import launch  # noqa: E402

KERNEL_MODULES = ("kernels.jit.sparse_mla", "kernels.jit.indexer", "kernels.jit.norm", "kernels.jit.rope", "kernels.jit.fp8")


def _interpreted(module_name: str) -> bool:
    module = sys.modules[module_name]
    return any(launch.is_interpreted(v) for n, v in vars(module).items() if n.endswith("_kernel"))


if not torch.cuda.is_available():
    for name in KERNEL_MODULES:
        if name in sys.modules and not _interpreted(name):
            importlib.reload(sys.modules[name])


@pytest.fixture(scope="session")
def device() -> torch.device:
    """The device the Triton twins run on: the GPU if there is one, else the interpreter's CPU."""
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


@pytest.fixture
def gen() -> torch.Generator:
    """A CPU generator with a fixed seed (inputs are made on CPU, then moved)."""
    return torch.Generator().manual_seed(20260)

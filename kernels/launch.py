"""Launch helpers shared by the Triton wrappers: where a kernel may run and how wide a grid to aim for.

Role: one place that knows the difference between a compiled Triton kernel (CUDA tensors only)
and one built under `TRITON_INTERPRET=1` (runs on the CPU through numpy, for tests).

Invariants:
- Whether a kernel is interpreted is read from the kernel object itself: Triton decides it when
  the module defining the kernel is imported, so the environment variable alone can lie.
- The interpreter computes bf16 arithmetic wrongly; `dot_in_fp32` tells a kernel to upcast.
- Nothing here imports triton until a Triton kernel is about to run: the `@triton.jit` code lives
  in `kernels.jit` and each op module reaches it through a `LazyModule`, so the torch reference
  path (the CPU runtime) never loads triton.
"""

from __future__ import annotations

import importlib
from types import ModuleType

import torch

INTERPRETER_PROGRAMS = 4  # grid width to aim for under the interpreter (about 1 ms per program)


class LazyModule:
    """The module `name`, imported at the first attribute read (then found in `sys.modules`)."""

    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, attr: str) -> object:
        module: ModuleType = importlib.import_module(self._name)
        return getattr(module, attr)


def is_interpreted(kernel: object) -> bool:
    """True when `kernel` was built by `triton.jit` under TRITON_INTERPRET=1."""
    from triton.runtime.interpreter import InterpretedFunction

    return isinstance(kernel, InterpretedFunction)


def interpreter_enabled() -> bool:
    """TRITON_INTERPRET is set now (kernels imported from now on will be interpreted)."""
    import triton

    return bool(triton.knobs.runtime.interpret)


def cdiv(a: int, b: int) -> int:
    """ceil(a / b) for integers (as `triton.cdiv`)."""
    return -(-a // b)


def next_power_of_2(n: int) -> int:
    """The smallest power of two >= n, 1 for n <= 1 (as `triton.next_power_of_2`)."""
    return 1 << max(0, n - 1).bit_length()


def check_launch_device(op: str, kernel: object, device: torch.device) -> None:
    """A compiled kernel needs CUDA tensors; an interpreted one runs on any device."""
    if device.type != "cuda" and not is_interpreted(kernel):
        raise ValueError(
            f"{op}: the Triton kernel needs CUDA tensors, got tensors on {device}; use the "
            f"torch reference (kernels.use_backend('torch')) or set TRITON_INTERPRET=1 before "
            f"importing kernels"
        )


def dot_in_fp32(kernel: object, dtype: torch.dtype) -> bool:
    """Run tl.dot on fp32 operands: for fp32 inputs, and for bf16 under the interpreter."""
    return dtype == torch.float32 or (dtype == torch.bfloat16 and is_interpreted(kernel))


def target_programs(kernel: object, device: torch.device) -> int:
    """How many programs a launch should aim for to fill the device (two waves of SMs)."""
    if is_interpreted(kernel) or device.type != "cuda":
        return INTERPRETER_PROGRAMS
    return 2 * torch.cuda.get_device_properties(device).multi_processor_count


def block(n: int, minimum: int = 16) -> int:
    """The power-of-two tile that covers `n` (at least `minimum`, which tl.dot needs)."""
    return max(minimum, next_power_of_2(n))

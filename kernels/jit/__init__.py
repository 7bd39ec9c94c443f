"""The `@triton.jit` kernels, one module per op of `kernels/` (same names).

Role: the only modules that import triton. Each op module (`kernels.norm`, ...) keeps its torch
reference, validation and launch planning, and reaches its kernels here through
`launch.LazyModule`, so triton (and its ~0.3 s import) loads only when a Triton twin runs: on
CUDA tensors, or under TRITON_INTERPRET in tests. Whether a kernel is interpreted is fixed when
its module here is first imported.
"""

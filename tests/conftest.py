"""Suite-wide setup, done before any test module imports torch or the kernels.

- PyTorch's OpenMP threads must sleep, not spin, while they wait. On a 2-core CI machine the
  server subprocesses, editors and the test process share the cores; spinning OpenMP workers
  made engine steps ~20x slower. `model_runtime` sets this default too, but a test module may
  import torch first, so it is set here.
- Without CUDA the Triton twins run under the interpreter, and Triton decides that when a
  kernel module is imported. Any test module that imports `model_runtime` imports the kernels,
  and collection order is not the kernel tests' to choose, so TRITON_INTERPRET is set here,
  suite-wide (the runtime itself dispatches CPU tensors to the torch references either way).
"""

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import torch  # noqa: E402  (after OMP_WAIT_POLICY)

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

"""Suite-wide setup: PyTorch's OpenMP threads must sleep, not spin, while they wait.

On a 2-core CI machine the server subprocesses, editors and the test process share the cores;
spinning OpenMP workers made engine steps ~20x slower. `model_runtime` sets this default too,
but a test module may import torch first, so it is set here before anything imports torch.
"""

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

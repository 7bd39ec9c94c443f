"""kernels dispatch: backend resolution (environment, CUDA), the `use_backend` override,
routing of each call to the right twin, and the twins' identical signatures."""

from __future__ import annotations

import inspect
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import kernels
from kernels import dispatch, fp8, indexer, launch, norm, rope, sparse_mla
from kernels.testing import TOLERANCES

OPS = [
    (sparse_mla, "sparse_mla_attention"),
    (indexer, "indexer_scores"),
    (indexer, "indexer_topk"),
    (norm, "rms_norm"),
    (rope, "rope_interleaved"),
    (fp8, "fp8_block_dequant"),
]


@pytest.mark.parametrize("module, op", OPS, ids=[op for _, op in OPS])
def test_twins_and_public_op_share_one_signature(module, op):
    ref, triton_twin = getattr(module, op + "_ref"), getattr(module, op + "_triton")
    assert inspect.signature(ref) == inspect.signature(triton_twin)
    public = getattr(kernels, op)
    assert inspect.signature(public) == inspect.signature(ref) and public.__name__ == op
    assert "returns:" in public.__doc__


@pytest.mark.parametrize("value, want", [("torch", "torch"), (" Triton ", "triton"), ("TORCH", "torch")])
def test_environment_variable_picks_the_backend(value, want, monkeypatch):
    monkeypatch.setenv("GLM5_KERNELS", value)
    assert dispatch._resolve() == want


def test_environment_variable_with_an_unknown_backend_is_an_error(monkeypatch):
    monkeypatch.setenv("GLM5_KERNELS", "cuda")
    with pytest.raises(ValueError, match="GLM5_KERNELS must be one of .*got 'cuda'"):
        dispatch._resolve()


@pytest.mark.parametrize("cuda, want", [(True, "triton"), (False, "torch")])
def test_default_backend_follows_cuda(cuda, want, monkeypatch):
    monkeypatch.delenv("GLM5_KERNELS", raising=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
    assert dispatch._resolve() == want


def test_backend_is_resolved_once(monkeypatch):
    monkeypatch.setattr(dispatch, "_resolved", None)
    monkeypatch.setenv("GLM5_KERNELS", "torch")
    assert kernels.backend() == "torch"
    monkeypatch.setenv("GLM5_KERNELS", "triton")
    assert kernels.backend() == "torch"


def test_use_backend_overrides_then_restores_even_after_an_error():
    before = kernels.backend()
    with kernels.use_backend("triton"):
        assert kernels.backend() == "triton"
        with kernels.use_backend("torch"):
            assert kernels.backend() == "torch"
        assert kernels.backend() == "triton"
    with pytest.raises(RuntimeError), kernels.use_backend("torch"):
        raise RuntimeError("boom")
    assert kernels.backend() == before


def test_use_backend_rejects_an_unknown_name():
    with pytest.raises(ValueError, match="use_backend"), kernels.use_backend("numpy"):
        pass


def _spy_on_twins(monkeypatch, calls):
    for suffix in ("_ref", "_triton"):
        original = getattr(norm, "rms_norm" + suffix)

        def spy(*args, _original=original, _suffix=suffix, **kwargs):
            calls.append(_suffix)
            return _original(*args, **kwargs)

        monkeypatch.setattr(norm, "rms_norm" + suffix, spy)


@pytest.mark.parametrize(
    "name, interpreter, want",
    [("torch", True, "_ref"), ("triton", True, "_triton"), ("triton", False, "_ref")],
    ids=["torch", "triton-interpreted", "triton-on-cpu-tensors"],
)
def test_each_call_goes_to_the_twin_that_can_run_it(name, interpreter, want, monkeypatch):
    if want == "_triton" and not launch.is_interpreted(norm.jit._rms_norm_kernel):
        pytest.skip("the kernels were compiled for CUDA, not built for the interpreter")
    calls: list[str] = []
    _spy_on_twins(monkeypatch, calls)
    monkeypatch.setattr(launch, "interpreter_enabled", lambda: interpreter)
    x, w = torch.randn(3, 8), torch.ones(8)
    with kernels.use_backend(name):
        y, _ = kernels.rms_norm(x, w, 1e-5)
    assert calls == [want]
    TOLERANCES[torch.float32].check("y", y, norm.rms_norm_ref(x, w, 1e-5)[0])


def test_compiled_kernel_refuses_cpu_tensors_with_a_hint():
    with pytest.raises(ValueError, match="needs CUDA tensors.*TRITON_INTERPRET=1"):
        launch.check_launch_device("op", object(), torch.device("cpu"))


CPU_PATH = """
import sys, torch
import kernels, model_runtime.runtime, model_runtime.engine
from kernels import norm
x = torch.randn(4, 8)
y, _ = kernels.rms_norm(x, torch.ones(8), 1e-6)
assert torch.allclose(y, norm.rms_norm_ref(x, torch.ones(8), 1e-6)[0])
print(sorted(m for m in sys.modules if m == "triton" or m.startswith(("triton.", "kernels.jit"))))
"""


def test_the_torch_reference_path_never_imports_triton():
    """The CPU runtime (reference backend, no interpreter) loads neither triton nor the kernels' jit code."""
    env = {k: v for k, v in os.environ.items() if k not in ("TRITON_INTERPRET", "GLM5_KERNELS")}
    env["CUDA_VISIBLE_DEVICES"] = ""  # a CUDA machine's CPU path: the dispatcher picks the reference
    done = subprocess.run([sys.executable, "-c", CPU_PATH], cwd=Path(kernels.__file__).parents[1], env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]", done.stdout

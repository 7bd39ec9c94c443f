"""rms_norm: the reference is bit-identical to Hugging Face's GLM-5 RMSNorm (with and without
the fused residual add), the Triton twin matches it, and bad arguments raise clear errors."""

from __future__ import annotations

import pytest
import torch

from kernels import chunks, norm
from kernels.testing import TOLERANCES

TWINS = [norm.rms_norm_ref, norm.rms_norm_triton]
DTYPES = [torch.float32, torch.float16, torch.bfloat16]


def _hf_rms_norm(weight: torch.Tensor, eps: float):
    from transformers.models.glm_moe_dsa.modeling_glm_moe_dsa import GlmMoeDsaRMSNorm

    module = GlmMoeDsaRMSNorm(weight.shape[0], eps=eps)
    module.weight.data = weight.clone()
    return module


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_reference_is_bit_identical_to_hugging_face(dtype, gen):
    x = (torch.randn(7, 96, generator=gen) * 3).to(dtype)
    residual = torch.randn(7, 96, generator=gen).to(dtype)
    weight = (1 + 0.1 * torch.randn(96, generator=gen)).to(dtype)
    hf = _hf_rms_norm(weight, 1e-5)
    with torch.no_grad():
        y, res_out = norm.rms_norm_ref(x, weight, 1e-5)
        assert torch.equal(y, hf(x)) and res_out is x
        y, res_out = norm.rms_norm_ref(x, weight, 1e-5, residual)
        assert torch.equal(res_out, x + residual)
        assert torch.equal(y, hf(x + residual))


def test_reference_chunking_does_not_change_results(gen, monkeypatch):
    x, weight = torch.randn(9, 40, generator=gen), torch.randn(40, generator=gen)
    whole = norm.rms_norm_ref(x, weight, 1e-6)[0]
    monkeypatch.setattr(chunks, "MEMORY_BUDGET", 1)
    assert torch.equal(norm.rms_norm_ref(x, weight, 1e-6)[0], whole)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("with_residual", [False, True], ids=["plain", "residual"])
def test_triton_matches_reference(dtype, with_residual, device, gen):
    wide = (torch.randn(6, 600, generator=gen) * 2).to(dtype).to(device)
    x = wide[:, :576]  # a strided view, like the latent half of kv_a_proj's output
    residual = torch.randn(6, 576, generator=gen).to(dtype).to(device) if with_residual else None
    weight = torch.randn(576, generator=gen).to(dtype).to(device)
    got_y, got_res = norm.rms_norm_triton(x, weight, 1e-5, residual)
    ref_y, ref_res = norm.rms_norm_ref(x, weight, 1e-5, residual)
    TOLERANCES[dtype].check("y", got_y, ref_y)
    if with_residual:
        TOLERANCES[dtype].check("residual_out", got_res, ref_res)
    else:
        assert got_res is x


def test_triton_with_fp32_weight_on_bf16_rows_matches_reference(device, gen):
    x = torch.randn(3, 72, generator=gen).to(torch.bfloat16).to(device)
    weight = torch.randn(72, generator=gen).to(device)
    got, ref = norm.rms_norm_triton(x, weight, 1e-6)[0], norm.rms_norm_ref(x, weight, 1e-6)[0]
    assert got.dtype == torch.bfloat16
    TOLERANCES[torch.bfloat16].check("y", got, ref)


BAD_ARGS = {
    "x must be 2-D": dict(x=torch.zeros(2, 3, 8)),
    "weight dim 0 must be 8": dict(weight=torch.zeros(9)),
    "eps must be a finite number > 0": dict(eps=0.0),
    "residual must have dtype": dict(residual=torch.zeros(2, 8, dtype=torch.float16)),
    "residual shape": dict(residual=torch.zeros(3, 8)),
    "x must have a contiguous last dimension": dict(x=torch.zeros(8, 2).T),
}


@pytest.mark.parametrize("twin", TWINS, ids=["ref", "triton"])
@pytest.mark.parametrize("message", BAD_ARGS, ids=list(BAD_ARGS))
def test_bad_arguments_raise_a_clear_error(twin, message):
    args = dict(x=torch.zeros(2, 8), weight=torch.ones(8), eps=1e-5, residual=None) | BAD_ARGS[message]
    with pytest.raises(ValueError, match=f"^rms_norm: {message}"):
        twin(**args)

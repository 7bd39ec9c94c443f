"""rope_interleaved: the reference equals Hugging Face's GLM-5 interleaved RoPE up to HF's
de-interleaved output order, the Triton twin matches it on strided views, and bad arguments
raise clear errors."""

from __future__ import annotations

import pytest
import torch

from kernels import chunks, rope
from kernels.testing import TOLERANCES

TWINS = [rope.rope_interleaved_ref, rope.rope_interleaved_triton]


def _angles(num_tokens: int, rot: int, theta: float = 1e6) -> tuple[torch.Tensor, torch.Tensor]:
    inv_freq = theta ** (-torch.arange(0, rot, 2, dtype=torch.float32) / rot)
    phase = torch.arange(num_tokens, dtype=torch.float32)[:, None] * 37.0 * inv_freq[None, :]
    return phase.cos(), phase.sin()


def test_reference_equals_hugging_face_after_deinterleaving(gen):
    from transformers.models.glm_moe_dsa.modeling_glm_moe_dsa import apply_rotary_pos_emb_interleave

    x = torch.randn(5, 4, 64, generator=gen)
    cos, sin = _angles(5, 64)
    got = rope.rope_interleaved_ref(x, cos, sin)
    hf_cos, hf_sin = torch.cat([cos, cos], -1), torch.cat([sin, sin], -1)  # HF's cat(freqs, freqs) tables
    hf, _ = apply_rotary_pos_emb_interleave(x, x, hf_cos, hf_sin, unsqueeze_dim=1)
    assert torch.equal(torch.cat([got[..., 0::2], got[..., 1::2]], -1), hf)


def test_reference_chunking_does_not_change_results(gen, monkeypatch):
    x = torch.randn(6, 3, 16, generator=gen)
    cos, sin = _angles(6, 16)
    whole = rope.rope_interleaved_ref(x, cos, sin)
    monkeypatch.setattr(chunks, "MEMORY_BUDGET", 1)
    assert torch.equal(rope.rope_interleaved_ref(x, cos, sin), whole)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
def test_triton_matches_reference_on_a_strided_view(dtype, device, gen):
    q = torch.randn(7, 20, 256, generator=gen).to(dtype).to(device)
    x = q[..., 192:]  # the rope tail of GLM-5's query heads: rows strided, 20 heads = 2 head tiles
    cos, sin = (t.to(device) for t in _angles(7, 64))
    got = rope.rope_interleaved_triton(x, cos, sin)
    TOLERANCES[dtype].check("rope", got, rope.rope_interleaved_ref(x, cos, sin))
    assert got.is_contiguous() and got.dtype == dtype


def test_triton_handles_a_rotary_dim_that_is_not_a_power_of_two(device, gen):
    x = torch.randn(3, 2, 12, generator=gen).to(device)
    cos, sin = (t.to(device) for t in _angles(3, 12))
    got, want = rope.rope_interleaved_triton(x, cos, sin), rope.rope_interleaved_ref(x, cos, sin)
    TOLERANCES[torch.float32].check("rope", got, want)


BAD_ARGS = {
    "x must be 3-D": dict(x=torch.zeros(4, 8)),
    "the rotary dim R must be even": dict(x=torch.zeros(4, 2, 7)),
    "cos must have dtype": dict(cos=torch.zeros(4, 4, dtype=torch.float16)),
    "sin dim 0 must be 4": dict(sin=torch.zeros(5, 4)),
    "cos dim 1 must be 4": dict(cos=torch.zeros(4, 3)),
}


@pytest.mark.parametrize("twin", TWINS, ids=["ref", "triton"])
@pytest.mark.parametrize("message", BAD_ARGS, ids=list(BAD_ARGS))
def test_bad_arguments_raise_a_clear_error(twin, message):
    args = dict(x=torch.zeros(4, 2, 8), cos=torch.ones(4, 4), sin=torch.zeros(4, 4)) | BAD_ARGS[message]
    with pytest.raises(ValueError, match=f"^rope_interleaved: {message}"):
        twin(**args)

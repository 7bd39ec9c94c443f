"""fp8_block_dequant: every e4m3fn code decodes like torch's float8 cast, the reference equals a
block-by-block loop on shapes that are not multiples of the block, the Triton twin matches it,
and bad arguments raise clear errors."""

from __future__ import annotations

import pytest
import torch

from kernels import chunks, fp8
from kernels.testing import TOLERANCES

TWINS = [fp8.fp8_block_dequant_ref, fp8.fp8_block_dequant_triton]


def _quantized(gen, rows, cols, block):
    w = (torch.randn(rows, cols, generator=gen) * 100).to(torch.float8_e4m3fn)
    scale_inv = torch.rand(-(-rows // block), -(-cols // block), generator=gen) + 0.01
    return w, scale_inv


def _block_loop(w, scale_inv, block):
    out = torch.empty(w.shape)
    for i in range(scale_inv.shape[0]):
        for j in range(scale_inv.shape[1]):
            rows, cols = slice(i * block, (i + 1) * block), slice(j * block, (j + 1) * block)
            out[rows, cols] = w[rows, cols].float() * scale_inv[i, j]
    return out


@pytest.mark.parametrize("twin", TWINS, ids=["ref", "triton"])
def test_every_e4m3fn_code_decodes_like_torch(twin, device):
    codes = torch.arange(256, dtype=torch.uint8).view(torch.float8_e4m3fn).reshape(2, 128)
    got = twin(codes.to(device), torch.ones(1, 1, device=device), 128, torch.float32).cpu()
    want = codes.float()
    assert torch.equal(torch.isnan(got), torch.isnan(want))  # 0x7F and 0xFF
    assert torch.equal(got.nan_to_num(0.0), want.nan_to_num(0.0))
    assert torch.equal(torch.signbit(got), torch.signbit(want))  # -0.0 (and -nan) keep their sign


def test_reference_equals_block_loop_on_cropped_edges(gen):
    w, scale_inv = _quantized(gen, 200, 300, 128)
    got = fp8.fp8_block_dequant_ref(w, scale_inv, 128, torch.float32)
    assert torch.equal(got, _block_loop(w, scale_inv, 128))


def test_reference_chunking_does_not_change_results(gen, monkeypatch):
    w, scale_inv = _quantized(gen, 70, 50, 16)
    whole = fp8.fp8_block_dequant_ref(w, scale_inv, 16)
    monkeypatch.setattr(chunks, "MEMORY_BUDGET", 1)  # one band of 16 rows at a time
    assert torch.equal(fp8.fp8_block_dequant_ref(w, scale_inv, 16), whole)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("shape, block", [((200, 300), 128), ((45, 70), 16)], ids=["block128", "block16"])
def test_triton_matches_reference(shape, block, dtype, device, gen):
    w, scale_inv = (t.to(device) for t in _quantized(gen, *shape, block))
    got = fp8.fp8_block_dequant_triton(w, scale_inv, block, dtype)
    assert got.dtype == dtype and got.shape == shape
    TOLERANCES[dtype].check("dequant", got, fp8.fp8_block_dequant_ref(w, scale_inv, block, dtype))


BAD_ARGS = {
    "w must have dtype": dict(w=torch.zeros(4, 6)),
    "scale_inv must have shape \\(1, 1\\)": dict(scale_inv=torch.ones(2, 1)),
    "scale_inv must have dtype": dict(scale_inv=torch.ones(1, 1, dtype=torch.bfloat16)),
    "block must be an int >= 1": dict(block=0),
    "dtype must be float32": dict(dtype=torch.int8),
}


@pytest.mark.parametrize("twin", TWINS, ids=["ref", "triton"])
@pytest.mark.parametrize("message", BAD_ARGS, ids=list(BAD_ARGS))
def test_bad_arguments_raise_a_clear_error(twin, message):
    args = dict(w=torch.zeros(4, 6, dtype=torch.float8_e4m3fn), scale_inv=torch.ones(1, 1), block=128)
    args |= BAD_ARGS[message]
    with pytest.raises(ValueError, match=f"^fp8_block_dequant: {message}"):
        twin(**args)

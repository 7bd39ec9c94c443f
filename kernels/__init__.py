"""Triton kernels for GLM-5 inference, each beside a torch reference with the same signature.

Role: the ops the runtime needs (sparse MLA attention, the DSA indexer, RMSNorm, interleaved
RoPE, FP8 block dequantisation), each dispatched once to Triton (CUDA) or to its torch reference
(CPU). See `kernels.dispatch` for the choice and `kernels.testing` for the comparison helpers.

Invariant: each op lives in one module holding `<op>_ref` and `<op>_triton` with one signature;
its `@triton.jit` code is in `kernels.jit.<op>`, imported only when a Triton twin runs, so the
torch reference path never imports triton.
"""

from kernels.dispatch import (
    backend,
    fp8_block_dequant,
    indexer_scores,
    indexer_topk,
    rms_norm,
    rope_interleaved,
    runs_triton,
    sparse_mla_attention,
    use_backend,
)

__all__ = [
    "backend",
    "fp8_block_dequant",
    "indexer_scores",
    "indexer_topk",
    "rms_norm",
    "rope_interleaved",
    "runs_triton",
    "sparse_mla_attention",
    "use_backend",
]

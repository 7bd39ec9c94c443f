"""Helpers for the engine-level KV cache tests: prompts and synchronous generation."""

from __future__ import annotations

import torch

from model_runtime.api import GenerationRequest, GenerationResult, SamplingParams
from model_runtime.engine import Engine


def prompt(n: int, seed: int = 0) -> list[int]:
    return torch.randint(20, 400, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


def generate(engine: Engine, ids: list[int], max_tokens: int = 8, name: str = "r") -> GenerationResult:
    """Run one greedy request to the end on an engine without a thread."""
    out: list[GenerationResult] = []
    engine.add(GenerationRequest(name, tuple(ids), SamplingParams(max_tokens=max_tokens)), None, out.append)
    engine.run_until_idle()
    assert out and out[0].error is None, out
    return out[0]


def block_rows(engine: Engine, block_hash: bytes) -> tuple[torch.Tensor, torch.Tensor]:
    """The cached rows (latents, indexer keys) of the block registered under `block_hash`."""
    return engine.cache.read_block(engine.blocks.by_hash[block_hash])

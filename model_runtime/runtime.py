"""`load_model`: the public entry point, and `LoadedModel`, a model ready to run.

Role: glue a checkpoint (weights, config, tokenizer) into an object with `logits` (full forward,
no cache) and `generate` (through the same engine the language server uses).

Invariants:
- `logits(ids)` takes a 1-D LongTensor of T ids and returns a [T, vocab] tensor.
- `generate` returns only the new token ids, stop token included when one ended the output.
- `fingerprint` identifies the exact weights + config + dtype + runtime version (cache keys).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from model_runtime.api import GenerationRequest, GenerationResult, SamplingParams, StreamEvent
from model_runtime.config import EngineConfig, ModelConfig
from model_runtime.fingerprint import weights_digest
from model_runtime.loader import load_weights
from model_runtime.model import Transformer
from model_runtime.tokenizer import GlmTokenizer, TokenizerError

if TYPE_CHECKING:
    from model_runtime.compiled import CompiledDecode

log = logging.getLogger(__name__)

RUNTIME_VERSION = "0.1.0"


@dataclass
class LoadedModel:
    model: Transformer
    config: ModelConfig
    tokenizer: GlmTokenizer | None
    path: Path
    device: torch.device
    dtype: torch.dtype
    _compiled: CompiledDecode | None = field(default=None, init=False, repr=False)
    _compile_lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)

    def compiled_decode(self, block_size: int, cache_dir: str | None = None) -> CompiledDecode:
        """This model's compiled decode steps (`model_runtime.compiled`), compiled in the
        background from the first call on, for that call's cache `block_size`; later calls and
        engines share them. Fuses the model's projections for inference first, as an engine does."""
        with self._compile_lock:
            if self._compiled is None:
                from model_runtime.compiled import CompiledDecode

                self.model.ensure_fused()
                self._compiled = CompiledDecode(self.model, self.dtype, self.device, block_size, cache_dir)
                self._compiled.start()
            return self._compiled

    @torch.inference_mode()
    def logits(self, input_ids: torch.Tensor | Sequence[int]) -> torch.Tensor:
        """Full forward pass without cache: [T] ids -> [T, vocab] logits."""
        ids = torch.as_tensor(input_ids, dtype=torch.long, device=self.device)
        if ids.dim() != 1 or ids.numel() == 0:
            raise ValueError(f"input_ids: expected a non-empty 1-D tensor, got shape {tuple(ids.shape)}")
        _check_ids(ids, self.config.vocab_size)
        hidden, _ = self.model.forward_dense(ids[None])
        return self.model.lm_head(hidden[0])

    def generate(
        self,
        input_ids: torch.Tensor | Sequence[int],
        max_new_tokens: int = 32,
        temperature: float = 0.0,
        top_p: float = 1.0,
        top_k: int = 0,
        seed: int | None = None,
        stop_token_ids: Sequence[int] = (),
        stop_strings: Sequence[str] = (),
        callback: Callable[[StreamEvent], None] | None = None,
        engine_config: EngineConfig | None = None,
    ) -> list[int]:
        """New token ids for one prompt; `callback` receives a StreamEvent after every step."""
        sampling = SamplingParams(max_new_tokens, temperature, top_p, top_k, seed, tuple(stop_token_ids), tuple(stop_strings))
        return list(self.generate_batch([input_ids], sampling, callback, engine_config)[0].token_ids)

    def generate_batch(
        self,
        prompts: Sequence[torch.Tensor | Sequence[int]],
        sampling: SamplingParams,
        callback: Callable[[StreamEvent], None] | None = None,
        engine_config: EngineConfig | None = None,
    ) -> list[GenerationResult]:
        """Decode several prompts together (one engine, batched steps); results in prompt order."""
        from model_runtime.engine import Engine

        engine = Engine(self, engine_config or EngineConfig(max_cache_tokens=_cache_tokens(prompts, sampling)))
        results: dict[str, GenerationResult] = {}
        for i, prompt in enumerate(prompts):
            ids = torch.as_tensor(prompt, dtype=torch.long).flatten()
            _check_ids(ids, self.config.vocab_size)
            request = GenerationRequest(str(i), tuple(ids.tolist()), sampling)
            engine.add(request, callback, lambda r: results.__setitem__(r.request_id, r))
        engine.run_until_idle()
        ordered = [results[str(i)] for i in range(len(prompts))]
        for r in ordered:
            if r.error:
                raise RuntimeError(f"generation failed: {r.error}")
        return ordered

    def engine(self, config: EngineConfig | None = None):
        """A threaded engine over this model (what the language server uses)."""
        from model_runtime.engine import Engine

        return Engine(self, config).start()

    @property
    def fingerprint(self) -> str:
        """Hash of the weights' identity (`fingerprint.weights_digest`: names, sizes, mtimes and
        safetensors headers, never the tensor data), config, dtype and runtime version."""
        h = hashlib.blake2b(digest_size=16)
        h.update(json.dumps(self.config.to_dict(), sort_keys=True, default=str).encode())
        h.update(f"{self.dtype}|{RUNTIME_VERSION}".encode())
        h.update(weights_digest(self.path))
        return h.hexdigest()


def load_model(
    path: str | os.PathLike | None = None, device: str | torch.device = "cpu", dtype: torch.dtype | str = torch.float32,
) -> LoadedModel:
    """Load a GLM-5 checkpoint directory (HF layout); None loads the embedded default model.
    `dtype` may be named ("bfloat16"), so callers that never import torch can choose it."""
    if isinstance(dtype, str):
        if dtype not in ("float32", "bfloat16", "float16"):
            raise ValueError(f"dtype: expected float32, bfloat16 or float16, got {dtype!r}")
        dtype = getattr(torch, dtype)
    if path is None:
        from model_runtime.embedded import default_model_path

        path = default_model_path()
    path = Path(path)
    if not path.is_dir():
        raise FileNotFoundError(f"{path}: not a checkpoint directory")
    device = torch.device(device)
    model, cfg = load_weights(path, device, dtype)
    try:
        tokenizer = GlmTokenizer.from_dir(path)
    except TokenizerError as exc:
        log.warning("%s; text features (stop strings, decoding) are unavailable", exc)
        tokenizer = None
    return LoadedModel(model, cfg, tokenizer, path, device, dtype)


def set_threads(threads: int = 0) -> int:
    """Set torch's intra-op CPU threads for this process (threads started later, such as the
    engine's, take it up) and return the number. 0 = auto: one per available core but one, at
    least 1. On a busy machine every parallel op waits for its slowest thread, so a thread per
    core costs far more than it gains (measured on 2 cores at load 4-7: a decode step, a prefill
    and a scoring forward each 3-20x slower with 2 threads than with 1); the spare core serves the
    editor and the server's event loop."""
    if threads < 0:
        raise ValueError(f"threads: expected 0 (auto) or a positive count, got {threads}")
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    count = threads or max(1, cores - 1)
    torch.set_num_threads(count)
    return count


def _check_ids(ids: torch.Tensor, vocab: int) -> None:
    if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= vocab):
        raise ValueError(f"input_ids: ids must lie in [0, {vocab}), got [{int(ids.min())}, {int(ids.max())}]")


def _cache_tokens(prompts, sampling: SamplingParams, block: int = 64) -> int:
    blocks = sum(-(-(len(torch.as_tensor(p).flatten()) + sampling.max_tokens + 2) // block) for p in prompts)
    return max(4096, 1 << (blocks * block - 1).bit_length())

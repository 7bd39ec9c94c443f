"""Compiled decode steps: `torch.compile` of the paged forward for one-token-per-sequence steps.

Role: on the CPU an eager decode step is mostly per-operator overhead (about 5,000 aten calls
per step of the mid-size model, two thirds of its time; the weight reads are the rest).
Inductor fuses the small operators of the lean decode path (norms, RoPE, the indexer's top-k,
the sparse attention, the routing) into a few C++ loops. `CompiledDecode` compiles
`Transformer.forward_paged` for such steps in a background thread and then serves them; every
other step runs eager. One per loaded model (`LoadedModel.compiled_decode`), shared by all
its engines.

Invariants:
- Compiling never runs on a request's path, nor beside one as far as Python goes: the
  background thread's Python pauses while an engine serves a user's request (`give_way`). It
  compiles against a private scratch cache (steps of one and of two sequences over a context
  longer than `index_topk`, which are the two graphs dynamic shapes need), and the runner uses
  the result only once both exist. Calls run under the stance "fail_on_recompile": a step the
  graphs do not match raises instead of compiling, and that step runs eager (the engine counts
  it in `compiled_fallbacks`).
- Covered steps: every sequence feeds one token (`PagedBatch.one_token_each`) on the lean
  path, the context is sparse (longer than `index_topk`), no latents are spilled to the host, nothing records
  attention or observes the routers (`Gate.observe`, the warm-up's expert count: observers
  are not module hooks, so a trace never includes one). Prefill, MTP drafts, short dense
  contexts and Triton (CUDA) steps run eager, and so do the steps of an engine whose cache
  blocks differ in size from the first one's (the graphs are specialised to it; such steps
  count as fallbacks), and, where `index_topk` is below the block size, sparse steps whose
  sequences all fit in one block (dynamo specialises size-1 dimensions).
- The model's branches for traced graphs test `torch.compiler.is_dynamo_compiling()` (true only
  inside dynamo's trace), never `is_compiling()`: torch holds that one true in every thread for
  the whole compile session, so eager steps running beside the background compile took the
  traced graphs' branches (a step of two tokens or more per sequence then failed).
- Same maths as the eager step, rounded differently (fused and vectorised loops, the experts
  summed in routing order): logits agree to ~1e-5, not bit for bit. Tests compare the two.
- The routed experts must be stacked (`Experts.stack`): each expert's fused gate/up weight
  becomes a view of one [E, 2I, D] tensor and the down weights are copied into [E, D, I].
  Models whose experts were too large to fuse are refused (state "unavailable").
- The graphs are built with inductor's C++ wrapper, which calls the kernels without a Python
  function per step (mid model, side by side in one process: a compiled forward of 11.0-12.1 ms
  against 12.7-14.2 ms with the Python wrapper; an empty-cache compile of 314 s against 156 s);
  where that wrapper does not build (it needs Python's headers), they are built again with the
  Python one (`CompileStatus.wrapper`).
- A one-sequence step's matrix-vector products (the projections up to 2,048 wide, and the
  one-query products of the attention and the indexer) are inductor's own loops, not BLAS
  calls (`_ROW_PRODUCTS_AS_LOOPS`; 86 products in the mid model's one-sequence graph, where
  only the dense layer's 3,072-wide gate/up stays a BLAS call). On a 2-vCPU AMD EPYC (AVX2),
  33 products of the mid model's shapes read their weights at 14-16 GB/s against MKL's
  12.6-12.9 GB/s with one thread, and 24.4 against 11.4 GB/s with two; a whole 600 + 64-token
  request with compiled decoding took 1.18-1.32 s against 1.52-1.81 s without it (one
  thread, two runs each).
- The Python floats a graph reads (norm eps, softmax scales, the routing scale) are constants
  of the model and are traced as constants (dynamo's `specialize_float`). Left symbolic, each
  made dynamo restart a graph's analysis after lowering it, so every start traced and lowered
  both graphs twice (embedded model, 1 thread, one after the other: a warm-cache compile 32.6 s
  against 11.6-11.8 s, an empty-cache one 103.0 s against 81.5 s).
- The graphs check guards on their inputs (the token ids, the step's `PagedBatch`, the cache)
  and on the globals they read, not on the model (`skip_guard_on_all_nn_modules_unsafe`): its
  weights and attributes are frozen once its projections are fused and its experts stacked,
  before the compile (`ModelRunner`'s invariant), and nothing that changes later (the router
  observers) is read inside a graph. Each of the mid model's two graphs has 2,291-2,573
  guards (dynamo's count varied between compiles), three quarters or more of them on the model
  (a type, constant or tensor match per module attribute and parameter): checking all took
  0.55-0.60 ms of each ~9 ms step, checking the rest 0.29-0.31 ms (dynamo's own measure, after
  a cache flush): ~17 ms of a 600 + 64-token request's 63 compiled steps, which their wall
  time does not resolve on this host (376-404 against 398-415 ms, four requests each, one
  process after the other).
- Inductor's compiled code is cached on disk (`cache_dir`, unless TORCHINDUCTOR_CACHE_DIR is
  set): a later start skips the C++ builds but still traces (mid model, measured by
  `bench_compile.py`).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from model_runtime.cache import KVCache
from model_runtime.give_way import GiveWay
from model_runtime.model import MoE, Transformer
from model_runtime.paged import PagedBatch

log = logging.getLogger(__name__)


@dataclass
class CompileStatus:
    """What `glm5.stats` and the benchmarks report about compiled decoding."""

    state: str  # "compiling" | "ready" | "failed" | "unavailable"
    seconds: float = 0.0  # wall time of the background compile
    error: str = ""
    wrapper: str = ""  # once ready: "cpp" (inductor's C++ wrapper) or "python" (its fallback)


# Inductor's pass that rewrites a one-row matrix product as a multiply and a sum, which it
# compiles into its own vectorised loop instead of calling the BLAS (mid model: see the
# module docstring).
_ROW_PRODUCTS_AS_LOOPS = {"post_grad_fusion_options": {"decompose_mm_pass": {}}}


def _described(exc: Exception) -> str:
    return f"{type(exc).__name__}: {exc}"[:500]


class CompiledDecode:
    def __init__(self, model: Transformer, dtype: torch.dtype, device: torch.device | str, block_size: int,
                 cache_dir: str | Path | None = None) -> None:
        self.model, self._dtype, self._device, self.block_size = model, dtype, torch.device(device), block_size
        self._fn: Callable[..., torch.Tensor] | None = None
        self._missed = False  # a step has run eager for want of a matching graph (logged once)
        self.status = CompileStatus("compiling")
        self._thread: threading.Thread | None = None
        self.give_way = GiveWay()  # engines add themselves: the compile's Python pauses while they serve a user
        reason = self._unavailable()
        if reason:
            self.status = CompileStatus("unavailable", error=reason)
        elif cache_dir is not None and not os.environ.get("TORCHINDUCTOR_CACHE_DIR"):
            os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(Path(cache_dir).expanduser())

    def _unavailable(self) -> str:
        if self._device.type != "cpu":
            return f"compiled decoding is for the CPU; {self._device.type} runs the Triton kernels"
        for block in self.model.layers:
            if isinstance(block.mlp, MoE) and any(e.gate_up is None for e in block.mlp.experts):
                return "the routed experts are too large to fuse (FUSE_EXPERTS_BYTES), so they cannot be stacked"
        return ""

    def start(self) -> None:
        """Compile in a background thread (once)."""
        if self.status.state == "compiling" and self._thread is None:
            self._thread = threading.Thread(target=self._compile, name="glm5-compile", daemon=True)
            self._thread.start()

    def wait(self, timeout: float | None = None) -> CompileStatus:
        if self._thread is not None:
            self._thread.join(timeout)
        return self.status

    def _compile(self) -> None:
        start = time.perf_counter()
        try:
            with self.give_way.installed():
                for block in self.model.layers:
                    if isinstance(block.mlp, MoE):
                        block.mlp.experts.stack()
                fn, wrapper = self._compiled_graphs()
        except Exception as exc:  # noqa: BLE001 - any compiler failure leaves decoding eager
            log.warning("compiled decoding failed; decode steps stay eager: %s", exc)
            self.status = CompileStatus("failed", time.perf_counter() - start, error=_described(exc))
            return
        self._fn = fn
        self.status = CompileStatus("ready", time.perf_counter() - start, wrapper=wrapper)
        log.info("compiled decoding ready in %.1f s (%s wrapper; paused %.1f s for users' requests)",
                 self.status.seconds, wrapper, self.give_way.paused_s)

    def _compiled_graphs(self) -> tuple[Callable[..., torch.Tensor], str]:
        """Both warm-up graphs, with inductor's C++ wrapper where it builds, else its Python one."""
        try:
            return self._warmed({"cpp_wrapper": True, **_ROW_PRODUCTS_AS_LOOPS}), "cpp"
        except Exception as exc:  # noqa: BLE001 - e.g. no Python headers to build the wrapper with
            log.warning("compiling with the C++ wrapper failed (%s); compiling with the Python one", _described(exc))
            return self._warmed(dict(_ROW_PRODUCTS_AS_LOOPS)), "python"

    def _warmed(self, options: dict[str, object]) -> Callable[..., torch.Tensor]:
        options = {**options, "guard_filter_fn": torch.compiler.skip_guard_on_all_nn_modules_unsafe}  # the model is frozen
        fn = torch.compile(self.model.forward_paged, dynamic=True, fullgraph=True, options=options)
        with torch._dynamo.config.patch(specialize_float=True):  # floats as constants: see the module docstring
            for seqs in (1, 2):
                self._warm(fn, seqs)
        return fn

    def _warm(self, fn: Callable[..., torch.Tensor], seqs: int) -> None:
        """Run (and so compile) one decode step of `seqs` sequences on a scratch cache. The graphs'
        guards check inference mode per tensor: the cache is made outside it, like the engine's,
        and the step's tensors inside it."""
        cfg, bs = self.model.cfg, self.block_size
        context = max(cfg.index_topk, bs) + 2  # sparse, over two blocks or more: no size-1 dimension to specialise
        per_seq = -(-context // bs)
        scratch = KVCache(cfg, seqs * per_seq, bs, self._dtype, self._device)
        tables = [list(range(s * per_seq, (s + 1) * per_seq)) for s in range(seqs)]
        rope = (cfg.qk_rope_head_dim, cfg.rope_theta)
        with torch.inference_mode():  # the step's own tensors are made in it, as in `ModelRunner.run`
            batch = PagedBatch.build([(context - 1, context)] * seqs, tables, bs, cfg.index_topk, rope, device=self._device)
            if not self.covers(batch):
                raise RuntimeError("the warm-up step is not one compiled decoding covers")
            fn(torch.zeros(seqs, dtype=torch.long, device=self._device), batch, scratch)

    @property
    def ready(self) -> bool:
        return self._fn is not None

    def covers(self, batch: PagedBatch) -> bool:
        """A step the compiled graphs are for (whether or not they are ready)."""
        return batch.one_token_each and batch.lean_decode and not batch.dense and batch.latents is None

    def forward(self, ids: torch.Tensor, batch: PagedBatch, cache: KVCache) -> torch.Tensor | None:
        """Final-normed hidden [N, D] of a covered step once ready, or None when no graph
        matches (the caller runs the step eager; nothing was written)."""
        if self._fn is None:
            raise RuntimeError("compiled decoding is not ready")
        try:
            with torch.compiler.set_stance("fail_on_recompile"):
                return self._fn(ids, batch, cache)
        except Exception as exc:  # noqa: BLE001 - a guard miss, or a compiled graph that failed
            if not self._missed:
                log.info("a decode step ran eager: %s", str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
            self._missed = True
            return None

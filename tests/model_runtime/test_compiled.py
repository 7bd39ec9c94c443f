"""Compiled decoding (`model_runtime.compiled`): the tokens and logits of eager decoding, every
covered step served compiled, the rest eager, and a compiler that fails or a step no graph
matches leaves decoding eager instead of compiling on a request's path.

The model keeps the paths a compiled step must trace: a dense first layer, grouped MoE routing
(2 groups), and a layer that reuses an earlier layer's top-k (IndexCache schedule)."""

from __future__ import annotations

import pytest
import torch
from torch._dynamo.utils import counters

from model_runtime import load_model
from model_runtime.api import EngineStats, GenerationRequest, SamplingParams
from model_runtime.compiled import CompiledDecode
from model_runtime.config import EngineConfig, ModelConfig
from model_runtime.engine import Engine
from model_runtime.loader import save_checkpoint
from model_runtime.model import MoE
from model_runtime.testing import random_model

CFG = ModelConfig.tiny(
    vocab_size=256, num_hidden_layers=4, index_topk_freq=2, index_skip_topk_offset=2, num_nextn_predict_layers=0,
)
BLOCK = 64  # EngineConfig's default: what `generate` uses
GREEDY = SamplingParams(max_tokens=10, stop_token_ids=())
ON = EngineConfig(block_size=BLOCK, max_cache_tokens=2048, compile_decode=True)
OFF = EngineConfig(block_size=BLOCK, max_cache_tokens=2048)


def prompts(n: int, length: int = 70) -> list[list[int]]:
    """Longer than a block: a context within one block has size-1 dimensions, which the graphs
    (compiled on two blocks or more) do not cover; with GLM-5's index_topk that never happens."""
    return [[(7 * i + 11 * t) % 250 + 3 for t in range(length)] for i in range(n)]


def decode(loaded, batch: list[list[int]], config: EngineConfig) -> tuple[list[list[int]], EngineStats]:
    engine = Engine(loaded, config)
    seqs = [engine.add(engine_request(i, p)) for i, p in enumerate(batch)]
    while engine.scheduler.has_work:
        engine.step()
    return [list(s.output_ids) for s in seqs], engine.stats()


def engine_request(i: int, prompt: list[int]) -> GenerationRequest:
    return GenerationRequest(f"r{i}", tuple(prompt), GREEDY)


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    path = tmp_path_factory.mktemp("compiled")
    save_checkpoint(random_model(CFG, 3), CFG, path, dtype=torch.float32)
    return path


@pytest.fixture(scope="module")
def compiled(checkpoint):
    """A loaded model whose decode steps finished compiling (cold: about a minute here)."""
    loaded = load_model(checkpoint)
    counters.clear()
    Engine(loaded, EngineConfig(block_size=BLOCK, max_cache_tokens=2048, compile_decode=True))
    status = loaded.compiled_decode(BLOCK).wait(1200)
    assert status.state == "ready" and status.wrapper == "cpp", status
    COMPILE_EVENTS.update(counters["aot_autograd"])
    return loaded


COMPILE_EVENTS: dict[str, int] = {}  # AOTAutograd's cache events during the `compiled` fixture's compile


def test_each_graph_is_traced_and_lowered_once(compiled):
    """Two graphs (one and two sequences), each looked up in AOTAutograd's cache once. A float
    the trace left symbolic (an eps, a scale) made dynamo restart each graph's analysis after
    lowering it: two lookups per graph, and a warm start 2.8 times as long (embedded model)."""
    lookups = sum(COMPILE_EVENTS.get(k, 0) for k in ("autograd_cache_hit", "autograd_cache_miss", "autograd_cache_bypass"))
    assert lookups == 2, COMPILE_EVENTS


@pytest.fixture(scope="module")
def eager(checkpoint):
    return load_model(checkpoint)


@pytest.mark.parametrize("sequences", [1, 2, 3])
def test_compiled_decoding_gives_eager_tokens_and_serves_every_covered_step(compiled, eager, sequences):
    batch = prompts(sequences)
    want, _ = decode(eager, batch, OFF)
    got, stats = decode(compiled, batch, ON)
    assert got == want
    assert stats.compiled_decode == "ready"
    assert stats.compiled_steps >= stats.decode_steps - 1 > 0  # every decode step after the prefill's
    assert stats.compiled_fallbacks == 0


def test_compiled_steps_match_eager_logits(compiled, monkeypatch):
    """Each compiled step's hidden states against the eager forward of the same step (it rewrites
    the same cache slots with the same values)."""
    pairs = []
    real = compiled.compiled_decode(BLOCK).forward

    def checked(ids, batch, cache):
        fast = real(ids, batch, cache)
        if fast is not None:
            pairs.append((fast, compiled.model.forward_paged(ids, batch, cache)))
        return fast

    monkeypatch.setattr(compiled.compiled_decode(BLOCK), "forward", checked)
    decode(compiled, prompts(2), ON)
    assert len(pairs) >= GREEDY.max_tokens - 2
    for fast, slow in pairs:
        torch.testing.assert_close(fast, slow, rtol=1e-4, atol=1e-5)
        assert torch.equal(compiled.model.lm_head(fast).argmax(-1), compiled.model.lm_head(slow).argmax(-1))


def test_short_dense_context_runs_eager(compiled, eager):
    short = [[5, 9, 13, 17]]  # every step sees at most index_topk keys: exactly dense, not covered
    want, _ = decode(eager, short, OFF)
    sampling = SamplingParams(max_tokens=3, stop_token_ids=())
    engine = Engine(compiled, ON)
    seq = engine.add(GenerationRequest("s", tuple(short[0]), sampling))
    while engine.scheduler.has_work:
        engine.step()
    stats = engine.stats()
    assert list(seq.output_ids) == want[0][:3]
    assert stats.compiled_steps == stats.compiled_fallbacks == 0


def test_an_engine_no_graph_fits_runs_eager_without_compiling(compiled, eager):
    """Blocks of another size: the steps are covered, but the graphs are specialised to 64-token
    blocks; under "fail_on_recompile" each such step runs eager rather than compile."""
    other = EngineConfig(block_size=16, max_cache_tokens=2048, compile_decode=True)
    want, _ = decode(eager, prompts(1), EngineConfig(block_size=16, max_cache_tokens=2048))
    got, stats = decode(compiled, prompts(1), other)
    assert got == want
    assert stats.compiled_steps == 0
    assert stats.compiled_fallbacks >= stats.decode_steps - 1 > 0


def test_a_failing_compiler_leaves_decoding_eager(checkpoint, eager, monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("no C++ compiler")

    monkeypatch.setattr(torch, "compile", broken)
    loaded = load_model(checkpoint)
    Engine(loaded, ON)
    status = loaded.compiled_decode(BLOCK).wait(60)
    assert status.state == "failed" and "no C++ compiler" in status.error
    want, _ = decode(eager, prompts(1), OFF)
    got, stats = decode(loaded, prompts(1), ON)
    assert got == want
    assert stats.compiled_decode == "failed" and stats.compiled_steps == 0


def test_a_cpp_wrapper_that_does_not_build_falls_back_to_the_python_one(checkpoint, eager, monkeypatch):
    """Inductor's C++ wrapper needs Python's headers; where it fails, the graphs are compiled
    again with the Python wrapper (here a stand-in that runs the eager step and counts calls)."""
    attempts: list[dict] = []

    def warmed(self, options):
        attempts.append(options)
        if options.get("cpp_wrapper"):
            raise RuntimeError("Python.h: No such file or directory")
        return lambda *args: calls.append(1) or self.model.forward_paged(*args)

    calls: list[int] = []
    monkeypatch.setattr(CompiledDecode, "_warmed", warmed)
    loaded = load_model(checkpoint)
    status = loaded.compiled_decode(BLOCK).wait(60)
    assert [a.get("cpp_wrapper", False) for a in attempts] == [True, False]
    assert status.state == "ready" and status.wrapper == "python" and not status.error
    want, _ = decode(eager, prompts(1), OFF)
    got, stats = decode(loaded, prompts(1), ON)
    assert got == want and stats.compiled_steps == len(calls) > 0


def test_experts_too_large_to_stack_are_refused(checkpoint, eager):
    loaded = load_model(checkpoint)
    loaded.model.fuse_for_inference(max_expert_bytes=0)  # the routed experts stay unfused
    got, stats = decode(loaded, prompts(1), ON)
    want, _ = decode(eager, prompts(1), OFF)
    assert got == want
    assert stats.compiled_decode == "unavailable" and stats.compiled_steps == 0
    assert "too large" in loaded.compiled_decode(BLOCK).status.error


def test_decoding_while_the_compile_runs_is_eager_and_unchanged(checkpoint, eager):
    """The server's case: requests keep coming while the background thread compiles (whose
    Python gives way to them), and the router warm-up observes the gates meanwhile. The compile must not trace the observer; a step
    taken while a gate is observed runs eager (and is observed); without observers, compiled."""
    want, _ = decode(eager, prompts(2), OFF)
    loaded = load_model(checkpoint)
    gate = next(block.mlp.gate for block in loaded.model.layers if isinstance(block.mlp, MoE))
    seen: list[int] = []
    remove = gate.observe(lambda _weights, indices: seen.append(indices.shape[0]))
    compiling = loaded.compiled_decode(BLOCK)
    during = 0
    while compiling.status.state == "compiling" and during < 3:
        got, _ = decode(loaded, prompts(2), ON)
        assert got == want
        during += 1
    assert during > 0 and compiling.give_way.pauses > 0  # the compile's Python paused for these requests
    assert compiling.wait(1200).state == "ready", compiling.status
    observed_before = len(seen)
    got, stats = decode(loaded, prompts(2), ON)
    assert got == want and stats.compiled_steps == 0 and len(seen) > observed_before
    remove()
    got, stats = decode(loaded, prompts(2), ON)
    assert got == want and stats.compiled_steps > 0 and stats.compiled_fallbacks == 0

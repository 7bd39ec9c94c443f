"""The runtime's paths pinned to each other: paged vs full forward, absorbed vs expanded attention,
speculative (MTP) vs plain greedy, prefix-cache reuse vs cold prefill, chunked vs whole prefill."""

from __future__ import annotations

import pytest
import torch

from model_runtime.api import GenerationRequest, SamplingParams
from model_runtime.config import EngineConfig, ModelConfig
from model_runtime.engine import Engine
from model_runtime.model_runner import Feed


def prompt(n: int, seed: int = 0) -> list[int]:
    return torch.randint(20, 400, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


def paged_logits(loaded, ids: list[int], attention: str, chunks: list[int]) -> torch.Tensor:
    """Feed `ids` through the paged path in chunks and return the logits of every position."""
    engine = Engine(loaded, EngineConfig(block_size=16, max_cache_tokens=1024, attention=attention))
    alloc = engine.blocks.allocate(ids, reuse=False)
    out, start = [], 0
    for n in chunks:
        feed = Feed(start, ids[start : start + n], alloc.block_table, 0)
        out.append(engine.runner.run([feed]).logits[0])
        start += n
    assert start == len(ids)
    return torch.cat(out)


@pytest.mark.parametrize("attention", ["absorbed", "expanded"])
@pytest.mark.parametrize("length", [7, 40])  # dense and sparse regimes (index_topk = 8)
def test_incremental_decode_equals_full_prefill(tiny, attention, length):
    ids = prompt(length)
    full = tiny.logits(torch.tensor(ids))
    prefill = 4 if length < 10 else 25
    paged = paged_logits(tiny, ids, attention, [prefill] + [1] * (length - prefill))
    assert (paged - full).abs().max().item() < 1e-4


@pytest.mark.parametrize("length", [7, 40, 300])  # 300: the expanded form attends 128 queries at a time
def test_absorbed_equals_expanded(tiny, length):
    ids = prompt(length, seed=1)
    chunks = [length // 2, length - length // 2]
    a = paged_logits(tiny, ids, "absorbed", chunks)
    e = paged_logits(tiny, ids, "expanded", chunks)
    assert (a - e).abs().max().item() < 1e-4


def test_mtp_speculative_output_equals_plain_greedy(tiny):
    prompts = [prompt(n, seed=n) for n in (5, 12, 30)]
    sampling = SamplingParams(max_tokens=40)
    plain = tiny.generate_batch(prompts, sampling, engine_config=EngineConfig(use_mtp=False))
    engine = Engine(tiny, EngineConfig(use_mtp=True))
    results = {}
    for i, p in enumerate(prompts):
        engine.add(GenerationRequest(str(i), tuple(p), sampling), None, lambda r: results.__setitem__(r.request_id, r))
    engine.run_until_idle()
    for i, ref in enumerate(plain):
        assert results[str(i)].token_ids == ref.token_ids
    stats = engine.stats()
    assert stats.spec_drafted > 0
    assert 0 <= stats.spec_accepted <= stats.spec_drafted


@pytest.mark.parametrize("oracle_right", [True, False])
def test_mtp_acceptance_bookkeeping(tiny, oracle_right):
    """Drafts that are always right halve the decode steps; drafts that are always wrong are all
    rolled back. Either way the output is the plain greedy output."""
    ids = prompt(10, seed=4)
    reference = tiny.generate(ids, max_new_tokens=30)
    engine = Engine(tiny, EngineConfig(use_mtp=True))
    vocab = tiny.config.vocab_size

    def oracle_mtp(feeds, hidden):
        drafts = []
        for feed in feeds:
            produced = feed.start + len(feed.tokens) + 1 - len(ids)  # index of the token to draft
            right = reference[produced] if 0 <= produced < len(reference) else 0
            token = right if oracle_right else (right + 1) % vocab
            drafts.append(torch.nn.functional.one_hot(torch.tensor(token), vocab).float())
        return drafts

    engine.runner.run_mtp = oracle_mtp
    done = []
    engine.add(GenerationRequest("a", tuple(ids), SamplingParams(max_tokens=30)), None, done.append)
    engine.run_until_idle()
    assert list(done[0].token_ids) == reference
    stats = engine.stats()
    if oracle_right:
        assert stats.spec_accepted == stats.spec_drafted > 0
        assert done[0].decode_steps <= 16
    else:
        assert stats.spec_accepted == 0 and stats.spec_drafted > 0
        assert done[0].decode_steps == 29


def test_prefix_cache_reuse_is_bit_identical(tiny):
    engine = Engine(tiny, EngineConfig(block_size=16, max_cache_tokens=2048))
    base = prompt(50, seed=2)
    first, second = [], []
    engine.add(GenerationRequest("a", tuple(base), SamplingParams(max_tokens=12)), None, first.append)
    engine.run_until_idle()
    engine.add(GenerationRequest("b", tuple(base + [77, 78]), SamplingParams(max_tokens=12)), None, second.append)
    engine.run_until_idle()
    assert second[0].cached_tokens == 50  # three full 16-token blocks + the matching rows of the fourth
    assert second[0].prefilled_tokens == 2
    cold = tiny.generate_batch([base + [77, 78]], SamplingParams(max_tokens=12))[0]
    assert second[0].token_ids == cold.token_ids


def test_fully_cached_prompt_recomputes_only_its_last_token(tiny):
    engine = Engine(tiny, EngineConfig(block_size=16, max_cache_tokens=2048))
    ids = prompt(32, seed=3)
    runs = []
    for name in ("a", "b"):
        engine.add(GenerationRequest(name, tuple(ids), SamplingParams(max_tokens=6)), None, runs.append)
        engine.run_until_idle()
    assert runs[1].cached_tokens == 31 and runs[1].prefilled_tokens == 1
    assert runs[0].token_ids == runs[1].token_ids


def test_chunked_prefill_matches_whole_prefill(tiny):
    ids = prompt(45, seed=5)
    whole = tiny.generate_batch([ids], SamplingParams(max_tokens=10))[0]
    chunked = tiny.generate_batch([ids], SamplingParams(max_tokens=10), engine_config=EngineConfig(max_prefill_tokens=7))[0]
    assert chunked.token_ids == whole.token_ids


def test_seeded_sampling_is_deterministic_and_seed_dependent(tiny):
    ids = prompt(10, seed=6)
    runs = [tiny.generate(ids, max_new_tokens=20, temperature=1.0, seed=s) for s in (1, 1, 2)]
    assert runs[0] == runs[1]
    assert runs[0] != runs[2]


def test_top_k_one_is_greedy(tiny):
    ids = prompt(10, seed=8)
    assert tiny.generate(ids, max_new_tokens=12, temperature=0.9, top_k=1, seed=3) == tiny.generate(ids, max_new_tokens=12)


def test_tiny_top_p_is_greedy(tiny):
    ids = prompt(10, seed=9)
    assert tiny.generate(ids, max_new_tokens=12, temperature=1.5, top_p=1e-6, seed=4) == tiny.generate(ids, max_new_tokens=12)


def test_stop_token_and_max_tokens(tiny):
    ids = prompt(10, seed=10)
    free = tiny.generate(ids, max_new_tokens=12)
    stop_at = free[5]
    out = tiny.generate(ids, max_new_tokens=12, stop_token_ids=[stop_at])
    assert out == free[: free.index(stop_at) + 1]
    assert len(tiny.generate(ids, max_new_tokens=3)) == 3


def test_stop_string_cuts_text(tiny):
    ids = prompt(10, seed=11)
    events = []
    tiny.generate(ids, max_new_tokens=16, callback=events.append)
    text = events[-1].text
    assert len(text) >= 4
    stop = text[2:4]
    events.clear()
    tiny.generate(ids, max_new_tokens=16, stop_strings=[stop], callback=events.append)
    assert events[-1].text == text[: text.index(stop)]
    assert all(stop not in e.text for e in events)
    assert all(events[-1].text.startswith(e.text) for e in events)  # streamed text never retracts


def test_tiny_config_keeps_every_path():
    cfg = ModelConfig.tiny()
    assert "dense" in cfg.mlp_layer_types and "sparse" in cfg.mlp_layer_types
    assert cfg.index_topk < 16 and cfg.num_nextn_predict_layers == 1 and cfg.n_group > 1

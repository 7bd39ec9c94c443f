"""`GenerationRequest.record_attention`: the DSA selections of each prompt token and the expert load.

Checks: a hand-computed dense case; the paged engine's counts against an independent reference
(the no-cache `forward_dense` path's selection masks, summed over the generating queries); one
request's counts are its own in a batch and with a prefix-cache hit; recording changes no output;
and on the trained embedded model, a prompt whose one snippet holds the definition the cursor
needs is counted exactly, token for token, and `context.heat` sums it onto that snippet's lines.
"""

from __future__ import annotations

import pytest
import torch

from context.document import Document
from context.crossfile import Snippet
from context.heat import PromptSpans, heat_map
from context.positions import Position, Range
from context.prompt import PromptBudget, build_prompt
from model_runtime import default_model_path, load_model
from model_runtime.api import GenerationRequest, GenerationResult, SamplingParams
from model_runtime.engine import Engine


def run(engine: Engine, *requests: GenerationRequest) -> list[GenerationResult]:
    results: dict[str, GenerationResult] = {}
    for request in requests:
        engine.add(request, None, lambda r: results.__setitem__(r.request_id, r))
    engine.run_until_idle()
    return [results[r.request_id] for r in requests]


def reference_selections(loaded, prompt: list[int], output: tuple[int, ...]) -> list[int]:
    """Per prompt token: over layers, how many generating queries (positions P-1 .. P+n-2) selected it,
    from the no-cache forward's [T, T] selection masks (all visible keys where a layer runs dense)."""
    full = torch.tensor([prompt + list(output)])[:, :-1]
    with torch.inference_mode():
        _, auxes = loaded.model.forward_dense(full)
    P, n, T = len(prompt), len(output), full.shape[1]
    counts = torch.zeros(P, dtype=torch.long)
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    for aux in auxes:
        selected = aux.selected[0] if aux.selected is not None else causal
        counts += selected[P - 1 : P - 1 + n, :P].sum(0)
    return counts.tolist()


@pytest.fixture(scope="module")
def tiny_engine(tiny):
    return Engine(tiny)


def test_dense_case_by_hand(tiny, tiny_engine):
    """Prompt of 5 tokens, n tokens generated, top-k 8: every context has at most 7 keys, so each
    layer is dense and every generating query sees all 5 prompt tokens: 3 layers * n each."""
    cfg = tiny.config
    assert cfg.index_topk == 8 and cfg.num_hidden_layers == 3 and cfg.first_k_dense_replace == 1
    (result,) = run(tiny_engine, GenerationRequest("hand", (5, 6, 7, 8, 9), SamplingParams(max_tokens=3), record_attention=True))
    n = len(result.token_ids)
    record = result.attention
    assert record.queries == n >= 1
    assert record.selections == (3 * n,) * 5
    assert record.layers == 3 and record.index_topk == 8
    # tokens through the model: 5 prompt + (n - 1) decoded; each picks 2 of 8 experts in the MoE layers
    assert record.expert_load[0] == ()
    assert [sum(load) for load in record.expert_load[1:]] == [2 * (5 + n - 1)] * 2
    assert all(len(load) == 8 for load in record.expert_load[1:])


def test_sparse_counts_match_the_dense_reference(tiny, tiny_engine):
    prompt = [(i * 37) % 200 + 10 for i in range(40)]
    (result,) = run(tiny_engine, GenerationRequest("sparse", tuple(prompt), SamplingParams(max_tokens=6), record_attention=True))
    record = result.attention
    assert record.selections == tuple(reference_selections(tiny, prompt, result.token_ids))
    # each (query, layer) picks exactly top-k = 8 keys, some of them generated tokens
    n = len(result.token_ids)
    assert sum(record.selections) <= 8 * 3 * n
    assert sum(record.selections) >= (8 - (n - 1)) * 3 * n


def test_counts_are_per_request_in_a_batch_and_with_a_cached_prefix(tiny):
    engine = Engine(tiny)
    prompt_a = tuple((i * 11) % 150 + 20 for i in range(33))
    prompt_b = tuple((i * 7) % 150 + 20 for i in range(21))
    alone_a, = run(Engine(tiny), GenerationRequest("a0", prompt_a, SamplingParams(max_tokens=5), record_attention=True))
    a, b, c = run(
        engine,
        GenerationRequest("a", prompt_a, SamplingParams(max_tokens=5), record_attention=True),
        GenerationRequest("b", prompt_b, SamplingParams(max_tokens=5), record_attention=True),
        GenerationRequest("c", prompt_a, SamplingParams(max_tokens=5)),
    )
    assert a.token_ids == alone_a.token_ids
    assert a.attention.selections == alone_a.attention.selections
    assert b.attention.selections == tuple(reference_selections(tiny, list(prompt_b), b.token_ids))
    assert c.attention is None
    again, = run(engine, GenerationRequest("a2", prompt_a, SamplingParams(max_tokens=5), record_attention=True))
    assert again.cached_tokens > 0
    assert again.attention.selections == alone_a.attention.selections


def test_recording_changes_no_output(tiny, tiny_engine):
    prompt = tuple(range(30, 75))
    plain, recorded = run(
        tiny_engine,
        GenerationRequest("plain", prompt, SamplingParams(max_tokens=8)),
        GenerationRequest("recorded", prompt, SamplingParams(max_tokens=8), record_attention=True),
    )
    assert plain.attention is None
    assert recorded.token_ids == plain.token_ids


FILLER = "def helper_{i}(items):\n    total = 0\n    for item in items:\n        total += item * {i}\n    return total\n"
DEFINITION = 'def rectangle_area(width, height):\n    """The area of a width x height rectangle."""\n    return width * height\n'
MAIN = "from geometry import rectangle_area\n\n\ndef total(rects):\n    result = 0\n    for w, h in rects:\n        result += rectangle_\n    return result\n"


def test_trained_model_definition_snippet(tmp_path):
    """The embedded (trained) model on a prompt of 8 snippets, one of which (geometry.py) holds
    the only definition the cursor needs: the engine's counts equal the reference token for token,
    and the heat map puts on each snippet exactly the counts of its tokens."""
    loaded = load_model(default_model_path())
    snippets = [Snippet(str(tmp_path / f"util{i}.py"), Range(Position(0, 0), Position(5, 0)), FILLER.format(i=i), "similar-window", 1.0, 0) for i in range(7)]
    definition = Snippet(str(tmp_path / "geometry.py"), Range(Position(0, 0), Position(3, 0)), DEFINITION, "imported-definition", 1.0, 0)
    snapshot = Document(f"file://{tmp_path}/main.py", "python", 1, MAIN).snapshot()
    cursor = Position(6, len("        result += rectangle_"))
    prompt = build_prompt(snapshot, cursor, [definition, *snippets], loaded.tokenizer, PromptBudget(max_tokens=900), [str(tmp_path)])
    assert definition in prompt.snippets_used and len(prompt.ids) > loaded.config.index_topk
    (result,) = run(Engine(loaded), GenerationRequest("def", prompt.ids, SamplingParams(max_tokens=6), record_attention=True))
    selections = result.attention.selections
    assert list(selections) == reference_selections(loaded, list(prompt.ids), result.token_ids)
    tok = loaded.tokenizer
    spans = PromptSpans(*(tok.encode_offsets(t) for t in (prompt.header, prompt.suffix, prompt.prefix)))
    heat = heat_map(prompt, spans, selections, cursor.line)
    assert heat.total == sum(selections)
    assert sum(s.selections for s in heat.snippets) + heat.current_file + heat.other == heat.total
    # the definition's body tokens, found independently: encode the header up to and through it
    body_start = prompt.header.index(DEFINITION)
    first = 2 + len(tok.encode(prompt.header[:body_start]))
    last = 2 + len(tok.encode(prompt.header[: body_start + len(DEFINITION)]))
    geometry = next(s for s in heat.snippets if s.snippet is definition)
    assert sum(line.selections for line in geometry.lines) == sum(selections[first:last])
    assert [line.line for line in geometry.lines] == [0, 1, 2]
    assert geometry.selections > 0

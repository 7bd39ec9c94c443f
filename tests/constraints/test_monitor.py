"""The monitor's masks over the embedded model's real vocabulary, checked against the vocabulary itself."""

from __future__ import annotations

import pytest

from model_runtime.api import ConstraintSpec, MemberScope
from model_runtime.constraint.monitor import compile_constraint
from model_runtime.constraint.vocab import Vocab

MEMBERS = ("centroid", "distance", "Point", "area_of")


def admitted(tokenizer, spec: ConstraintSpec, context: str) -> set[str]:
    vocab = Vocab.of(tokenizer)
    monitor = compile_constraint(spec, vocab, frozenset(tokenizer.special.eos_ids), context)
    mask = monitor.compiled.mask(monitor.state, True, len(vocab))
    return {vocab.strings[i] for i in mask.nonzero().flatten().tolist()}


def identifiers(tokenizer) -> set[str]:
    return {s for s in Vocab.of(tokenizer).strings if s.isidentifier()}


def test_after_qualifier_dot_the_mask_admits_exactly_the_member_prefixes(tokenizer):
    spec = ConstraintSpec(member_scopes=(MemberScope("geometry", MEMBERS),), defined_names=("geometry", "print"))
    legal = admitted(tokenizer, spec, "import geometry\n\nresult = geometry.")
    idents = identifiers(tokenizer)
    expected = {s for s in idents if any(m.startswith(s) for m in MEMBERS)}
    assert expected and legal & idents == expected
    # a token longer than a member must be that member followed by what may follow a name
    for text in legal - idents:
        head = text.rstrip("(.,) \n:[")
        assert head in MEMBERS, text


def test_member_scope_of_a_dotted_qualifier(tokenizer):
    spec = ConstraintSpec(member_scopes=(MemberScope("os.path", ("join", "exists")),), defined_names=("os",))
    legal = admitted(tokenizer, spec, "import os\nfull = os.path.")
    assert legal & identifiers(tokenizer) == {s for s in identifiers(tokenizer) if "join".startswith(s) or "exists".startswith(s)}


def test_undefined_names_are_masked_in_a_use_position(tokenizer):
    spec = ConstraintSpec(defined_names=("alpha", "beta_total"))
    legal = admitted(tokenizer, spec, "def f():\n    value = ")
    for name in identifiers(tokenizer) & legal:
        assert any(n.startswith(name) for n in ("alpha", "beta_total", "None", "True", "False", "not", "lambda", "await", "yield", "value", "f")) or name in ("r", "u", "b", "rb", "br", "fr", "rf")
    assert "self" not in legal and " self" not in legal and "x" not in legal


@pytest.mark.parametrize("context", ["def ", "for ", "import ", "with open(alpha) as ", "lambda ", "total = sum(alpha, "])
def test_new_bindings_and_keyword_arguments_are_not_masked(tokenizer, context):
    spec = ConstraintSpec(defined_names=("alpha", "open", "sum"))
    legal = admitted(tokenizer, spec, context)
    assert {"x", "result", "self"} & legal == {"x", "result", "self"} & identifiers(tokenizer)


def test_brackets_stay_balanced(tokenizer):
    spec = ConstraintSpec(defined_names=("alpha",))
    inside = admitted(tokenizer, spec, "value = (alpha")
    assert ")" in inside and "]" not in inside and "}" not in inside
    nothing_open = admitted(tokenizer, spec, "value = alpha")
    assert ")" not in nothing_open and "]" not in nothing_open
    # a bracket opened before the cursor on an earlier line may be closed
    outer = admitted(tokenizer, ConstraintSpec(defined_names=("alpha",), open_brackets="["), "    alpha")
    assert "]" in outer and ")" not in outer


def test_single_line_needs_balanced_brackets_to_end(tokenizer):
    vocab = Vocab.of(tokenizer)
    eos = frozenset(tokenizer.special.eos_ids)
    monitor = compile_constraint(ConstraintSpec(single_line=True, defined_names=("alpha",)), vocab, eos, "value = alpha")
    newline, eos_id = tokenizer.encode("\n")[0], next(iter(eos))
    opened = monitor.compiled.token(monitor.state, tokenizer.encode("(")[0], True)[0]
    assert monitor.compiled.token(opened, newline, True) == (None, "line")
    assert monitor.compiled.token(opened, eos_id, True) == (None, "line")
    closed = monitor.compiled.token(opened, tokenizer.encode(")")[0], True)[0]
    assert monitor.compiled.token(closed, newline, True)[0] is not None
    # a bracket open before the cursor does not keep the line from ending
    before = compile_constraint(ConstraintSpec(single_line=True, defined_names=("alpha",)), vocab, eos, "value = alpha(")
    assert before.compiled.token(before.state, newline, True)[0] is not None


def test_heal_prefix_admits_only_tokens_that_agree_with_it(tokenizer):
    legal = admitted(tokenizer, ConstraintSpec(heal_prefix=" cen", defined_names=("centroid",)), "x =")
    assert legal and all(t.startswith(" cen") or " cen".startswith(t) for t in legal)
    assert " cen" in legal or " c" in legal


def test_no_member_at_all_releases_and_the_heal_prefix_survives(tokenizer):
    import torch

    vocab = Vocab.of(tokenizer)
    spec = ConstraintSpec(member_scopes=(MemberScope("geometry", ()),), defined_names=("geometry",))
    monitor = compile_constraint(spec, vocab, frozenset(tokenizer.special.eos_ids), "x = geometry.")
    picks = monitor.choose(torch.randn(len(vocab)), 1, __import__("model_runtime.api").api.SamplingParams(), None)
    assert picks is not None and monitor.released and monitor.report().released


@pytest.mark.parametrize("context", ["import geometry\nresult = geometry.", "def f():\n    value = ", "total = sum(alpha, ", "x = (alpha"])
def test_a_greedy_pick_is_the_argmax_over_the_exact_mask(tokenizer, context):
    import torch

    from model_runtime.api import SamplingParams

    vocab = Vocab.of(tokenizer)
    spec = ConstraintSpec(member_scopes=(MemberScope("geometry", MEMBERS),), defined_names=("alpha", "geometry", "sum"))
    generator = torch.Generator().manual_seed(7)
    for _ in range(5):
        monitor = compile_constraint(spec, vocab, frozenset(tokenizer.special.eos_ids), context)
        logits = torch.randn(len(vocab), generator=generator) * 3
        mask = monitor.compiled.mask(monitor.state, True, len(vocab))
        (pick,) = monitor.choose(logits, 1, SamplingParams(), None)
        assert pick == int(logits.masked_fill(~mask, float("-inf")).argmax())

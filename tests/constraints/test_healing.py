"""Token healing: `heal` backs the prompt off to a token boundary before the typed word."""

from __future__ import annotations

import pytest

from model_runtime.healing import heal


def test_empty_typed_keeps_the_prompt(tokenizer):
    ids = tokenizer.encode("x = 1\nprint(x)")
    assert heal(tokenizer, ids, "") == (ids, "")


@pytest.mark.parametrize("text, typed", [
    ("def area(r):\n    return math.pi * r * r\n\nresult = are", "are"),
    ("import os\nos.path.jo", "jo"),
    ("values = [1, 2]\nfor v in valu", "valu"),
    ("s = 'héllo'\nt = s.upp", "upp"),
])
def test_heal_drops_the_tokens_covering_the_typed_word(tokenizer, text, typed):
    ids = tokenizer.encode(text)
    shorter, prefix = heal(tokenizer, ids, typed)
    assert len(shorter) < len(ids)
    assert prefix.endswith(typed)
    assert tokenizer.decode(shorter) + prefix == text
    assert shorter == ids[: len(shorter)]


def test_heal_keeps_trailing_special_tokens(tokenizer):
    middle = tokenizer.special.require("code_middle")
    ids = tokenizer.encode("total = cou") + [middle]
    shorter, prefix = heal(tokenizer, ids, "cou")
    assert shorter[-1] == middle
    assert tokenizer.decode(shorter[:-1]) + prefix == "total = cou"


def test_heal_rejects_a_prompt_that_does_not_end_with_the_typed_text(tokenizer):
    with pytest.raises(ValueError, match="does not end with"):
        heal(tokenizer, tokenizer.encode("alpha = beta"), "gam")

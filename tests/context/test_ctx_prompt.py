"""Prompt assembly: budget, trimming, header order and keystroke stability (context.prompt)."""

from __future__ import annotations

import pytest

from context.crossfile import Snippet
from context.document import Document
from context.fim import FimMode
from context.positions import Position, Range
from context.prompt import PromptBudget, build_prompt
from model_runtime.tokenizer import GlmTokenizer

ROOT = "/work/proj"
BODY = [f"def step_{i}(values):\n    return [v * {i} for v in values if v > {i}]\n" for i in range(120)]
LONG = "".join(BODY)


def doc(text: str, path: str = f"{ROOT}/pkg/main.py", version: int = 1) -> Document:
    return Document(f"file://{path}", "python", version, text)


def snippet(reason: str, path: str, line: int, text: str) -> Snippet:
    return Snippet(path, Range(Position(line, 0), Position(line + text.count("\n"), 0)), text, reason, 1.0, 10, "")


def test_budget_split_and_counts(glm_tokenizer: GlmTokenizer) -> None:
    snap = doc(LONG).snapshot()
    budget = PromptBudget(max_tokens=400, header_share=0.25, suffix_share=0.2)
    snippets = [snippet("imported-definition", f"{ROOT}/pkg/util.py", 0, "def helper(x):\n    return x + 1\n")]
    prompt = build_prompt(snap, Position(120, 4), snippets, glm_tokenizer, budget, roots=[ROOT])
    counts = prompt.token_counts
    assert len(prompt.ids) == counts["total"] <= 400
    assert counts["header"] + counts["suffix"] + counts["prefix"] + counts["special"] == counts["total"]
    assert counts["header"] <= 100 and counts["suffix"] <= 80 + 1
    assert prompt.mode is FimMode.SPM
    assert prompt.header.endswith("# file: pkg/main.py\n")
    assert prompt.header.startswith("# file: pkg/util.py\ndef helper(x):")


def test_prefix_and_suffix_are_whole_lines_nearest_the_cursor(glm_tokenizer: GlmTokenizer) -> None:
    snap = doc(LONG).snapshot()
    cursor = Position(121, 11)  # inside "    return [v * 60 ..."
    prompt = build_prompt(snap, cursor, [], glm_tokenizer, PromptBudget(max_tokens=300, align_lines=8))
    offset = snap.offset_at(cursor)
    assert LONG[:offset].endswith(prompt.prefix) and LONG[offset:].startswith(prompt.suffix)
    assert prompt.prefix_start_line % 8 == 0 and prompt.prefix_start_line > 0
    assert prompt.prefix == LONG[snap.lines.line_start(prompt.prefix_start_line) : offset]
    assert prompt.suffix.endswith("\n") and prompt.suffix_end_line > 121
    bigger = build_prompt(snap, cursor, [], glm_tokenizer, PromptBudget(max_tokens=600, align_lines=8))
    assert bigger.prefix.endswith(prompt.prefix) and len(bigger.prefix) > len(prompt.prefix)


def test_ids_follow_the_spm_layout(glm_tokenizer: GlmTokenizer) -> None:
    snap = doc("x = 1\ny = 2\n").snapshot()
    prompt = build_prompt(snap, Position(1, 4), [], glm_tokenizer)
    sp = glm_tokenizer.special
    expected = (
        [sp.require("gmask"), sp.require("sop")] + glm_tokenizer.encode(prompt.header)
        + [sp.require("code_suffix")] + glm_tokenizer.encode("2\n")
        + [sp.require("code_prefix")] + glm_tokenizer.encode("x = 1\ny = ")
        + [sp.require("code_middle")]
    )
    assert list(prompt.ids) == expected
    assert prompt.prefix_start_line == 0 and prompt.suffix_end_line == 2


def test_header_is_ordered_most_stable_first(glm_tokenizer: GlmTokenizer) -> None:
    snap = doc(LONG).snapshot()
    given = [
        snippet("recent-edit", f"{ROOT}/a.py", 0, "EDIT = 1\n"),
        snippet("similar-window", f"{ROOT}/b.py", 3, "SIMILAR = 2\n"),
        snippet("nearby-identifier-definition", f"{ROOT}/c.py", 1, "NEARBY = 3\n"),
        snippet("imported-definition", f"{ROOT}/z.py", 9, "IMPORTED_Z = 4\n"),
        snippet("imported-definition", f"{ROOT}/d.py", 2, "IMPORTED_D = 5\n"),
    ]
    header = build_prompt(snap, Position(60, 0), given, glm_tokenizer, PromptBudget(max_tokens=1000), roots=[ROOT]).header
    order = [header.index(name) for name in ("IMPORTED_D", "IMPORTED_Z", "NEARBY", "SIMILAR", "EDIT", "# file: pkg/main.py")]
    assert order == sorted(order)


def test_header_budget_drops_the_least_important_snippets(glm_tokenizer: GlmTokenizer) -> None:
    snap = doc(LONG).snapshot()
    big = "".join(f"CONSTANT_{i} = {i}\n" for i in range(60))
    given = [snippet("imported-definition", f"{ROOT}/a.py", 0, "KEEP = 1\n"), snippet("recent-edit", f"{ROOT}/b.py", 0, big)]
    prompt = build_prompt(snap, Position(60, 0), given, glm_tokenizer, PromptBudget(max_tokens=500, header_share=0.2))
    assert [s.text for s in prompt.snippets_used] == ["KEEP = 1\n"]
    assert "CONSTANT_0" not in prompt.header


def test_snippets_from_the_current_file_never_repeat_the_window(glm_tokenizer: GlmTokenizer) -> None:
    snap = doc(LONG).snapshot()
    inside = snippet("recent-edit", snap.path, 118, "def step_59(values):\n")
    outside = snippet("recent-edit", snap.path, 2, "def step_1(values):\n")
    prompt = build_prompt(snap, Position(120, 0), [inside, outside], glm_tokenizer, PromptBudget(max_tokens=300))
    assert prompt.prefix_start_line > 2
    assert prompt.snippets_used == (outside,)


def test_one_keystroke_keeps_every_token_before_the_prefix_tail(glm_tokenizer: GlmTokenizer) -> None:
    snippets = [snippet("imported-definition", f"{ROOT}/util.py", 0, "def helper(x):\n    return x + 1\n")]
    budget = PromptBudget(max_tokens=320)
    line = "    total = helper(values) + compute_more(values)"
    text = LONG[: len("".join(BODY[:60]))] + "def new(values):\n\n" + LONG[len("".join(BODY[:60])) :]
    document = doc(text)
    cursor = Position(121, 0)
    previous = build_prompt(document.snapshot(), cursor, snippets, glm_tokenizer, budget)
    starts = {previous.prefix_start_line}
    for version, char in enumerate(line, start=2):
        document.apply_change(Range(cursor, cursor), char, version)
        cursor = Position(cursor.line, cursor.character + 1)
        current = build_prompt(document.snapshot(), cursor, snippets, glm_tokenizer, budget)
        assert len(current.ids) <= budget.max_tokens
        if current.prefix_start_line == previous.prefix_start_line:
            assert current.header == previous.header and current.suffix == previous.suffix
            core = previous.prefix.rstrip()  # the tail: trailing whitespace and the last word
            stable_text = core[: max(core.rfind(" "), core.rfind("\n"), 0)]
            shared = list(previous.ids).index(glm_tokenizer.special.require("code_prefix")) + 1
            shared += len(glm_tokenizer.encode(stable_text))
            assert current.ids[:shared] == previous.ids[:shared]
        starts.add(current.prefix_start_line)
        previous = current
    assert len(starts) <= 2  # the aligned prefix start moved at most once while typing a line


def test_short_files_give_unused_room_to_the_suffix(glm_tokenizer: GlmTokenizer) -> None:
    text = "import os\n\n\n" + "".join(BODY[:40])
    snap = doc(text).snapshot()
    budget = PromptBudget(max_tokens=1200, suffix_share=0.05)
    prompt = build_prompt(snap, Position(1, 0), [], glm_tokenizer, budget)
    assert prompt.prefix == "import os\n"
    assert prompt.token_counts["suffix"] > 1200 * 0.05
    assert prompt.token_counts["total"] <= 1200


def test_tiny_budget_cuts_inside_the_cursor_line(glm_tokenizer: GlmTokenizer) -> None:
    text = "value = " + " + ".join(f"term_{i}" for i in range(200)) + "\n"
    snap = doc(text).snapshot()
    prompt = build_prompt(snap, Position(0, len(text) - 1), [], glm_tokenizer, PromptBudget(max_tokens=64, header_share=0.2, suffix_share=0.1))
    assert len(prompt.ids) <= 64
    assert prompt.prefix and text[: len(text) - 1].endswith(prompt.prefix)


@pytest.mark.parametrize(
    "kwargs",
    [{"max_tokens": 8}, {"header_share": 0.7, "suffix_share": 0.4}, {"header_share": -0.1}, {"align_lines": 0}],
)
def test_invalid_budgets_are_rejected(kwargs: dict) -> None:
    with pytest.raises(ValueError):
        PromptBudget(**kwargs)

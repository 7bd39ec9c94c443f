"""Selection counts mapped to snippets and lines (context.heat), on hand-computed prompts.

A one-character-per-token tokenizer makes every count checkable by hand: a token's span is its
character, so a line's count is the sum over its characters and its newline.
"""

from __future__ import annotations

import pytest

from context.crossfile import Snippet
from context.document import Document
from context.heat import HeatMapError, PromptSpans, heat_map
from context.positions import Position, Range
from context.prompt import PromptBudget, build_prompt

ROOT = "/w"
UTIL = "def f():\n    return 1\n"
MAIN = "import u\nx = f(\ny = 2\n"


class CharTokenizer:
    class special:  # noqa: N801 (the TokenizerLike protocol's attribute)
        @staticmethod
        def require(name: str) -> int:
            return {"gmask": 1, "sop": 2, "code_suffix": 3, "code_prefix": 4, "code_middle": 5}[name]

    def encode(self, text: str) -> list[int]:
        return [ord(c) for c in text]

    @staticmethod
    def spans(text: str) -> list[tuple[int, int]]:
        return [(i, i + 1) for i in range(len(text))]


def prompt_at(line: int, character: int):
    snapshot = Document(f"file://{ROOT}/main.py", "python", 1, MAIN).snapshot()
    util = Snippet(f"{ROOT}/u.py", Range(Position(3, 0), Position(5, 0)), UTIL, "imported-definition", 1.0, 0)
    prompt = build_prompt(snapshot, Position(line, character), [util], CharTokenizer(), PromptBudget(max_tokens=400), [ROOT])
    spans = PromptSpans(*(CharTokenizer.spans(t) for t in (prompt.header, prompt.suffix, prompt.prefix)))
    return prompt, spans, util


def test_every_token_once():
    prompt, spans, util = prompt_at(1, 6)  # after "x = f("
    assert prompt.header == "# file: u.py\n" + UTIL + "# file: main.py\n"
    assert prompt.prefix == "import u\nx = f(" and prompt.suffix == "\ny = 2\n"
    heat = heat_map(prompt, spans, [1] * len(prompt.ids), 1)
    assert heat.total == len(prompt.ids) == 5 + 13 + 22 + 16 + 7 + 15
    (snippet,) = heat.snippets
    assert snippet.snippet is util
    assert snippet.tokens == 13 + 22  # its "# file: u.py" line and its body
    assert snippet.selections == 35
    # body lines map to the snippet's range in u.py: "def f():\n" = 9, "    return 1\n" = 13
    assert [(h.line, h.selections) for h in snippet.lines] == [(3, 9), (4, 13)]
    # current file: "import u\n" (9) on line 0; line 1 is "x = f(" from the prefix (6) and the
    # suffix's "\n" that ends it (1); "y = 2\n" (6) on line 2
    assert [(h.line, h.selections) for h in heat.lines] == [(0, 9), (1, 7), (2, 6)]
    assert heat.current_file == 22 and heat.other == 5 + 16
    assert heat.lines[0].share == pytest.approx(9 / 78)


def test_counts_land_where_they_were_given():
    prompt, spans, _ = prompt_at(2, 0)  # the start of "y = 2"
    counts = [0] * len(prompt.ids)
    header_at = 2
    body_at = header_at + len("# file: u.py\n")
    counts[body_at + len("def f():\n") + 4] = 7  # the "r" of "return 1"
    prefix_at = header_at + len(prompt.header) + 1 + len(prompt.suffix) + 1
    counts[prefix_at + len("import u\n")] = 3  # the "x" of line 1
    counts[0] = 2  # [gMASK]
    heat = heat_map(prompt, spans, counts, 2)
    assert [(h.line, h.selections) for h in heat.snippets[0].lines] == [(3, 0), (4, 7)]
    assert [(h.line, h.selections) for h in heat.lines if h.selections] == [(1, 3)]
    assert (heat.total, heat.current_file, heat.other) == (12, 3, 2)
    assert heat.snippets[0].share == pytest.approx(7 / 12)


def test_mismatched_counts_are_refused():
    prompt, spans, _ = prompt_at(1, 6)
    with pytest.raises(HeatMapError, match="selection counts"):
        heat_map(prompt, spans, [1] * (len(prompt.ids) - 1), 1)
    with pytest.raises(HeatMapError, match="segments hold"):
        heat_map(prompt, PromptSpans(spans.header[1:], spans.suffix, spans.prefix), [1] * len(prompt.ids), 1)

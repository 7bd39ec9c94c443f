"""Latency as the user sees it: a block's first line is streamed as soon as it is complete."""

from __future__ import annotations

import asyncio

import pytest

from lsp_harness import Session

BLOCK = "total = 0\n    for x in xs:\n        total += x\n    return total\n"


async def test_the_first_line_of_a_block_is_streamed_before_the_block_ends(tmp_path):
    fake = {"text": BLOCK, "step_s": 0.03}  # one byte per step: the block takes ~2 s
    session = await Session.start_fake(tmp_path, fake, init_options={"streaming": True, "maxDecodeMs": 0})
    try:
        uri = session.open(tmp_path / "block.py", "def f(xs):\n    \n")
        future = session.inline_request(uri, 1, 4, msg_id="block", automatic=False)
        first = await session.wait_for(
            lambda: next((p["text"] for p in session.messages("glm5/inlineCompletionProgress") if "\n" in p["text"]), None),
            what="a streamed complete first line",
        )
        assert first.startswith("total = 0\n") and not future.done()
        result = await asyncio.wrap_future(future)
        assert result.items[0].insert_text.startswith("total = 0\n    for x in xs:")
    finally:
        assert await session.stop() == 0


@pytest.mark.parametrize(
    ("text", "line", "expected"),
    [
        ("def f(x):\n    \n", 1, "multi_line"),  # the body of a new block
        ("def f(x):", 0, "multi_line"),  # at the opener itself
        ("if (ok) {\n  \n}\n", 1, "multi_line"),
        ("", 0, "multi_line"),  # a new file
        ("def f(x):\n    y = x\n    \n", 2, "single_line"),  # inside a body: the next statement only
        ("x = 1\n\n", 1, "single_line"),
        ("def f(x):\n    y = x\n        \n", 2, "multi_line"),  # indented deeper than the line before
    ],
)
def test_multi_line_only_where_a_block_starts(text, line, expected):
    from context.document import Document
    from context.positions import Position
    from lsp_server.pipeline import completion_kind

    language = "javascript" if "{" in text else "python"
    snapshot = Document("file:///a", language, 1, text).snapshot()
    character = len(text.split("\n")[line])
    assert completion_kind(snapshot, Position(line, character), "auto").value == expected
    assert completion_kind(snapshot, Position(line, character), "always").value == "multi_line"

"""Latency as the user sees it: a block's first line is streamed as soon as it is complete."""

from __future__ import annotations

import asyncio

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

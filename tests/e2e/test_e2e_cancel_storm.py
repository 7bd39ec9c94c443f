"""A cancel storm: 1,000 completion requests, each followed by an edit and the previous one's
`$/cancelRequest`, against `lsp_server --stdio` with a tiny random checkpoint.

The storm runs in rounds of 250; after each round every request is answered, no KV block is
in use and the server's RSS is sampled. RSS must stay flat from the first round's sample to the
last (the curve is printed; on the CPU the KV pool is mapped lazily, so the pool bytes first
written between the two samples, which `glm5.stats` reports, are allowed on top). A sample taken
mid-round would measure the backlog of requests the server has not reached yet, which grows
with the round's length, not a leak. The answer for the
latest version, generated with whatever the storm left in the KV cache, must be the one the
server computes again from scratch (KV cache cleared), so no aborted request left a wrong cached
prefix behind.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest
from lsprotocol import types

from lsp_harness import Session

pytestmark = pytest.mark.e2e

REQUESTS = 1000
# no decode-time budget (maxDecodeMs 0): a recomputation must not be cut shorter for being slower
SOURCE = "def area(w, h):\n    return w * h\n\n\ndef total(rects):\n    return "
LINE = 5
ROUND = 250
RSS_GROWTH_MB = 16  # allowed between the first round's sample and the last: caches are bounded; a leak grows per request


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


async def test_a_thousand_cancelled_requests_leave_no_blocks_no_growth_and_a_correct_answer(tiny_checkpoint, tmp_path):
    root = tmp_path / "ws"
    root.mkdir()
    argv = [sys.executable, "-m", "lsp_server", "--stdio", "--model", str(tiny_checkpoint), "--log-file", str(tmp_path / "server.log")]
    session = await Session.start(
        argv, [root], init_options={"maxTokens": 8, "debounceMs": 0, "maxDecodeMs": 0}, env={"GLM5_LSP_CACHE_DIR": str(tmp_path / "cache")},
        log_file=tmp_path / "server.log",
    )
    session.root = root
    pid = session.client._server.pid
    try:
        uri = session.create("main.py", SOURCE)
        await session.wait_ready(180)
        column, outcomes, rss, touched = len("    return "), [], {}, {}
        for first in range(0, REQUESTS, ROUND):
            pending = []
            for i in range(first, first + ROUND):
                pending.append(session.inline_request(uri, LINE, column, msg_id=f"storm-{i}", automatic=i % 2 == 0))
                column = _edit(session, uri, column, i)
                if i:
                    session.client.protocol.notify("$/cancelRequest", types.CancelParams(id=f"storm-{i - 1}"))
                if i % 50 == 0:
                    await asyncio.sleep(0)  # let the client's reader keep up
            outcomes += await asyncio.gather(*(asyncio.wait_for(asyncio.wrap_future(f), 120) for f in pending), return_exceptions=True)
            stats = await _idle_stats(session)
            rss[first + ROUND], touched[first + ROUND] = round(_rss_mb(pid), 1), stats["kvCache"]["touched_bytes"] / 2**20
        assert not [o for o in outcomes if isinstance(o, asyncio.TimeoutError)], "requests left unanswered"
        pool_growth = touched[REQUESTS] - touched[ROUND]
        # a settings change empties the type-through cache (and only it): the answer below is
        # generated, reusing whatever the storm left in the KV cache
        session.client.workspace_did_change_configuration(
            types.DidChangeConfigurationParams(settings={"glm5": {"maxTokens": 8, "debounceMs": 1, "maxDecodeMs": 0}})
        )
        final = await session.inline(uri, LINE, column)
        await session.command("glm5.clearCache")
        again = await session.inline(uri, LINE, column)
        answered = sum(not isinstance(o, BaseException) for o in outcomes)
        print(f"\ncancel storm: {REQUESTS} requests, {answered} answered, the rest cancelled or stale; idle RSS MB by request {rss}; "
              f"KV pool first written meanwhile {pool_growth:.1f} MB; engine {stats['engine']}")
        assert [i.insert_text for i in final.items] == [i.insert_text for i in again.items]
        assert all(i.range.start == types.Position(line=LINE, character=column) for i in final.items)
        assert rss[REQUESTS] - rss[ROUND] - pool_growth < RSS_GROWTH_MB, (rss, pool_growth)
    finally:
        assert await session.stop() == 0


def _edit(session: Session, uri: str, column: int, i: int) -> int:
    """Type one character after the cursor, or delete what was typed once the line is long; the new column."""
    if column > len("    return ") + 30:
        session.change(uri, "", (LINE, len("    return ")), (LINE, column))
        return len("    return ")
    session.change(uri, "xyz+"[i % 4], (LINE, column))
    return column + 1


async def _idle_stats(session: Session) -> dict:
    """`glm5.stats` once no KV block is in use (polled for up to a minute)."""
    for _ in range(300):
        stats = await session.stats()
        if stats["kvCache"].get("blocks_in_use") == 0:
            return stats
        await asyncio.sleep(0.2)
    raise AssertionError(f"KV blocks still in use: {stats['kvCache']}")

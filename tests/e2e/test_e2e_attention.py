"""`glm5.explainAttention` through `lsp_server --stdio` with the embedded model.

The prompt here is shorter than the model's `index_topk` (256), so every layer runs dense and
every generating query selects every prompt token: each token then holds exactly
layers x queries selections, and each snippet and line holds that times its token count.
"""

from __future__ import annotations

import sys

import pytest
from pygls.exceptions import JsonRpcException

from lsp_harness import Session

pytestmark = pytest.mark.e2e

UTIL = "def compute_total(items):\n    return sum(items)\n"
MAIN = "from util import compute_total\n\nitems = [1, 2, 3]\ntotal = \nprint(total)\n"


async def test_explain_attention_maps_selections_to_snippets_and_lines(tmp_path):
    (tmp_path / "util.py").write_text(UTIL)
    main = tmp_path / "main.py"
    main.write_text(MAIN)
    session = await Session.start([sys.executable, "-m", "lsp_server", "--stdio"], [tmp_path], init_options={"warmup": False})
    try:
        await session.wait_ready()
        uri = session.open(main)
        with pytest.raises(JsonRpcException, match="no known cursor"):
            await session.command("glm5.explainAttention", {"uri": uri})
        where = {"uri": uri, "position": {"line": 3, "character": 8}}
        heat = await session.command("glm5.explainAttention", where)
        context = await session.command("glm5.explainContext", where)
    finally:
        assert await session.stop() == 0
    per_token = heat["layers"] * heat["queries"]
    assert heat["layers"] == 4 and heat["indexTopk"] == 256 and heat["queries"] >= 1
    assert context["tokens"]["total"] <= heat["indexTopk"]  # dense: all prompt tokens are seen
    assert heat["total"] == context["tokens"]["total"] * per_token
    parts = sum(s["selections"] for s in heat["snippets"]) + heat["currentFile"]["selections"] + heat["other"]["selections"]
    assert parts == heat["total"]
    assert heat["currentFile"]["share"] + heat["other"]["share"] + sum(s["share"] for s in heat["snippets"]) == pytest.approx(1)

    (snippet,) = heat["snippets"]
    assert snippet["uri"] == (tmp_path / "util.py").as_uri() and snippet["reason"] == "imported-definition"
    assert [s["range"] for s in context["snippets"]] == [snippet["range"]]
    assert snippet["selections"] == snippet["tokens"] * per_token
    assert [line["line"] for line in snippet["lines"]] == [0, 1]
    assert sum(line["selections"] for line in snippet["lines"]) < snippet["selections"]  # its `# file:` line is "other"

    lines = {line["line"]: line for line in heat["lines"]}
    # the whole file (prefix lines 0-3, suffix lines 3-4) but the blank line 1: the "\n\n" token starts on line 0
    assert set(lines) == {0, 2, 3, 4}
    assert all(line["selections"] % per_token == 0 and line["selections"] > 0 for line in lines.values())

    assert heat["expertLoad"][0] == []  # the dense-MLP first layer
    for load in heat["expertLoad"][1:]:
        assert len(load) == 8 and sum(load) % 2 == 0 and sum(load) > 0

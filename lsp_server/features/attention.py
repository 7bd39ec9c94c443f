"""`workspace/executeCommand` `glm5.explainAttention`: what the model looked at for a completion.

`glm5.explainAttention {uri, position?}` builds the prompt exactly as a completion at `position`
would (at the last known cursor when `position` is left out), runs it once with the runtime's
recording on (`GenerationRequest.record_attention`; completions never record), and answers:

    {uri, version, position, kind, completion, queries, layers, indexTopk, total,
     snippets: [{uri, range, reason, tokens, selections, share, lines: [{line, selections, share}]}],
     lines: [{line, selections, share}],            # the current file's prefix and suffix lines
     currentFile: {selections, share}, other: {selections, share},
     expertLoad: [[tokens per expert] per layer]}   # [] for a dense-MLP layer

`selections` count how often the sparse attention's top-k held a prompt token, summed over layers
and generating steps; `share` is the fraction of all prompt selections (`context.heat`).
"""

from __future__ import annotations

import itertools
from typing import Any

from pygls.uris import from_fs_path

from context.document import DocumentSnapshot
from context.heat import HeatMap, HeatMapError, LineHeat, PromptSpans, heat_map
from context.positions import Position
from model_runtime.api import GenerationRequest

from ..errors import InvalidParams
from .commands import command_target, forced_prompt, lsp_json

EXPLAIN_ATTENTION = "glm5.explainAttention"
_ids = itertools.count()

from ..server import Glm5Server  # noqa: E402  (pygls reads handler annotations at call time)


def register(ls: Glm5Server) -> None:
    @ls.command(EXPLAIN_ATTENTION)
    async def explain_attention(ls: Glm5Server, *args: Any) -> dict[str, Any]:
        if len(args) != 1 or not isinstance(args[0], dict) or "uri" not in args[0]:
            raise InvalidParams(f"{EXPLAIN_ATTENTION}: expected one argument {{uri, position?}}, got {list(args)!r}")
        snapshot, position = command_target(ls, args[0], EXPLAIN_ATTENTION)
        return await explain_attention_at(ls, snapshot, position)


async def explain_attention_at(ls: Glm5Server, snapshot: DocumentSnapshot, position: Position) -> dict[str, Any]:
    uri = snapshot.uri
    handle, prepared = await forced_prompt(ls, snapshot, position, EXPLAIN_ATTENTION)
    encoding, prompt = ls.state.encoding, prepared.prompt
    request = GenerationRequest(f"explain-attention-{next(_ids)}", prompt.ids, prepared.sampling, record_attention=True)
    result = await ls.engine.generate(request)
    record = result.attention
    if record is None:
        raise InvalidParams(f"{EXPLAIN_ATTENTION}: this engine does not record attention")
    tokenizer = handle.tokenizer
    spans = PromptSpans(*(tokenizer.encode_offsets(text) for text in (prompt.header, prompt.suffix, prompt.prefix)))
    try:
        heat = heat_map(prompt, spans, record.selections, prepared.position.line)
    except HeatMapError as exc:
        raise InvalidParams(f"{EXPLAIN_ATTENTION}: {exc}") from exc
    return {
        "uri": uri,
        "version": snapshot.version,
        "position": lsp_json(encoding.position_out(snapshot.lines, prepared.position)),
        "kind": prepared.kind.value,
        "completion": result.text,
        "queries": record.queries,
        "layers": record.layers,
        "indexTopk": record.index_topk,
        **_heat_json(heat, ls),
        "expertLoad": [list(load) for load in record.expert_load],
    }


def _heat_json(heat: HeatMap, ls: Glm5Server) -> dict[str, Any]:
    """The heat map as JSON; snippet ranges in the client's position encoding."""
    encoding = ls.state.encoding
    share = (lambda n: n / heat.total) if heat.total else (lambda n: 0.0)
    return {
        "total": heat.total,
        "snippets": [
            {
                "uri": from_fs_path(s.snippet.path) or s.snippet.path,
                "range": lsp_json(encoding.range_out(None if encoding.identity else ls.state.file_lines(s.snippet.path), s.snippet.range)),
                "reason": s.snippet.reason,
                "tokens": s.tokens,
                "selections": s.selections,
                "share": s.share,
                "lines": _lines(s.lines),
            }
            for s in heat.snippets
        ],
        "lines": _lines(heat.lines),
        "currentFile": {"selections": heat.current_file, "share": share(heat.current_file)},
        "other": {"selections": heat.other, "share": share(heat.other)},
    }


def _lines(lines: tuple[LineHeat, ...]) -> list[dict[str, Any]]:
    return [{"line": h.line, "selections": h.selections, "share": h.share} for h in lines]

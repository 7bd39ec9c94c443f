"""`workspace/executeCommand`: glm5.explainContext, glm5.stats, glm5.clearCache, glm5.applyFix,
glm5.didAcceptCompletion.

- `glm5.explainContext {uri, position?, candidates?, explicit?}` -> what the model would see for a completion
  there (at the last known cursor of the document when `position` is left out):
  `{prompt, kind, tokens: {...counts, total}, snippets: [{uri, range, reason, detail, tokens}],
  budget}`, built exactly as a completion would; unless `candidates` is false, the completion is
  also run, as an automatic request unless `explicit` is true: `completion`, `abstained`, `why`
  (nothing shown), `scored`, `reranker` (the weights fitted for this model, or why there are none),
  `candidates: [{text, sources, modelRank, logprob, tokens, score, features, chosen}]` and
  `constraint: {healPrefix, singleLine, openBrackets, memberScopes, definedNames, report}`
  (report: which rules fired).
- `glm5.stats [{recent: N}]` -> completion outcomes, latency percentiles, prefill accounting,
  telemetry counts, cache counters, model state, the engine's `EngineStats` and the index
  (roots, files, files left out and why), and the garbage collector (`gc`: objects frozen at
  start-up, collections per generation); with `recent`, the last N request records too.
- `glm5.clearCache [{allWorkspaces}]` -> forgets the type-through cache and the engine's KV cache
  (cached prefixes in memory and the blocks persisted for this workspace, or for every workspace).
- `glm5.applyFix <code action data>` -> computes a code action's edit and applies it through
  `workspace/applyEdit` (for clients that do not resolve code actions).
- `glm5.documentState {uri}` -> `{uri, open, version, length, sha256}`: the server's copy of a
  document (length in UTF-16 code units, SHA-256 of its UTF-8 text), so a client can check that
  both copies agree; `open` false (and the rest null) for a document that is not open.
"""

from __future__ import annotations

from collections.abc import Mapping
import asyncio
import gc
import hashlib
from dataclasses import asdict
from typing import Any

from context.document import DocumentSnapshot
from context.positions import Position, encode_text, utf16_length
from lsprotocol import types
from pygls.uris import from_fs_path

from .. import candidates, convert, pipeline
from ..encoding import PositionEncoding
from ..errors import InvalidParams
from .code_actions import APPLY_FIX, compute, workspace_edit
from .inline_completion import ACCEPT_COMMAND

SKIPPED_SHOWN = 50
EXPLAIN_CONTEXT = "glm5.explainContext"
DOCUMENT_STATE = "glm5.documentState"

# pygls evaluates command handlers' annotations at call time, so this import cannot be
# limited to type checking.
from ..server import Glm5Server  # noqa: E402


def register(ls: Glm5Server) -> None:
    @ls.command("glm5.explainContext")
    async def explain_context(ls: Glm5Server, *args: Any) -> dict[str, Any]:
        raw = _single_object(args, EXPLAIN_CONTEXT, ("uri",))
        snapshot, position = command_target(ls, raw, EXPLAIN_CONTEXT)
        return await explain(ls, snapshot, position, bool(raw.get("candidates", True)), bool(raw.get("explicit", False)))

    @ls.command("glm5.stats")
    async def stats(ls: Glm5Server, *args: Any) -> dict[str, Any]:
        recent = args[0].get("recent", 0) if args and isinstance(args[0], Mapping) else 0
        if not isinstance(recent, int) or recent < 0:
            raise InvalidParams(f"glm5.stats: recent must be a non-negative integer, got {recent!r}")
        engine = ls.engine.stats()
        return {
            **ls.stats.summary(recent),
            "cache": {"entries": len(ls.cache), "hits": ls.cache.hits, "misses": ls.cache.misses},
            "model": {
                "state": ls.engine.state.value, "error": ls.engine.error,
                "path": ls.engine.handle.path if ls.engine.handle is not None else ls.model_path,
            },
            "engine": asdict(engine) if engine is not None else None,
            "kvCache": await ls.engine.cache_stats(),
            "index": _index_summary(ls),
            "gc": _gc_summary(),
        }

    @ls.command("glm5.clearCache")
    async def clear_cache(ls: Glm5Server, *args: Any) -> dict[str, int]:
        every = bool(args and isinstance(args[0], Mapping) and args[0].get("allWorkspaces"))
        cleared = len(ls.cache)
        ls.cache.clear()
        freed = await ls.engine.clear_cache(workspace=not every)
        return {"cleared": cleared, "kvBytesFreed": freed}

    @ls.command(APPLY_FIX)
    async def apply_fix(ls: Glm5Server, *args: Any) -> dict[str, Any]:
        if len(args) != 1:
            raise InvalidParams(f"{APPLY_FIX}: expected one code action data object, got {len(args)} arguments")
        fix = await compute(ls, args[0])
        result = await ls.workspace_apply_edit_async(
            types.ApplyWorkspaceEditParams(edit=workspace_edit(ls, fix), label=f"glm5: {args[0].get('action')}")
        )
        return {"applied": result.applied, "reason": result.failure_reason, "attempts": fix.attempts}

    @ls.command(DOCUMENT_STATE)
    def document_state(ls: Glm5Server, *args: Any) -> dict[str, Any]:
        uri = _single_object(args, DOCUMENT_STATE, ("uri",))["uri"]
        if not isinstance(uri, str):  # any string a didOpen named, "" included
            raise InvalidParams(f"{DOCUMENT_STATE}: uri must be a string, got {uri!r}")
        if (document := ls.documents.get(uri)) is None:
            return {"uri": uri, "open": False, "version": None, "length": None, "sha256": None}
        text = document.text
        digest = hashlib.sha256(encode_text(text)).hexdigest()
        return {"uri": uri, "open": True, "version": document.version, "length": utf16_length(text), "sha256": digest}

    @ls.command(ACCEPT_COMMAND)
    def did_accept(ls: Glm5Server, *args: Any) -> None:
        raw = _single_object(args, ACCEPT_COMMAND, ("completionId",))
        ls.stats.telemetry_event("accepted", str(raw["completionId"]))


def _gc_summary() -> dict[str, Any]:
    """The cyclic collector: objects frozen at start-up (`startup.freeze_heap`, out of every
    scan) and the collections run per generation; a full one scans only the unfrozen objects."""
    return {"frozen": gc.get_freeze_count(), "collections": [g["collections"] for g in gc.get_stats()]}


def command_target(ls: Glm5Server, raw: Mapping[str, Any], command: str) -> tuple[DocumentSnapshot, Position]:
    """The snapshot a command works on and its `position` (else the document's last known
    cursor), checked against that snapshot: a position outside it is InvalidParams."""
    uri = convert.parse_uri(raw, command)
    snapshot = ls.snapshot(uri)
    if "position" in raw:
        given = convert.parse_position(raw["position"], f"{command} position")
        return snapshot, convert.position_in(snapshot.lines, ls.state.encoding, given, f"{command} position")
    cursor = ls.cursors.get(uri)
    if cursor is None:
        raise InvalidParams(f"{command}: no position given and no known cursor in {uri}")
    return snapshot, convert.position_in(snapshot.lines, PositionEncoding(), cursor, f"{command}: the last known cursor")


async def forced_prompt(ls: Glm5Server, snapshot: DocumentSnapshot, position: Position, command: str):
    """The completion request a command explains at `position` of `snapshot`, built off the event
    loop: (handle, prepared), the prompt forced even where a completion would not run."""
    handle = await ls.engine.ready()
    prepared = await asyncio.to_thread(ls.prepare_later(snapshot, position, handle, force=True))
    if prepared.prompt is None:  # forced prompts exist everywhere except on a line too long to complete
        raise InvalidParams(f"{command}: no prompt at {position}: the line is too long to complete")
    return handle, prepared


async def explain(
    ls: Glm5Server, snapshot: DocumentSnapshot, position: Position, run: bool = True, explicit: bool = False
) -> dict[str, Any]:
    """What the model sees at `position` of `snapshot`; with `run`, also the completion run
    there, as an automatic request (or an `explicit` one): its candidates, their scores and what
    the constraint did (`_run_completion`)."""
    uri = snapshot.uri
    handle, prepared = await forced_prompt(ls, snapshot, position, EXPLAIN_CONTEXT)
    encoding, prompt = ls.state.encoding, prepared.prompt
    outcome: dict[str, Any] = {}
    if run:
        plan = await asyncio.to_thread(
            candidates.make_plan, prepared, ls.settings, handle.tokenizer, ls.index, ls.open_snapshots(exclude=uri), ls.engine.can_score,
            handle.identity, explicit,
        )
        outcome = await _run_completion(ls.engine, prepared, plan, handle.tokenizer, f"explain-{snapshot.version}-{id(plan)}")
    return {
        **outcome,
        "uri": uri,
        "version": snapshot.version,
        "position": lsp_json(encoding.position_out(snapshot.lines, prepared.position)),
        "kind": prepared.kind.value,
        "prompt": handle.tokenizer.decode(list(prompt.ids), skip_special=False),
        "tokens": {**prompt.token_counts, "total": len(prompt.ids)},
        "snippets": [
            {
                "uri": from_fs_path(s.path) or s.path,
                "range": lsp_json(encoding.range_out(None if encoding.identity else ls.state.file_lines(s.path), s.range)),
                "reason": s.reason,
                "detail": s.detail,
                "tokens": s.tokens,
            }
            for s in prompt.snippets_used
        ],
        "budget": asdict(prepared.budget) if prepared.budget is not None else None,
    }


async def _run_completion(
    engine: Any, prepared: pipeline.Prepared, plan: candidates.Plan, tokenizer: Any, request_id: str
) -> dict[str, Any]:
    """Run the completion and say what happened: the constraint (what it
    allowed, which rules fired), every candidate with its score, and the choice. This runs the
    full pipeline, even where the server skips the model (`reach` says what it would skip), so
    that every candidate can be seen."""
    result = await engine.generate(plan.request(request_id, prepared.sampling))
    decision = await candidates.settle(engine, plan, prepared, result, tokenizer)
    spec = plan.constraint
    return {
        "completion": decision.text,
        "abstained": decision.abstained,
        "why": decision.why,
        "scored": decision.scored,
        "reranker": _reranker_summary(plan),
        "outOfReach": plan.out_of_reach,  # the server would not have run the model
        "reach": None if plan.reach is None else asdict(plan.reach),
        "candidates": decision.report(),
        "constraint": None if spec is None else {
            "healPrefix": spec.heal_prefix,
            "singleLine": spec.single_line,
            "openBrackets": spec.open_brackets,
            "memberScopes": {s.qualifier: len(s.members) for s in spec.member_scopes},
            "definedNames": None if spec.defined_names is None else len(spec.defined_names),
            "report": None if result.constraint is None else asdict(result.constraint),
        },
    }


def _reranker_summary(plan: candidates.Plan) -> dict[str, Any] | None:
    """Which reranker weights chose (fitted for this model), or why none did."""
    if not plan.rerank:
        return None
    if plan.reranker is None:
        return {"fitted": False, "why": plan.unranked}
    meta = plan.reranker.meta
    return {"fitted": True, "threshold": plan.reranker.threshold, "model": meta.get("model"), "fittedOn": meta.get("fitted")}


def lsp_json(value: types.Position | types.Range) -> dict[str, Any]:
    if isinstance(value, types.Position):
        return {"line": value.line, "character": value.character}
    return {"start": lsp_json(value.start), "end": lsp_json(value.end)}


def _index_summary(ls: Glm5Server) -> dict[str, Any] | None:
    """Roots, file count, how many of them the last build took from the saved snapshot, and the
    files left out with why (the first SKIPPED_SHOWN of them)."""
    if ls.index is None:
        return None
    skipped = ls.index.skipped()
    shown = dict(sorted(skipped.items())[:SKIPPED_SHOWN])
    return {
        "roots": list(ls.index.roots), "files": len(ls.index.files()), "from_snapshot": ls.index.reused,
        "skipped_count": len(skipped), "skipped": shown,
    }


def _single_object(args: tuple[Any, ...], command: str, keys: tuple[str, ...]) -> Mapping[str, Any]:
    if len(args) != 1 or not isinstance(args[0], Mapping) or any(k not in args[0] for k in keys):
        raise InvalidParams(f"{command}: expected one argument {{{', '.join(keys)}}}, got {list(args)!r}")
    return args[0]

"""A scripted language server that speaks glm5-lsp's editor-facing protocol, for client tests.

Role: lets the editor clients (Neovim, Emacs, VS Code) be tested on the exact wire protocol of
`lsp_server` (ARCHITECTURE.md, "Custom protocol") with a known completion text, fixed timing and
failure modes the real server cannot be made to produce on demand (an error status, a slow
stream). Run it as `python tests/editors/fake_server.py` (stdio).

Behaviour, all from environment variables so a test controls it without touching the protocol:
- `GLM5_FAKE_COMPLETION`: the completion text (default: a two-line Python body).
- `GLM5_FAKE_CHUNKS`: how many streamed pieces the text is sent in (default 3).
- `GLM5_FAKE_DELAY_MS`: delay before each piece (default 20).
- `GLM5_FAKE_FAIL_WARMUP`: when set, warm-up ends in `glm5/status {state: "error"}`.

Invariants: the final response of `textDocument/inlineCompletion` always equals the last streamed
text; `glm5/inlineCompletionProgress` carries the JSON-RPC id of the request as `requestId`; a
cancelled request streams nothing more and answers nothing.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from dataclasses import dataclass, field

from lsprotocol import types as t
from pygls.lsp.server import LanguageServer

DEFAULT_COMPLETION = "return a + b\n"
ACCEPT_COMMAND = "glm5.completionAccepted"
TELEMETRY = ("glm5/didShowCompletion", "glm5/didAcceptCompletion", "glm5/didRejectCompletion")


@dataclass(slots=True)
class FakeState:
    streaming: bool = False
    counts: dict[str, list[str]] = field(default_factory=lambda: {m: [] for m in TELEMETRY})
    requests: int = 0


server = LanguageServer("glm5-fake", "0.0.1")
state = FakeState()


def _env_int(name: str, default: int) -> int:
    return int(os.environ.get(name, default))


def _completion_text() -> str:
    return os.environ.get("GLM5_FAKE_COMPLETION", DEFAULT_COMPLETION)


def _pieces(text: str, chunks: int) -> list[str]:
    """Cumulative prefixes of `text`, `chunks` of them, the last being the whole text."""
    step = max(1, -(-len(text) // max(1, chunks)))
    return [text[: min(len(text), i + step)] for i in range(0, len(text), step)] or [text]


@server.feature(t.INITIALIZE)
def on_initialize(ls: LanguageServer, params: t.InitializeParams) -> None:
    options = params.initialization_options or {}
    state.streaming = bool(options.get("streaming"))


@server.feature(t.INITIALIZED)
async def on_initialized(ls: LanguageServer, params: t.InitializedParams) -> None:
    token = "glm5-warmup"
    try:
        await ls.work_done_progress.create_async(token)
    except Exception:  # the client may not support server-initiated progress
        token = None
    ls.protocol.notify("glm5/status", {"state": "warming", "progress": 0})
    if token:
        ls.work_done_progress.begin(token, t.WorkDoneProgressBegin(title="GLM-5 warm-up", percentage=0))
    for pct in (40, 80):
        await asyncio.sleep(0.01)
        if token:
            ls.work_done_progress.report(token, t.WorkDoneProgressReport(percentage=pct))
        ls.protocol.notify("glm5/status", {"state": "warming", "progress": pct / 100})
    if token:
        ls.work_done_progress.end(token, t.WorkDoneProgressEnd(message="ready"))
    if os.environ.get("GLM5_FAKE_FAIL_WARMUP"):
        ls.protocol.notify("glm5/status", {"state": "error", "message": "checkpoint not found"})
    else:
        ls.protocol.notify("glm5/status", {"state": "ready"})


@server.feature(t.TEXT_DOCUMENT_INLINE_COMPLETION, t.InlineCompletionOptions())
async def on_inline_completion(
    ls: LanguageServer, params: t.InlineCompletionParams
) -> t.InlineCompletionList:
    request_id = ls.protocol.msg_id
    state.requests += 1
    ls.protocol.notify("glm5/status", {"state": "busy"})
    text = _completion_text()
    try:
        for piece in _pieces(text, _env_int("GLM5_FAKE_CHUNKS", 3)):
            await asyncio.sleep(_env_int("GLM5_FAKE_DELAY_MS", 20) / 1000)
            if state.streaming:
                ls.protocol.notify(
                    "glm5/inlineCompletionProgress", {"requestId": request_id, "text": piece}
                )
    finally:
        ls.protocol.notify("glm5/status", {"state": "ready"})
    completion_id = uuid.uuid4().hex
    pos = params.position
    command = t.Command(
        title="GLM-5 completion accepted",
        command=ACCEPT_COMMAND,
        arguments=[{"completionId": completion_id}],
    )
    item = t.InlineCompletionItem(
        insert_text=text, range=t.Range(start=pos, end=pos), command=command
    )
    return t.InlineCompletionList(items=[item])


@server.feature(t.TEXT_DOCUMENT_COMPLETION)
def on_completion(ls: LanguageServer, params: t.CompletionParams) -> t.CompletionList:
    text = _completion_text()
    item = t.CompletionItem(label=text.splitlines()[0] if text else "", insert_text=text)
    return t.CompletionList(is_incomplete=True, items=[item])


def _telemetry(method: str):
    def record(ls: LanguageServer, params) -> None:
        state.counts[method].append(getattr(params, "completionId", None) or params["completionId"])

    return record


for _method in TELEMETRY:
    server.feature(_method)(_telemetry(_method))


@server.command("glm5.stats")
def stats(ls: LanguageServer, *args) -> dict:
    """The shape of the real server's `glm5.stats` (the parts clients read)."""
    return {
        "completions": {"answered": state.requests},
        "telemetry": {
            "shown": len(state.counts["glm5/didShowCompletion"]),
            "accepted": len(state.counts["glm5/didAcceptCompletion"]),
            "rejected": len(state.counts["glm5/didRejectCompletion"]),
        },
    }


@server.command("glm5.explainContext")
def explain_context(ls: LanguageServer, *args) -> dict:
    """The shape of the real server's answer, with one snippet from another file."""
    return {
        "uri": args[0]["uri"] if args and isinstance(args[0], dict) else None,
        "kind": "multi_line",
        "prompt": "[gMASK]<sop># file: geometry.py\ndef area(width, height):\n<|code_middle|>",
        "tokens": {"header": 8, "prefix": 6, "suffix": 0, "total": 18},
        "budget": {"max_tokens": 1536, "header_share": 0.3, "suffix_share": 0.15, "align_lines": 8},
        "snippets": [
            {
                "uri": "file:///ws/geometry.py",
                "range": {"start": {"line": 0, "character": 0}, "end": {"line": 1, "character": 0}},
                "reason": "imported definition",
                "detail": None,
                "tokens": 8,
            }
        ],
    }


if __name__ == "__main__":
    server.start_io()

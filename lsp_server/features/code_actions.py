"""`textDocument/codeAction` and `codeAction/resolve`: "Declare `x`" and "Fix with model".

Actions are offered cheaply (no model call) with their parameters in `data`; the edit is
computed when the user picks one: in `codeAction/resolve` for clients that resolve `edit`
lazily, else through the `glm5.applyFix` command (which applies it with `workspace/applyEdit`).
Edits are versioned (`documentChanges`) when the client supports it, so an edit computed for
an old version is refused by the client instead of corrupting the file.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from lsprotocol import types

from .. import convert
from ..analysis import SOURCE, UNDECLARED
from ..errors import InvalidParams
from ..fixer import Replacement

if TYPE_CHECKING:
    from ..server import Glm5Server

APPLY_FIX = "glm5.applyFix"
FIX_TITLE = "Fix with model"


def register(ls: Glm5Server) -> None:
    @ls.feature(
        types.TEXT_DOCUMENT_CODE_ACTION,
        types.CodeActionOptions(code_action_kinds=[types.CodeActionKind.QuickFix], resolve_provider=True),
    )
    def code_action(ls: Glm5Server, params: types.CodeActionParams) -> list[types.CodeAction]:
        only = params.context.only
        if only is not None and not any(str(k).startswith(types.CodeActionKind.QuickFix.value) for k in only):
            return []
        uri = params.text_document.uri
        version = ls.snapshot(uri).version
        lazy = _resolves_edits(ls)
        actions = []
        for diagnostic in params.context.diagnostics:
            name = _undeclared_name(diagnostic)
            base = {"uri": uri, "version": version, "range": _range_json(diagnostic.range)}
            if name is not None:
                actions.append(_action(f"Declare `{name}`", diagnostic, {**base, "action": "declare", "name": name}, lazy))
            data = {**base, "action": "fix", "message": diagnostic.message, "name": name}
            actions.append(_action(FIX_TITLE, diagnostic, data, lazy))
        return actions

    @ls.feature(types.CODE_ACTION_RESOLVE)
    async def resolve(ls: Glm5Server, action: types.CodeAction) -> types.CodeAction:
        replacement = await compute(ls, action.data)
        action.edit = workspace_edit(ls, replacement)
        return action


async def compute(ls: Glm5Server, data: Any) -> Replacement:
    """The edit of an action, from its `data` (also the argument of `glm5.applyFix`)."""
    if not isinstance(data, Mapping) or data.get("action") not in ("declare", "fix"):
        raise InvalidParams(f"not a glm5 code action: {data!r}")
    uri = convert.parse_uri(data, "code action")
    version = data.get("version")
    if not isinstance(version, int):
        raise InvalidParams("code action: missing document version")
    snapshot, given = ls.snapshot(uri), _parse_range(data.get("range"))
    if snapshot.version == version:
        where = convert.range_in(snapshot.lines, ls.state.encoding, given, "code action range")
    else:  # the fixer answers ContentModified for an edited document
        where = ls.state.encoding.range_in(snapshot.lines, given)
    if data["action"] == "declare":
        name = data.get("name")
        if not isinstance(name, str) or not name.isidentifier():
            raise InvalidParams(f"code action: bad name {name!r}")
        return await ls.fixer.declare(uri, version, name, where)
    message = data.get("message")
    if not isinstance(message, str):
        raise InvalidParams("code action: missing diagnostic message")
    name = data.get("name")
    return await ls.fixer.fix(uri, version, where, message, name if isinstance(name, str) else None)


def workspace_edit(ls: Glm5Server, fix: Replacement) -> types.WorkspaceEdit:
    edit = types.TextEdit(range=ls.state.encoding.range_out(ls.state.lines(fix.uri), fix.range), new_text=fix.text)
    caps = ls.client_capabilities.workspace
    if caps and caps.workspace_edit and caps.workspace_edit.document_changes:
        document = types.OptionalVersionedTextDocumentIdentifier(uri=fix.uri, version=fix.version)
        return types.WorkspaceEdit(document_changes=[types.TextDocumentEdit(text_document=document, edits=[edit])])
    return types.WorkspaceEdit(changes={fix.uri: [edit]})


def _action(title: str, diagnostic: types.Diagnostic, data: dict[str, Any], lazy: bool) -> types.CodeAction:
    action = types.CodeAction(title=title, kind=types.CodeActionKind.QuickFix, diagnostics=[diagnostic])
    if lazy:
        action.data = data
    else:
        action.command = types.Command(title=title, command=APPLY_FIX, arguments=[data])
    return action


def _resolves_edits(ls: Glm5Server) -> bool:
    text_document = ls.client_capabilities.text_document
    code_action = text_document.code_action if text_document else None
    support = code_action.resolve_support if code_action else None
    return bool(support and "edit" in support.properties)


def _undeclared_name(diagnostic: types.Diagnostic) -> str | None:
    data = diagnostic.data
    if diagnostic.source == SOURCE and diagnostic.code == UNDECLARED and isinstance(data, Mapping):
        name = data.get("name")
        return name if isinstance(name, str) and name else None
    return None


def _range_json(r: types.Range) -> dict[str, dict[str, int]]:
    return {
        "start": {"line": r.start.line, "character": r.start.character},
        "end": {"line": r.end.line, "character": r.end.character},
    }


def _parse_range(raw: object) -> types.Range:
    """The range of a code action's data, in the client's units."""
    if not isinstance(raw, Mapping):
        raise InvalidParams("code action: missing range")
    start, end = (convert.parse_position(raw.get(key), f"range.{key}") for key in ("start", "end"))
    return types.Range(
        start=types.Position(line=start.line, character=start.character), end=types.Position(line=end.line, character=end.character)
    )

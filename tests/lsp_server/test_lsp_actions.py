"""Code actions with a scripted engine: "Declare `x`", "Fix with model" with checker feedback and
retries, the applyFix command, and workspace/configuration changes. One server for the module."""

from __future__ import annotations


import pytest
import pytest_asyncio
from lsprotocol import types
from pygls.exceptions import JsonRpcException

from lsp_harness import Session

pytestmark = pytest.mark.asyncio(loop_scope="module")

RULES = [
    ["task: declare `rate`", "0.2\nignored second line\n"],
    ["task: declare `never_ok`", "(\n"],
    ["a previous attempt was rejected", "    return total * 2\n"],
    ["task: fix: invalid syntax", "    return (total *\n"],
]


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def session(tmp_path_factory):
    root = tmp_path_factory.mktemp("actions")
    s = await Session.start_fake(root, {"rules": RULES}, {"diagnosticsDebounceMs": 10, "fixAttempts": 3})
    await s.wait_ready()
    yield s
    assert await s.stop() == 0


async def _diagnostics(session: Session, uri: str) -> list[types.Diagnostic]:
    return await session.wait_for(
        lambda: next((p.diagnostics for p in reversed(session.messages("textDocument/publishDiagnostics")) if p.uri == uri and p.diagnostics), None),
        what=f"diagnostics of {uri}",
    )


async def _actions(session: Session, uri: str, diagnostics: list[types.Diagnostic]) -> list[types.CodeAction]:
    return await session.client.text_document_code_action_async(
        types.CodeActionParams(
            text_document=types.TextDocumentIdentifier(uri=uri),
            range=diagnostics[0].range,
            context=types.CodeActionContext(diagnostics=diagnostics),
        )
    )


async def test_declare_inserts_a_checked_declaration_above_the_use(session: Session):
    path = session.root / "price.py"
    uri = session.open(path, "def price(total):\n    return total * rate\n")
    diagnostics = await _diagnostics(session, uri)
    assert [(d.source, d.code, d.data["name"]) for d in diagnostics] == [("glm5", "undeclared-symbol", "rate")]
    actions = await _actions(session, uri, diagnostics)
    assert [a.title for a in actions] == ["Declare `rate`", "Fix with model"]
    assert actions[0].edit is None  # computed lazily, on resolve
    resolved = await session.client.code_action_resolve_async(actions[0])
    change = resolved.edit.document_changes[0]
    assert change.text_document.uri == uri and change.text_document.version == 1
    assert [(e.range.start.line, e.range.start.character, e.range.end.line, e.new_text) for e in change.edits] == [
        (1, 0, 1, "    rate = 0.2\n")
    ]
    assert not path.exists()  # the server never writes user files
    assert [p["state"] for p in session.messages("glm5/status")][-2:] == ["busy", "ready"]


async def test_fix_with_model_retries_with_the_checker_message(session: Session):
    uri = session.open(session.root / "broken.py", "def double(total):\n    return total * * 2\n")
    foreign = types.Diagnostic(
        range=types.Range(start=types.Position(line=1, character=19), end=types.Position(line=1, character=20)),
        message="invalid syntax",
        source="some-linter",
    )
    actions = await _actions(session, uri, [foreign])
    assert [a.title for a in actions] == ["Fix with model"]
    resolved = await session.client.code_action_resolve_async(actions[0])
    edit = resolved.edit.document_changes[0].edits[0]
    assert (edit.range.start.line, edit.range.end.line, edit.new_text) == (1, 2, "    return total * 2\n")
    log = session.log_tail(400)
    assert "attempt 1 rejected: SyntaxError" in log and "attempt 2 passed" in log


async def test_no_passing_candidate_is_a_clear_error(session: Session):
    uri = session.open(session.root / "never.py", "print(never_ok)\n")
    diagnostics = await _diagnostics(session, uri)
    actions = await _actions(session, uri, diagnostics)
    with pytest.raises(JsonRpcException) as error:
        await session.client.code_action_resolve_async(actions[0])
    assert error.value.code == types.LSPErrorCodes.RequestFailed
    assert "no candidate passed the checks after 3 attempts" in error.value.message


async def test_apply_fix_command_applies_through_the_client(session: Session):
    uri = session.open(session.root / "cmd.py", "def price(total):\n    return total * rate\n")
    diagnostics = await _diagnostics(session, uri)
    actions = await _actions(session, uri, diagnostics)
    result = await session.command("glm5.applyFix", actions[0].data)
    assert result["applied"] is True and result["attempts"] == 1
    edit = session.applied_edits[-1].document_changes[0].edits[0]
    assert edit.new_text == "    rate = 0.2\n"


async def test_an_action_for_an_old_version_is_refused(session: Session):
    uri = session.open(session.root / "moving.py", "def price(total):\n    return total * rate\n")
    diagnostics = await _diagnostics(session, uri)
    actions = await _actions(session, uri, diagnostics)
    session.change(uri, "# edited\n", start=(0, 0))
    with pytest.raises(JsonRpcException) as error:
        await session.client.code_action_resolve_async(actions[0])
    assert error.value.code == types.LSPErrorCodes.ContentModified


async def test_configuration_problems_are_reported_and_valid_values_applied(session: Session):
    session.client.workspace_did_change_configuration(
        types.DidChangeConfigurationParams(settings={"glm5": {"maxTokens": 0, "diagnostics": False}})
    )
    await session.wait_for(
        lambda: any("'maxTokens'" in m.message for m in session.messages("window/showMessage")), what="warning"
    )
    uri = session.open(session.root / "quiet.py", "print(undefined_thing)\n")
    published = await session.wait_for(
        lambda: [p for p in session.messages("textDocument/publishDiagnostics") if p.uri == uri], what="publish"
    )
    assert list(published[-1].diagnostics) == []
    session.client.workspace_did_change_configuration(types.DidChangeConfigurationParams(settings={"glm5": {"diagnostics": True}}))
    assert (await _diagnostics(session, uri))[0].data["name"] == "undefined_thing"


async def test_an_added_workspace_folder_is_indexed(session: Session, tmp_path):
    extra = tmp_path / "extra"
    extra.mkdir()
    (extra / "tools.py").write_text("def far_away_tool():\n    return 1\n")
    uri = session.open(session.root / "caller.py", "far_away_tool()\n")
    where = types.DefinitionParams(text_document=types.TextDocumentIdentifier(uri=uri), position=types.Position(line=0, character=2))
    assert await session.client.text_document_definition_async(where) == []
    session.client.workspace_did_change_workspace_folders(
        types.DidChangeWorkspaceFoldersParams(
            event=types.WorkspaceFoldersChangeEvent(added=[types.WorkspaceFolder(uri=extra.as_uri(), name="extra")], removed=[])
        )
    )

    async def found() -> list[types.Location]:
        return await session.client.text_document_definition_async(where)

    for _ in range(200):
        locations = await found()
        if locations:
            break
        await session.wait_for(lambda: True, timeout=0.05)
    assert [loc.uri for loc in locations] == [(extra / "tools.py").as_uri()]


async def test_diagnostics_follow_the_latest_version(session: Session):
    uri = session.open(session.root / "follow.py", "print(zz)\n")
    session.change(uri, "zz = 1\n", start=(0, 0))

    def latest() -> types.PublishDiagnosticsParams | None:
        published = [p for p in session.messages("textDocument/publishDiagnostics") if p.uri == uri]
        return published[-1] if published and published[-1].version == 2 else None

    final = await session.wait_for(latest, what="diagnostics of version 2")
    assert list(final.diagnostics) == []
    assert all(p.version in (1, 2) for p in session.messages("textDocument/publishDiagnostics") if p.uri == uri)

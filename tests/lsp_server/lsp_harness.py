"""Drive a language server subprocess over stdio with pygls's `LanguageClient`.

`Session.start(argv)` spawns the server, initializes it with a capable client (work-done
progress, inline completion, resolvable code actions, versioned workspace edits, workspace
folders), answers the server's requests (progress create, applyEdit) and records every
notification, so tests can `await session.wait_for(...)` on them.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from lsprotocol import types

from lsp_server.convert import plain
from pygls.exceptions import JsonRpcException
from pygls.lsp.client import LanguageClient

REPO = Path(__file__).resolve().parents[2]
TESTS = Path(__file__).resolve().parent


def server_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), str(TESTS), env.get("PYTHONPATH", "")])
    env.update(extra or {})
    return env


def client_capabilities() -> types.ClientCapabilities:
    return types.ClientCapabilities(
        window=types.WindowClientCapabilities(work_done_progress=True),
        workspace=types.WorkspaceClientCapabilities(
            workspace_folders=True,
            apply_edit=True,
            workspace_edit=types.WorkspaceEditClientCapabilities(document_changes=True),
        ),
        text_document=types.TextDocumentClientCapabilities(
            inline_completion=types.InlineCompletionClientCapabilities(),
            code_action=types.CodeActionClientCapabilities(
                resolve_support=types.ClientCodeActionResolveOptions(properties=["edit"]),
                data_support=True,
            ),
            synchronization=types.TextDocumentSyncClientCapabilities(did_save=True),
        ),
    )


class Session:
    def __init__(self, client: LanguageClient, log_file: Path | None) -> None:
        self.client = client
        self.log_file = log_file
        self.notifications: list[tuple[str, Any]] = []
        self.applied_edits: list[types.WorkspaceEdit] = []
        self.versions: dict[str, int] = {}
        self.initialize_result: types.InitializeResult | None = None
        self.root: Path | None = None  # the workspace of `start_fake`

    @classmethod
    async def start(
        cls,
        argv: list[str],
        roots: list[Path],
        init_options: dict[str, Any] | None = None,
        env: dict[str, str] | None = None,
        log_file: Path | None = None,
        capabilities: types.ClientCapabilities | None = None,
    ) -> Session:
        client = LanguageClient("glm5-test-client", "1")
        session = cls(client, log_file)
        session._listen()
        await client.start_io(*argv, env=server_env(env), cwd=str(REPO))
        folders = [types.WorkspaceFolder(uri=r.as_uri(), name=r.name) for r in roots]
        session.initialize_result = await client.initialize_async(
            types.InitializeParams(
                capabilities=capabilities or client_capabilities(),
                root_uri=folders[0].uri if folders else None,
                workspace_folders=folders or None,
                initialization_options=init_options,
                process_id=os.getpid(),
            )
        )
        client.initialized(types.InitializedParams())
        return session

    @classmethod
    async def start_fake(
        cls, root: Path, fake: dict[str, Any], init_options: dict[str, Any] | None = None,
        capabilities: types.ClientCapabilities | None = None,
    ) -> Session:
        """`fake_lsp_server.py` (scripted engine, configured by `fake`) on the workspace `root`,
        logging next to it."""
        log = root.parent / f"{root.name}.log"
        session = await cls.start(
            [sys.executable, str(TESTS / "fake_lsp_server.py")], [root], init_options=init_options,
            env={"GLM5_FAKE": json.dumps({**fake, "log": str(log)}), "GLM5_LSP_CACHE_DIR": str(root.parent / f"{root.name}-cache")},
            log_file=log, capabilities=capabilities,
        )
        session.root = root
        return session

    def create(self, name: str, text: str) -> str:
        """Write `name` under the workspace root, open it and return its uri."""
        assert self.root is not None, "create needs a session from start_fake"
        path = self.root / name
        path.write_text(text)
        return self.open(path)

    def _listen(self) -> None:
        client = self.client

        def record(method: str) -> Callable[[Any], None]:
            def handler(params: Any) -> None:
                self.notifications.append((method, plain(params) if method.startswith("glm5/") else params))

            return handler

        for method in (
            "$/progress", "glm5/status", "glm5/inlineCompletionProgress", "textDocument/publishDiagnostics",
            "window/showMessage", "window/logMessage",
        ):
            client.feature(method)(record(method))

        @client.feature(types.WINDOW_WORK_DONE_PROGRESS_CREATE)
        def create_progress(params: types.WorkDoneProgressCreateParams) -> None:
            self.notifications.append(("window/workDoneProgress/create", params))

        @client.feature(types.WORKSPACE_APPLY_EDIT)
        def apply_edit(params: types.ApplyWorkspaceEditParams) -> types.ApplyWorkspaceEditResult:
            self.applied_edits.append(params.edit)
            return types.ApplyWorkspaceEditResult(applied=True)

    def messages(self, method: str) -> list[Any]:
        return [params for m, params in self.notifications if m == method]

    def progress(self) -> list[dict[str, Any]]:
        """The values of `$/progress` notifications, as plain dicts (kind, title, percentage...)."""
        values = []
        for params in self.messages("$/progress"):
            value = params.value
            values.append(value if isinstance(value, dict) else self.client.protocol._converter.unstructure(value))
        return values

    async def wait_for(self, predicate: Callable[[], Any], timeout: float = 30.0, what: str = "condition") -> Any:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = predicate()
            if value:
                return value
            await asyncio.sleep(0.02)
        raise AssertionError(f"timed out after {timeout} s waiting for {what}; log:\n{self.log_tail()}")

    async def wait_ready(self, timeout: float = 60.0) -> None:
        def state() -> str | None:
            states = [p["state"] for p in self.messages("glm5/status") if p["state"] in ("ready", "error")]
            return states[-1] if states else None

        final = await self.wait_for(state, timeout, "glm5/status ready")
        assert final == "ready", f"server reported error: {self.messages('glm5/status')[-1]}"

    def open(self, path: Path, text: str | None = None, language_id: str = "python") -> str:
        uri = path.as_uri()
        self.versions[uri] = 1
        self.client.text_document_did_open(
            types.DidOpenTextDocumentParams(
                text_document=types.TextDocumentItem(
                    uri=uri, language_id=language_id, version=1, text=path.read_text() if text is None else text
                )
            )
        )
        return uri

    def change(self, uri: str, text: str, start: tuple[int, int] | None = None, end: tuple[int, int] | None = None) -> int:
        """Insert/replace `text` at [start, end) (both default to a full replacement)."""
        self.versions[uri] = version = self.versions.get(uri, 0) + 1
        if start is None:
            change: Any = types.TextDocumentContentChangeWholeDocument(text=text)
        else:
            end = end or start
            change = types.TextDocumentContentChangePartial(
                range=types.Range(start=types.Position(*start), end=types.Position(*end)), text=text
            )
        self.client.text_document_did_change(
            types.DidChangeTextDocumentParams(
                text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=version), content_changes=[change]
            )
        )
        return version

    def inline_request(self, uri: str, line: int, character: int, msg_id: int | str | None = None, automatic: bool = True):
        """Send inlineCompletion; returns the (concurrent) future of its response."""
        trigger = types.InlineCompletionTriggerKind.Automatic if automatic else types.InlineCompletionTriggerKind.Invoked
        params = types.InlineCompletionParams(
            context=types.InlineCompletionContext(trigger_kind=trigger),
            text_document=types.TextDocumentIdentifier(uri=uri),
            position=types.Position(line=line, character=character),
        )
        return self.client.protocol.send_request(types.TEXT_DOCUMENT_INLINE_COMPLETION, params, msg_id=msg_id)

    async def inline(self, uri: str, line: int, character: int, automatic: bool = False) -> types.InlineCompletionList:
        return await asyncio.wrap_future(self.inline_request(uri, line, character, automatic=automatic))

    def write_raw(self, body: bytes) -> None:
        """Send bytes as one message body, bypassing the client's typing (for malformed input)."""
        self.client._server.stdin.write(b"Content-Length: %d\r\n\r\n%s" % (len(body), body))

    async def raw_request(self, msg_id: str, method: str, params: Any) -> Any:
        """A request whose params the client would refuse to type; the response as the client sees it."""
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        self.client.protocol._request_futures[msg_id] = future
        self.write_raw(json.dumps({"jsonrpc": "2.0", "id": msg_id, "method": method, "params": params}).encode())
        return await asyncio.wrap_future(future)

    async def raw_error(self, body: bytes) -> JsonRpcException:
        """Send an undecodable message; the error response (id null) the server answers with."""
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        self.client.protocol._request_futures[None] = future  # type: ignore[index]
        self.write_raw(body)
        try:
            await asyncio.wait_for(asyncio.wrap_future(future), 10)
        except JsonRpcException as exc:
            return exc
        raise AssertionError(f"no error response to {body!r}")

    async def command(self, name: str, *arguments: Any) -> Any:
        return await self.client.workspace_execute_command_async(
            types.ExecuteCommandParams(command=name, arguments=list(arguments))
        )

    async def stats(self, recent: int = 0) -> dict[str, Any]:
        return await self.command("glm5.stats", {"recent": recent})

    def log_tail(self, lines: int = 40) -> str:
        if self.log_file is None or not self.log_file.exists():
            return "(no log file)"
        return "\n".join(self.log_file.read_text(errors="replace").splitlines()[-lines:])

    async def stop(self) -> int | None:
        """shutdown + exit; returns the server's exit code."""
        server = self.client._server
        try:
            await asyncio.wait_for(self.client.shutdown_async(None), 20)
            self.client.exit(None)
        except (JsonRpcException, RuntimeError, asyncio.TimeoutError):
            pass
        if server is not None:
            try:
                await asyncio.wait_for(server.wait(), 20)
            except asyncio.TimeoutError:
                server.kill()
        await self.client.stop()
        return server.returncode if server is not None else None


def python_server_argv(*args: str) -> list[str]:
    return [sys.executable, *args]

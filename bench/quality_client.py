"""An LSP client for the quality benchmark: one `lsp_server --stdio` per configuration (row).

Each server runs with one thread, its own KV-cache directory (so no row reuses another's cached
prompts), single-line completions, no debounce, no warm-up and no diagnostics; the row's settings
go in `initializationOptions`. `complete(item)` moves the server's workspace to the item's root
when it changes (and waits for the index), opens the blanked file, asks for an inline completion
at the start of the blanked line (trigger Invoked, or Automatic for a row that abstains), closes the file and returns the text and the
wall-clock latency of the request.
"""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from lsprotocol import types
from pygls.lsp.client import LanguageClient

from bench.quality_sets import Item
from context.languages import language_for

REPO = Path(__file__).resolve().parents[1]
BASE_OPTIONS = {
    "multiline": "never", "debounceMs": 0, "warmup": False, "diagnostics": False, "streaming": False,
    "singleLineMaxTokens": 48, "cacheSize": 0,
}


class RowServer:
    def __init__(self, name: str, client: LanguageClient, cache_dir: tempfile.TemporaryDirectory) -> None:
        self.name = name
        self.client = client
        self._cache_dir = cache_dir
        self.root: Path | None = None
        self.status: list[Any] = []
        self._ids = 0

    @classmethod
    async def start(cls, name: str, model: str, options: dict[str, Any], log_dir: Path) -> RowServer:
        client = LanguageClient(f"bench-quality-{name}", "1")
        cache_dir = tempfile.TemporaryDirectory(prefix="glm5-quality-kv-")
        server = cls(name, client, cache_dir)
        client.feature("glm5/status")(lambda params: server.status.append(params))
        client.feature(types.WINDOW_WORK_DONE_PROGRESS_CREATE)(lambda params: None)
        client.feature(types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS)(lambda params: None)
        env = {**os.environ, "OMP_NUM_THREADS": "1", "GLM5_LSP_CACHE_DIR": cache_dir.name, "PYTHONPATH": str(REPO)}
        log = log_dir / f"{name.replace(' ', '_')}.log"
        await client.start_io(sys.executable, "-m", "lsp_server", "--stdio", "--model", model, "--log-file", str(log), cwd=str(REPO), env=env)
        await client.initialize_async(types.InitializeParams(
            capabilities=types.ClientCapabilities(
                text_document=types.TextDocumentClientCapabilities(inline_completion=types.InlineCompletionClientCapabilities()),
            ),
            workspace_folders=[],
            initialization_options={**BASE_OPTIONS, **options},
        ))
        client.initialized(types.InitializedParams())
        return server

    async def wait_ready(self, timeout: float = 300.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            states = [getattr(s, "state", None) or s.get("state") for s in self.status]
            if "ready" in states:
                return
            if "error" in states:
                raise SystemExit(f"{self.name}: server failed to start: {self.status[-1]}")
            await asyncio.sleep(0.05)
        raise SystemExit(f"{self.name}: server not ready after {timeout} s")

    async def use_root(self, root: Path) -> None:
        if root == self.root:
            return
        removed = [types.WorkspaceFolder(uri=self.root.as_uri(), name=self.root.name)] if self.root else []
        added = [types.WorkspaceFolder(uri=root.as_uri(), name=root.name)]
        self.client.workspace_did_change_workspace_folders(types.DidChangeWorkspaceFoldersParams(
            event=types.WorkspaceFoldersChangeEvent(added=added, removed=removed)
        ))
        self.root = root
        target = str(root.resolve())
        for _ in range(600):
            stats = await self.command("glm5.stats")
            index = stats.get("index") or {}
            if index.get("roots") == [target] and index.get("files", 0) > 0:
                return
            await asyncio.sleep(0.05)
        raise SystemExit(f"{self.name}: the index of {root} was not built")

    async def command(self, name: str, *args: Any) -> Any:
        result = await self.client.workspace_execute_command_async(types.ExecuteCommandParams(command=name, arguments=list(args)))
        return self.client.protocol._converter.unstructure(result) if not isinstance(result, dict | list | None) else result

    async def complete(self, item: Item, automatic: bool = False) -> tuple[str, float]:
        """(completion text, seconds) for `item`, asked at its cursor (the start of its blanked
        line, or after its typed part), as an explicit request or an `automatic` one."""
        await self.use_root(item.root)
        uri = item.path.resolve().as_uri()
        self.client.text_document_did_open(types.DidOpenTextDocumentParams(
            text_document=types.TextDocumentItem(uri=uri, language_id=_language_id(item), version=1, text=item.text)
        ))
        started = time.perf_counter()
        result = await self.client.text_document_inline_completion_async(types.InlineCompletionParams(
            context=types.InlineCompletionContext(
                trigger_kind=types.InlineCompletionTriggerKind.Automatic if automatic else types.InlineCompletionTriggerKind.Invoked
            ),
            text_document=types.TextDocumentIdentifier(uri=uri),
            position=types.Position(line=item.line, character=_character(item)),
        ))
        elapsed = time.perf_counter() - started
        self.client.text_document_did_close(types.DidCloseTextDocumentParams(text_document=types.TextDocumentIdentifier(uri=uri)))
        items = result.items if isinstance(result, types.InlineCompletionList) else (result or [])
        text = items[0].insert_text if items else ""
        return (text if isinstance(text, str) else text.value), elapsed

    async def explain(self, item: Item) -> dict[str, Any]:
        """`glm5.explainContext` at the item's hole (the completion run, with its candidates)."""
        await self.use_root(item.root)
        uri = item.path.resolve().as_uri()
        self.client.text_document_did_open(types.DidOpenTextDocumentParams(
            text_document=types.TextDocumentItem(uri=uri, language_id=_language_id(item), version=1, text=item.text)
        ))
        try:
            return await self.command("glm5.explainContext", {"uri": uri, "position": {"line": item.line, "character": _character(item)}})
        finally:
            self.client.text_document_did_close(types.DidCloseTextDocumentParams(text_document=types.TextDocumentIdentifier(uri=uri)))

    async def stop(self) -> None:
        try:
            await asyncio.wait_for(self.client.shutdown_async(None), 30)
            self.client.exit(None)
            await asyncio.wait_for(self.client.stop(), 30)
        except (TimeoutError, ConnectionError, RuntimeError):
            pass
        self._cache_dir.cleanup()


def _language_id(item: Item) -> str:
    """The item's LSP languageId, from its file's extension (Python where none is known)."""
    language = language_for(None, item.path)
    return language.name if language is not None else "python"


def _character(item: Item) -> int:
    """The item's cursor column in UTF-16 code units, as LSP counts."""
    return len(item.typed.encode("utf-16-le")) // 2

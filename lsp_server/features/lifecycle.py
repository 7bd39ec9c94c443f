"""initialize / initialized / shutdown.

- initialize: read `initializationOptions` (settings, `streaming`, `model`), the workspace
  roots (folders, else rootUri/rootPath) and the position encoding pygls negotiated. Bad option values are reported to the user and the
  defaults kept; the server still starts.
- initialized: start loading the model at once (so completions wait for it rather than fail),
  then run the background start-up (index, watcher, warm-up) as a task.
- shutdown: stop the start-up task, the watcher and the engine thread.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import TYPE_CHECKING

from context.document import path_from_uri
from lsprotocol import types

from ..encoding import UTF16, PositionEncoding
from ..settings import parse_settings
from ..startup import locate_model, run_start_up

if TYPE_CHECKING:
    from ..server import Glm5Server

log = logging.getLogger(__name__)


def register(ls: Glm5Server) -> None:
    @ls.feature(types.INITIALIZE)
    def initialize(ls: Glm5Server, params: types.InitializeParams) -> None:
        ls.settings, problems = parse_settings(params.initialization_options, ls.settings)
        ls.cache.reset(ls.settings.cache_size)
        for problem in problems:
            ls.window_show_message(types.ShowMessageParams(type=types.MessageType.Warning, message=f"glm5: {problem}"))
        ls.state.set_roots(workspace_roots(params))
        ls.state.encoding = PositionEncoding(str(ls.workspace.position_encoding or UTF16))
        log.info("initialize: roots %s, settings %s", ls.roots, ls.settings)

    @ls.feature(types.INITIALIZED)
    def initialized(ls: Glm5Server, params: types.InitializedParams) -> None:
        if ls.startup_task is not None:
            log.warning("initialized: start-up already ran; ignored")
            return
        ls.engine.start_loading(lambda: locate_model(ls), ls.runtime_options)
        ls.startup_task = ls.background(run_start_up(ls))

    @ls.feature(types.SHUTDOWN)
    async def shutdown(ls: Glm5Server, params: None) -> None:
        if ls.startup_task is not None:
            ls.startup_task.cancel()
        await asyncio.to_thread(ls.shutdown_runtime)


def workspace_roots(params: types.InitializeParams) -> list[Path]:
    uris = [f.uri for f in params.workspace_folders or []]
    if not uris and params.root_uri:
        uris = [params.root_uri]
    paths = [path_from_uri(uri) for uri in uris]
    if not uris and params.root_path:
        paths = [params.root_path]
    return [Path(p) for p in paths if p]

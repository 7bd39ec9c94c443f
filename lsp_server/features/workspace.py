"""Multi-root workspace folders and `workspace/didChangeConfiguration`.

- didChangeWorkspaceFolders: re-index the new set of roots in the background (the old index
  keeps serving until the new one is ready), then restart the watcher on them.
- didChangeConfiguration: settings from `settings.glm5` (or flat `settings`); invalid values
  are reported and the old ones kept; a changed `model` needs a restart (said so, not applied).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING

from context.document import path_from_uri
from lsprotocol import types

from ..settings import parse_settings, section
from ..startup import build_index, open_kv_store

if TYPE_CHECKING:
    from ..server import Glm5Server

log = logging.getLogger(__name__)


def register(ls: Glm5Server) -> None:
    @ls.feature(types.WORKSPACE_DID_CHANGE_WORKSPACE_FOLDERS)
    def did_change_folders(ls: Glm5Server, params: types.DidChangeWorkspaceFoldersParams) -> None:
        removed = {Path(p) for p in (path_from_uri(f.uri) for f in params.event.removed) if p}
        added = [Path(p) for p in (path_from_uri(f.uri) for f in params.event.added) if p]
        roots = [r for r in ls.roots if r not in removed] + [r for r in added if r not in ls.roots]
        if not ls.state.set_roots(roots):
            return
        log.info("workspace roots now %s", roots)
        ls.background(_reindex(ls, roots))

    @ls.feature(types.WORKSPACE_DID_CHANGE_CONFIGURATION)
    def did_change_configuration(ls: Glm5Server, params: types.DidChangeConfigurationParams) -> None:
        old = ls.settings
        ls.settings, problems = parse_settings(section(params.settings), old)
        if ls.settings.model != old.model and ls.cli_model is None:
            problems.append("a new model path takes effect after the server restarts")
        if ls.settings.cache_size != old.cache_size:
            ls.cache.reset(ls.settings.cache_size)
        elif ls.settings != old:
            ls.cache.clear()
        if ls.settings.diagnostics != old.diagnostics:
            ls.analysis.refresh_all()
        for problem in problems:
            ls.window_show_message(types.ShowMessageParams(type=types.MessageType.Warning, message=f"glm5: {problem}"))


async def _reindex(ls: Glm5Server, roots: list[Path]) -> None:
    with ls.busy("re-indexing the workspace"):
        await build_index(ls, roots)
        await open_kv_store(ls)  # the KV store follows the workspace: a new set of roots, a new store

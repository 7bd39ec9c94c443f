"""LSP features, one per module. Each module has `register(ls)` that attaches its handlers.

Handlers are thin: they validate and convert LSP types, then call the server's state and
services. Typed errors (`lsp_server.errors`) raised here become JSON-RPC error responses.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..server import Glm5Server


def register_all(ls: Glm5Server) -> None:
    from . import (
        attention,
        code_actions,
        commands,
        completion,
        documents,
        inline_completion,
        lifecycle,
        navigation,
        telemetry,
        workspace,
    )

    for module in (lifecycle, documents, inline_completion, completion, code_actions, commands, attention, navigation, telemetry, workspace):
        module.register(ls)

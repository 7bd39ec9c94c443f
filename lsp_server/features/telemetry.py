"""`glm5/didShowCompletion`, `glm5/didAcceptCompletion`, `glm5/didRejectCompletion`.

Client -> server notifications `{completionId}`; the counts stay on this machine and are only
reported back through `glm5.stats`. Malformed notifications are logged and ignored.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ..convert import plain

if TYPE_CHECKING:
    from ..server import Glm5Server

log = logging.getLogger(__name__)

EVENTS = {
    "glm5/didShowCompletion": "shown",
    "glm5/didAcceptCompletion": "accepted",
    "glm5/didRejectCompletion": "rejected",
}


def register(ls: Glm5Server) -> None:
    for method, event in EVENTS.items():
        ls.feature(method)(_handler(method, event))


def _handler(method: str, event: str):
    def handle(ls: Glm5Server, params: Any) -> None:
        params = plain(params)
        completion_id = params.get("completionId") if isinstance(params, Mapping) else None
        if not isinstance(completion_id, str | int) or isinstance(completion_id, bool):
            log.warning("%s without a completionId: ignored (%r)", method, params)
            return
        ls.stats.telemetry_event(event, str(completion_id))

    handle.__name__ = f"telemetry_{event}"
    return handle

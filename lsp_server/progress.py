"""Server-initiated work-done progress (`$/progress`) and the `glm5/status` notification.

Role: long background work (indexing, model load, warm-up) is shown in the editor:
`window/workDoneProgress/create`, then begin / report / end on `$/progress`. Clients that do
not declare `window.workDoneProgress` get nothing on that channel; every client gets
`glm5/status {state, progress?, message?}`.

Invariants: a progress that began always ends (also when the work fails); reports are
throttled to whole-percent changes so a 10 000-file index does not flood the client, and
`throttled` keeps a fast worker from waking the event loop for each item (at most one report per
interval, and always the last).
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from lsprotocol import types

if TYPE_CHECKING:
    from pygls.lsp.server import LanguageServer

log = logging.getLogger(__name__)

STATUS = "glm5/status"

Progress = Callable[[int, int, str], None]  # (items done, items total, current item)


def throttled(report: Progress, interval_s: float, clock: Callable[[], float] = time.monotonic) -> Progress:
    """`report`, passed on at most once per `interval_s` and always for the last item (done ==
    total); the first item goes through at once."""
    last = [-float("inf")]

    def progress(done: int, total: int, item: str) -> None:
        now = clock()
        if done < total and now - last[0] < interval_s:
            return
        last[0] = now
        report(done, total, item)

    return progress


def send_status(ls: LanguageServer, state: str, message: str | None = None, progress: float | None = None) -> None:
    """`glm5/status`; state is warming | ready | busy | error."""
    ls.protocol.notify(STATUS, status_params(state, message, progress))


def status_params(state: str, message: str | None = None, progress: float | None = None) -> dict[str, Any]:
    """The params of a `glm5/status` notification."""
    params: dict[str, Any] = {"state": state}
    if message is not None:
        params["message"] = message
    if progress is not None:
        params["progress"] = round(progress, 3)
    return params


class WorkDone:
    """`async with WorkDone(ls, "Indexing") as work: work.report(0.5, "a.py")`."""

    def __init__(self, ls: LanguageServer, title: str) -> None:
        self._ls = ls
        self.title = title
        self.token: str | None = None
        self._percent = -1

    async def __aenter__(self) -> WorkDone:
        caps = self._ls.client_capabilities.window
        if caps is None or not caps.work_done_progress:
            return self
        token = f"glm5-{uuid.uuid4().hex[:12]}"
        try:
            await self._ls.work_done_progress.create_async(token)
        except Exception as exc:  # the client refused or failed: show no progress, keep working
            log.warning("window/workDoneProgress/create refused: %s", exc)
            return self
        self.token = token
        self._ls.work_done_progress.begin(token, types.WorkDoneProgressBegin(title=self.title, percentage=0))
        return self

    def report(self, fraction: float, message: str | None = None) -> None:
        percent = max(0, min(100, int(fraction * 100)))
        if self.token is None or percent == self._percent:
            return
        self._percent = percent
        self._ls.work_done_progress.report(self.token, types.WorkDoneProgressReport(percentage=percent, message=message))

    async def __aexit__(self, exc_type: object, exc: BaseException | None, tb: object) -> None:
        if self.token is None:
            return
        message = "done" if exc is None else f"failed: {exc}"
        self._ls.work_done_progress.end(self.token, types.WorkDoneProgressEnd(message=message))
        self.token = None

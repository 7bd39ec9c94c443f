"""In-flight completion jobs, one per document: cancel-previous and stale-version aborts.

Role: a completion handler registers a `Job` for its document before doing any work. A newer
job for the same document and channel (inline completion, or completion items) supersedes it; a didChange to a newer version, or a didClose, makes
it stale. Either way the job's task is cancelled, which aborts its engine request between
decode steps (see `engine_client`), and the handler answers with the job's typed error.

Invariants:
- At most one live job per (document uri, channel).
- A job is cancelled at most once, and its `reason` is set before its task is cancelled, so
  the handler can tell "superseded"/"stale" from a client `$/cancelRequest` (reason None).
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

from .errors import Glm5Error, StaleRequest, Superseded

_ids = itertools.count(1)


@dataclass(eq=False, slots=True)
class Job:
    uri: str
    version: int
    task: asyncio.Task[object] | None
    trace_id: str = field(default_factory=lambda: f"c{next(_ids)}")
    reason: Glm5Error | None = None

    def cancel(self, reason: Glm5Error) -> None:
        if self.reason is not None:
            return
        self.reason = reason
        if self.task is not None:
            self.task.cancel()


class CompletionJobs:
    def __init__(self) -> None:
        self._live: dict[tuple[str, str], Job] = {}
        self.superseded = 0
        self.stale = 0

    @asynccontextmanager
    async def run(self, uri: str, version: int, channel: str = "inline") -> AsyncIterator[Job]:
        """Register a job for the current task; its cancellation becomes its typed error."""
        key = (uri, channel)
        job = self._begin(key, version)
        try:
            yield job
        except asyncio.CancelledError as exc:
            if job.reason is None:
                raise
            raise job.reason from exc
        finally:
            if self._live.get(key) is job:
                del self._live[key]

    def _begin(self, key: tuple[str, str], version: int) -> Job:
        previous = self._live.get(key)
        if previous is not None:
            self.superseded += 1
            previous.cancel(Superseded(key[0]))
        job = Job(key[0], version, asyncio.current_task())
        self._live[key] = job
        return job

    def document_changed(self, uri: str, version: int | None) -> None:
        """Abort the document's job if it was made for an older version (or the doc closed)."""
        for (job_uri, _), job in list(self._live.items()):
            if job_uri == uri and job.reason is None and (version is None or job.version < version):
                self.stale += 1
                job.cancel(StaleRequest(uri, job.version, version))

    def live(self, uri: str, channel: str = "inline") -> Job | None:
        return self._live.get((uri, channel))

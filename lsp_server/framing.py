"""The stdio input stream, re-synchronised on message headers after a Content-Length mismatch.

Role: pygls reads a header line, matches it against `Content-Length: N\\r\\n` in full, then reads
N bytes. When a client declares fewer bytes than it sends, the rest of that body is read as the
start of the next header line (a body has no line break), so the next message's
`Content-Length` line no longer matches and that message, and every one after it sent the same
way, is lost. `ResyncingInput` hands pygls each header line from its `Content-Length:` on, so
the server is back in step at the next message.

Invariant: bodies are passed through untouched (`read`); only a header line that carries
`Content-Length:` after other bytes is shortened, and only while pygls reads header lines.
"""

from __future__ import annotations

import logging
from typing import BinaryIO

log = logging.getLogger(__name__)

HEADER = b"Content-Length:"


class ResyncingInput:
    """A binary input stream for pygls's reader (`readline`, `read`) over `stream`."""

    def __init__(self, stream: BinaryIO) -> None:
        self._stream = stream

    def readline(self) -> bytes:
        line = self._stream.readline()
        at = line.find(HEADER)
        if at > 0:
            log.warning("%d stray bytes before a message header skipped (a Content-Length mismatch?)", at)
            return line[at:]
        return line

    def read(self, n: int = -1) -> bytes:
        return self._stream.read(n)

"""Typed errors of the language server, each mapped to one JSON-RPC error code.

Role: handlers raise these; pygls turns any `JsonRpcException` raised by a handler into the
error response of that request, so the mapping happens once, at the boundary.

Invariants:
- Every error a user can trigger with bad input is one of these, with a message that names
  the input (uri, position, command) and what was wrong with it.
- A failing request never stops the server: these are answers, not crashes.
"""

from __future__ import annotations

import logging
import traceback

from lsprotocol.types import ErrorCodes, LSPErrorCodes
from pygls.exceptions import JsonRpcException


class Glm5Error(JsonRpcException):
    """Base class: a request failed for a reason the client should be told about."""

    CODE = LSPErrorCodes.RequestFailed.value
    MESSAGE = "request failed"


class InvalidParams(Glm5Error):
    """The request's parameters are malformed (missing field, wrong type, unknown command)."""

    CODE = ErrorCodes.InvalidParams.value
    MESSAGE = "invalid params"


class DocumentNotOpen(Glm5Error):
    """The request names a document the client never opened (or already closed)."""

    CODE = ErrorCodes.InvalidParams.value
    MESSAGE = "document is not open"

    def __init__(self, uri: str) -> None:
        super().__init__(f"document is not open: {uri}")
        self.uri = uri


class UnsupportedDocument(Glm5Error):
    """The document's language (or content) is one the server cannot work on."""

    CODE = LSPErrorCodes.RequestFailed.value


class StaleRequest(Glm5Error):
    """The document changed after the request was made; its answer would be for old text."""

    CODE = LSPErrorCodes.ContentModified.value

    def __init__(self, uri: str, version: int, current: int | None) -> None:
        super().__init__(f"{uri}: document changed (request for version {version}, now {current})")


class Superseded(Glm5Error):
    """A newer completion request for the same document replaced this one (cancel-previous)."""

    CODE = LSPErrorCodes.ServerCancelled.value

    def __init__(self, uri: str) -> None:
        super().__init__(f"{uri}: superseded by a newer completion request")


class ModelUnavailable(Glm5Error):
    """No model could be loaded (none configured, or loading failed)."""

    CODE = LSPErrorCodes.RequestFailed.value


class GenerationFailed(Glm5Error):
    """The engine reported an error for this request."""

    CODE = LSPErrorCodes.RequestFailed.value


class NoPassingFix(Glm5Error):
    """Every candidate fix the model produced failed the checker."""

    CODE = LSPErrorCodes.RequestFailed.value


class ExpectedOutcomeFilter(logging.Filter):
    """Drops pygls's error-with-traceback log of requests that ended as designed: superseded by
    a newer request or made stale by an edit (they happen on most keystrokes), and its traceback
    of each message whose params did not structure (`lsp_server.protocol` logs one line naming
    the fields at fault instead)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.name == "pygls.protocol.json_rpc" and str(record.msg).startswith("Unable to deserialize message"):
            return False
        error = record.exc_info[1] if record.exc_info else None
        return not isinstance(error, Superseded | StaleRequest)


class BoundedRecordFilter(logging.Filter):
    """Keeps the log's size proportional to the number of messages, not to their size: a record
    longer than `limit` characters (a 1 MB string echoed in an error, pygls's multi-kilobyte
    traceback of every undecodable message) keeps its head and its last lines, with the count of
    what was cut in between."""

    def __init__(self, limit: int = 2_000) -> None:
        super().__init__()
        self.limit = limit

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if len(message) > self.limit:
            head, tail = message[: self.limit // 2], message[-(self.limit // 4) :]
            record.msg, record.args = f"{head} [... {len(message) - len(head) - len(tail)} characters cut ...] {tail}", ()
        if record.exc_info and record.exc_text is None:
            record.exc_text = _bounded_traceback(record.exc_info, self.limit)
        return True


def _bounded_traceback(exc_info, limit: int) -> str:
    text = "".join(traceback.format_exception(*exc_info)).rstrip("\n")
    return text if len(text) <= limit else f"[... {len(text) - limit} characters cut ...]\n{text[-limit:]}"

"""Typed failures of a remote engine, each with a message fit to show the user.

Role: the HTTP layer turns transport and status failures into these; the remote engine turns
them into `GenerationResult(finish_reason=ERROR, error=message)`, which the language server
reports as a JSON-RPC error. None of them stops the server.

Invariant: no message ever contains the API key (only the name of its variable).
"""

from __future__ import annotations


class RemoteError(Exception):
    """Base class: `message` says what failed and what to do about it."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class AuthError(RemoteError):
    """401/403: the endpoint refused the credentials (or got none)."""


class EndpointUnavailable(RemoteError):
    """The endpoint could not be reached, dropped the connection, or stayed busy (429/503)."""


class RequestTimeout(RemoteError):
    """The request did not finish within `timeoutMs` (retries included)."""


class ProtocolViolation(RemoteError):
    """The endpoint answered with something that is not the OpenAI completions protocol."""


class RequestRejected(RemoteError):
    """A 4xx/5xx answer other than auth and overload: the endpoint refused this request."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


class Unsupported(RemoteError, NotImplementedError):
    """The endpoint does not offer what this call needs (e.g. prompt logprobs for scoring); a
    `NotImplementedError`, as the engine seam says for what an engine cannot do."""

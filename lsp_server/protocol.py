"""The JSON-RPC/LSP protocol layer: pygls's, with our document sync and bad-input handling.

Role:
- Document sync notifications go straight to the server's handlers, which keep the one copy
  of each document (`context.document.Document`, re-parsed incrementally). pygls's own
  workspace copy is not kept, so a 5 MB file is held once and an edit is applied once.
- Params are structured strictly (`lsp_server.structure`: a JSON value of the wrong type is
  refused, never coerced). A request whose params cannot be structured is answered with
  InvalidParams for its id, naming the fields at fault (pygls would drop it, leaving the client
  waiting forever); such a notification (an edit among them) is logged with the same reasons
  and dropped before any handler sees it. Undecodable JSON is answered with a ParseError (id
  null), a message that is not a JSON-RPC object with InvalidRequest.
- The lifecycle as LSP says (pygls drops such requests unanswered): a request before
  `initialize` gets ServerNotInitialized (notifications then are dropped, `exit` excepted), a
  request after `shutdown` gets InvalidRequest, a second `initialize` InvalidRequest too.

- A handler's future leaves pygls's table of pending futures when it finishes. pygls removes
  only a request's own future (when it answers); the futures of notifications and of the user
  handlers that its built-in generator handlers (`didChange`, `executeCommand`, ...) run stay
  there for good, one per message: a leak of ~0.4 KB per edit that a cancel storm measured.

Invariant: every request gets exactly one response; no input stops the read loop.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable, Generator
from dataclasses import dataclass
from functools import partial
from typing import Any

from cattrs import BaseValidationError, transform_error
from cattrs.v import format_exception
from lsprotocol import types
from pygls.exceptions import JsonRpcException
from pygls.protocol import LanguageServerProtocol
from pygls.protocol.language_server import lsp_method

from .structure import WrongType

log = logging.getLogger(__name__)


REASONS_SHOWN = 4  # field errors named in an InvalidParams message (a fuzzed message may have hundreds)


@dataclass(frozen=True, slots=True)
class _UndecodableRequest:
    """A request whose params did not match the method's schema."""

    id: int | str
    method: str
    reasons: str


@dataclass(frozen=True, slots=True)
class _DroppedNotification:
    """A notification whose params did not match the method's schema: logged, never handled."""

    method: str


def _reason(error: BaseException, kind: type | None) -> str:
    if isinstance(error, WrongType):
        return str(error)
    if type(error) is ValueError:  # lsprotocol's validators: a value out of its LSP range
        return f"invalid value ({str(error)[:120]})"
    return format_exception(error, kind)


def _reasons(error: JsonRpcException) -> str:
    """What was wrong with the params, by field (as the client spells it), shortened."""
    cause = error.__cause__
    if not isinstance(cause, BaseValidationError):
        return "params do not match the schema"
    camel = partial(re.compile(r"_([a-z])").sub, lambda m: m[1].upper())
    reasons = [camel(r.replace(" @ $.", " at ")) for r in transform_error(cause, path="$", format_exception=_reason)]
    shown = "; ".join(reasons[:REASONS_SHOWN])
    more = f"; and {len(reasons) - REASONS_SHOWN} more" if len(reasons) > REASONS_SHOWN else ""
    return (shown[:500] + more) or "params do not match the schema"


class Glm5Protocol(LanguageServerProtocol):
    _initialize_seen = False

    def structure_message(self, data: dict[str, Any]) -> Any:
        try:
            return super().structure_message(data)
        except JsonRpcException as exc:
            method = data.get("method")
            if "id" in data and method is not None and isinstance(data["id"], int | str) and not isinstance(data["id"], bool):
                return _UndecodableRequest(data["id"], str(method), _reasons(exc))
            if "id" not in data and isinstance(method, str):
                log.warning("notification %s dropped: invalid params: %s", method, _reasons(exc))
                return _DroppedNotification(method)
            raise

    def handle_message(self, message: Any) -> None:
        if isinstance(message, _UndecodableRequest):
            log.warning("request %s %s: invalid params: %s", message.id, message.method, message.reasons)
            self.send_error(message.id, types.ErrorCodes.InvalidParams, f"invalid params for {message.method}: {message.reasons}")
            return
        if isinstance(message, _DroppedNotification):
            return
        if not hasattr(message, "jsonrpc"):
            self.send_error(None, types.ErrorCodes.InvalidRequest, "not a JSON-RPC message object")
            return
        if self._out_of_lifecycle(message):
            return
        super().handle_message(message)

    def _execute_handler(
        self, msg_id: Any, handler: Callable[..., Any], callback: Callable[..., Any],
        args: tuple[Any, ...] | None = None, kwargs: dict[str, Any] | None = None,
    ) -> None:
        super()._execute_handler(msg_id, handler, callback, args, kwargs)
        if (future := self._request_futures.get(msg_id)) is not None:
            future.add_done_callback(partial(self._forget_future, msg_id))

    def _forget_future(self, msg_id: Any, future: Any) -> None:
        """Drop a finished handler's future (only it: a duplicate id may have replaced it)."""
        if self._request_futures.get(msg_id) is future:
            del self._request_futures[msg_id]

    def _out_of_lifecycle(self, message: Any) -> bool:
        """Answer (or drop) a message that arrives before `initialize` or after `shutdown`."""
        method, msg_id = getattr(message, "method", None), getattr(message, "id", None)
        if method is None or method == types.EXIT:
            return False
        is_request = msg_id is not None
        if method == types.INITIALIZE:
            if self._initialize_seen and is_request:
                self.send_error(msg_id, types.ErrorCodes.InvalidRequest, "initialize: the server is already initialized")
                return True
            self._initialize_seen = True
        if not self._initialize_seen:
            if is_request:
                self.send_error(msg_id, types.ErrorCodes.ServerNotInitialized, f"{method}: the server is not initialized yet")
            return True
        if self._shutdown and is_request:
            self.send_error(msg_id, types.ErrorCodes.InvalidRequest, f"{method}: the server is shutting down")
            return True
        return False

    def send_error(self, msg_id: int | str | None, code: types.ErrorCodes, message: str) -> None:
        """An error response; id may be None (JSON-RPC requires `"id": null` then)."""
        self._send_data({"jsonrpc": "2.0", "id": msg_id, "error": {"code": code.value, "message": message}})

    def report_bad_input(self, error: Exception) -> None:
        """Answer input the read loop could not even decode (pygls only logs it)."""
        if isinstance(error, json.JSONDecodeError | UnicodeDecodeError):
            self.send_error(None, types.ErrorCodes.ParseError, f"invalid JSON: {error}")

    def _user_handler(self, method: str, params: Any) -> Generator[Any, Any, None]:
        if (handler := self.fm.features.get(method)) is not None:
            yield handler, (params,), None

    @lsp_method(types.TEXT_DOCUMENT_DID_OPEN)
    def lsp_text_document__did_open(self, params: types.DidOpenTextDocumentParams) -> Generator[Any, Any, None]:
        yield from self._user_handler(types.TEXT_DOCUMENT_DID_OPEN, params)

    @lsp_method(types.TEXT_DOCUMENT_DID_CHANGE)
    def lsp_text_document__did_change(self, params: types.DidChangeTextDocumentParams) -> Generator[Any, Any, None]:
        yield from self._user_handler(types.TEXT_DOCUMENT_DID_CHANGE, params)

    @lsp_method(types.TEXT_DOCUMENT_DID_CLOSE)
    def lsp_text_document__did_close(self, params: types.DidCloseTextDocumentParams) -> Generator[Any, Any, None]:
        yield from self._user_handler(types.TEXT_DOCUMENT_DID_CLOSE, params)

"""A remote engine's tokenizer as the language server sees it: its failures are typed errors.

Role: with no model directory, the served model's tokenizer is the endpoint's `/tokenize`
(`model_runtime.remote.tokenizer`), so building a prompt makes HTTP calls. When the engine is
down they fail; this wrapper turns each `RemoteError` into `GenerationFailed` (a JSON-RPC
RequestFailed carrying the engine's own message, the same one a failed generation gives), and
tells the engine's health (`report`), so repeated failures reach `glm5/status` even though no
generation was ever submitted.

Invariants: same interface and ids as the wrapped tokenizer; never imports torch; `report` is
called on the calling thread (the owner hops to its loop).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from model_runtime.remote.errors import RemoteError

from .errors import GenerationFailed

Report = Callable[[str], None]


class RemoteTokens:
    def __init__(self, inner: Any, note_failure: Callable[[], None]) -> None:
        self.inner = inner
        self.special = inner.special
        self._note_failure = note_failure
        self.report: Report | None = None  # set by the engine client once the model is ready

    def encode(self, text: str) -> list[int]:
        return self._call(self.inner.encode, text)

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        return self._call(self.inner.encode_batch, texts)

    def count(self, text: str) -> int:
        return len(self.encode(text))

    def decode(self, ids: list[int] | tuple[int, ...], skip_special: bool = True) -> str:
        return self._call(self.inner.decode, ids, skip_special)

    def token_to_id(self, token: str) -> int | None:
        return self._call(self.inner.token_to_id, token)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def _call(self, fn: Callable[..., Any], *args: Any) -> Any:
        try:
            return fn(*args)
        except RemoteError as exc:
            self._note_failure()
            if self.report is not None:
                self.report(exc.message)
            raise GenerationFailed(f"generation failed: {exc.message}") from exc

"""What an LSP client believes each open document holds after the sync notifications it sent.

Role: the fuzzer's reference for the server's copy of each document. A notification changes the
client's copy only when its params have the types the LSP specification gives them (strings are
strings, `integer` and `uinteger` are JSON integers in their 32-bit ranges, a content change is
`{range, rangeLength?, text}` or `{text}`); unknown keys are ignored. A didChange applies only to
an open document and only with a newer version, and an out-of-range position clamps (the line
end, the end of the text), as the server documents (`context.positions`).
"""

from __future__ import annotations

from typing import Any

from context.positions import Position, TextIndex

INT_MIN, INT_MAX = -(2**31), 2**31 - 1


def _integer(value: Any, low: int = INT_MIN) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and low <= value <= INT_MAX


def _position(value: Any) -> Position | None:
    if not isinstance(value, dict) or not all(_integer(value.get(k), 0) for k in ("line", "character")):
        return None
    return Position(value["line"], value["character"])


def _change(value: Any) -> tuple[tuple[Position, Position] | None, str] | None:
    """(range or None for the whole text, text) of a well-typed content change, else None."""
    if not isinstance(value, dict) or not isinstance(value.get("text"), str):
        return None
    if "range" not in value:
        return None, value["text"]
    rng = value["range"]
    start, end = (_position(rng.get(k)) for k in ("start", "end")) if isinstance(rng, dict) else (None, None)
    if start is None or end is None or ("rangeLength" in value and not _integer(value["rangeLength"], 0)):
        return None
    return (start, end), value["text"]


def _apply(text: str, change: tuple[tuple[Position, Position] | None, str]) -> str:
    rng, new = change
    if rng is None:
        return new
    lines = TextIndex(text)
    start, end = sorted(lines.offset_at(p) for p in rng)
    return text[:start] + new + text[end:]


class ClientDocuments:
    """uri -> (version, text) of the documents the client has open."""

    def __init__(self) -> None:
        self.open: dict[str, tuple[int, str]] = {}

    def notify(self, method: str, params: Any) -> str | None:
        """Apply one sync notification if its params are well typed; the uri it names (a string),
        whose copy must now agree with the server's whether or not the notification applied."""
        document = params.get("textDocument") if isinstance(params, dict) else None
        uri = document.get("uri") if isinstance(document, dict) else None
        if not isinstance(uri, str):
            return None
        if method == "textDocument/didOpen":
            if isinstance(document.get("languageId"), str) and _integer(document.get("version")) and isinstance(document.get("text"), str):
                self.open[uri] = (document["version"], document["text"])
        elif method == "textDocument/didChange":
            changes = params.get("contentChanges")
            typed = [_change(c) for c in changes] if isinstance(changes, list) else [None]
            typed_ok = _integer(document.get("version")) and all(c is not None for c in typed)
            if typed_ok and uri in self.open and document["version"] > self.open[uri][0]:
                text = self.open[uri][1]
                for change in typed:
                    text = _apply(text, change)
                self.open[uri] = (document["version"], text)
        elif method == "textDocument/didClose":
            self.open.pop(uri, None)
        else:
            return None
        return uri

"""Untyped JSON from the client (custom notifications, command arguments) as plain values, and
client positions checked against the text they point into.

Invariants: malformed untyped JSON raises `InvalidParams` naming the field; positions parsed
here are in the client's units (`encoding.PositionEncoding` converts them). `position_in`
checks a position against the snapshot the request then works on: a line past the document's
end is InvalidParams everywhere, a character past its line's end is InvalidParams for the
server's own commands and clamps to the line end for LSP's requests (the specification says it
"defaults back to the line length").
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from context.positions import Position, Range, TextIndex
from lsprotocol import types

from .encoding import PositionEncoding
from .errors import InvalidParams


def plain(value: Any) -> Any:
    """Untyped params as plain JSON values: pygls hands custom methods' params over as
    (nested) namedtuples; attrs-free dicts and lists pass through."""
    if hasattr(value, "_asdict"):
        return {key: plain(item) for key, item in value._asdict().items()}
    if isinstance(value, list | tuple):
        return [plain(item) for item in value]
    if isinstance(value, Mapping):
        return {key: plain(item) for key, item in value.items()}
    return value


def _field(raw: object, key: str, where: str) -> object:
    if not isinstance(raw, Mapping) or key not in raw:
        raise InvalidParams(f"{where}: missing field {key!r}")
    return raw[key]


def parse_position(raw: object, where: str) -> Position:
    """`{"line": int, "character": int}` with non-negative integers."""
    values = [_field(raw, key, where) for key in ("line", "character")]
    if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in values):
        raise InvalidParams(f"{where}: line and character must be non-negative integers, got {raw!r}")
    return Position(*values)  # type: ignore[arg-type]


def parse_uri(raw: object, where: str) -> str:
    """The `uri` of `{"textDocument": {"uri": ...}}`, or of a flat `{"uri": ...}`."""
    holder = raw.get("textDocument", raw) if isinstance(raw, Mapping) else raw
    uri = _field(holder, "uri", where)
    if not isinstance(uri, str) or not uri:
        raise InvalidParams(f"{where}: uri must be a non-empty string, got {uri!r}")
    return uri


def position_in(lines: TextIndex, encoding: PositionEncoding, given: Position | types.Position, where: str, clamp: bool = False) -> Position:
    """Client position `given` in UTF-16, checked against `lines` (see the module docstring)."""
    if given.line >= lines.line_count:
        raise InvalidParams(f"{where}: line {given.line} is past the end of the document ({lines.line_count} lines)")
    if not clamp and given.character > (length := encoding.length(lines.line(given.line))):
        raise InvalidParams(f"{where}: character {given.character} is past the end of line {given.line} ({length} characters)")
    return encoding.position_in(lines, types.Position(line=given.line, character=given.character))


def range_in(lines: TextIndex, encoding: PositionEncoding, given: types.Range, where: str) -> Range:
    """Client range `given` in UTF-16, both ends checked as `position_in` checks a command's."""
    return Range(position_in(lines, encoding, given.start, f"{where} start"), position_in(lines, encoding, given.end, f"{where} end"))

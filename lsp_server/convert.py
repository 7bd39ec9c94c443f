"""Untyped JSON from the client (custom notifications, command arguments) as plain values.

Invariants: malformed untyped JSON raises `InvalidParams` naming the field; positions parsed
here are in the client's units (`encoding.PositionEncoding` converts them).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from context.positions import Position

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

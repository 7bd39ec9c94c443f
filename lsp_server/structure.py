"""Strict structuring of incoming LSP params: JSON values become lsprotocol types only when their
JSON types match the specification's.

Role: the cattrs converter pygls structures every message with (`converter()`, given to the
server as its `converter_factory`). lsprotocol's converter structures primitives by calling the
type: a `text` of `{"x": 1}` became the string "{'x': 1}", a `version` of "2" or 2.7 the integer
2, a `true` the integer 1. Here a `string` field takes only a JSON string, an `integer` or
`uinteger` only a JSON integer (not a boolean; lsprotocol's validators then check its range), a
`decimal` an integer or a float, a `boolean` only true or false, an enumeration only a value of its
own JSON type, a request id or progress token only an integer or a string, a sequence only a JSON
array, and a content change with a `range` key only a valid range.

Invariants: a message whose params do not structure is never handed to a handler; the protocol
(`lsp_server.protocol`) answers a request with InvalidParams and logs and drops a notification,
so a wrongly typed edit never changes a document. `LSPAny` values (`initializationOptions`,
settings, command arguments, `data`) stay plain JSON for their own parsers (`settings`,
`convert`), which check each field.
"""

from __future__ import annotations

import collections.abc
from typing import Any, Optional, Union

import cattrs
from cattrs.cols import homogenous_tuple_structure_factory
from lsprotocol import types
from pygls.protocol import default_converter


class WrongType(TypeError):
    """A JSON value of the wrong type for the field it fills."""

    def __init__(self, value: Any, expected: str) -> None:
        shown = repr(value)
        super().__init__(f"expected {expected}, got {type(value).__name__} {shown[:60]}{'...' if len(shown) > 60 else ''}")


def _integer(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _string(value: Any, kind: type) -> str:
    if kind is not str:
        return _enum(value, kind)
    if not isinstance(value, str):
        raise WrongType(value, "a string")
    return value


def _int(value: Any, kind: type) -> int:
    if kind is not int:
        return _enum(value, kind)
    if not _integer(value):
        raise WrongType(value, "an integer")
    return value


def _float(value: Any, _: type) -> float:
    if not (_integer(value) or isinstance(value, float)):
        raise WrongType(value, "a number")
    return float(value)


def _bool(value: Any, _: type) -> bool:
    if not isinstance(value, bool):
        raise WrongType(value, "a boolean")
    return value


def _id(value: Any, _: type) -> int | str:
    if not (_integer(value) or isinstance(value, str)):
        raise WrongType(value, "an integer or a string")
    return value


def _optional_id(value: Any, kind: type) -> int | str | None:
    return None if value is None else _id(value, kind)


def _enum(value: Any, kind: Any) -> Any:
    """An enumeration member from a value of the members' own JSON type (1.0 and true are not 1)."""
    if isinstance(value, bool) or not any(type(member.value) is type(value) for member in kind):
        raise WrongType(value, f"a {kind.__name__} value")
    return kind(value)


def _content_change(strict: cattrs.Converter) -> Any:
    """A content change with a `range` key is a ranged one (a null or malformed range is refused,
    never read as a whole-document replacement by a fragment); without it, the whole text."""

    def structure(value: Any, _: type) -> types.TextDocumentContentChangeEvent:
        ranged = isinstance(value, dict) and "range" in value
        kind = types.TextDocumentContentChangePartial if ranged else types.TextDocumentContentChangeWholeDocument
        return strict.structure(value, kind)

    return structure


def _is_sequence(kind: Any) -> bool:
    return getattr(kind, "__origin__", None) is collections.abc.Sequence


def _array(strict: cattrs.Converter) -> Any:
    """`Sequence[X]` from a JSON array only (cattrs would iterate a string or an object's keys)."""

    def factory(kind: Any) -> Any:
        items = homogenous_tuple_structure_factory(kind, strict)

        def structure(value: Any, _: type) -> tuple[Any, ...]:
            if not isinstance(value, list):
                raise WrongType(value, "an array")
            return items(value, kind)

        return structure

    return factory


def converter() -> cattrs.Converter:
    """pygls's converter with strict hooks for primitives, enumerations, ids and tokens."""
    strict = default_converter()
    for kind, hook in ((str, _string), (int, _int), (float, _float), (bool, _bool)):
        strict.register_structure_hook(kind, hook)  # also reached for their enumerations (subclasses)
    strict.register_structure_hook(Union[int, str], _id)
    strict.register_structure_hook(Optional[Union[int, str]], _optional_id)
    strict.register_structure_hook(types.TextDocumentContentChangeEvent, _content_change(strict))
    strict.register_structure_hook_factory(_is_sequence, _array(strict))
    return strict

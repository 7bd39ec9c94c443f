"""Positions in text: LSP (line, UTF-16 character) pairs, string offsets and UTF-8 byte offsets.

Role: the one place that converts between the three coordinate systems the context layer meets:
LSP positions (what the editor sends), Python string offsets (code points, what we slice) and
UTF-8 byte offsets (what tree-sitter reports).

Invariants:
- Lines end at "\\n", "\\r\\n" or "\\r", as in LSP. The line terminator is not part of the line.
- Conversions never raise. A position past the end of its line clamps to the line end, a line
  past the end of the text clamps to the end of the text, a negative value clamps to zero, and a
  character in the middle of a surrogate pair clamps to the start of the pair.
- Text is encoded with `encode_text` everywhere (UTF-8, lone surrogates passed through), so byte
  offsets agree with the bytes handed to tree-sitter.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from dataclasses import dataclass
from itertools import accumulate

_EOL = re.compile(r"\r\n|\r|\n")
_ASTRAL = re.compile("[\U00010000-\U0010ffff]")
_LONE_CR = re.compile(r"\r(?!\n)")


@dataclass(frozen=True, slots=True, order=True)
class Position:
    """A zero-based (line, character) pair; `character` counts UTF-16 code units, as in LSP."""

    line: int
    character: int


@dataclass(frozen=True, slots=True)
class Range:
    """A half-open span [start, end) between two positions."""

    start: Position
    end: Position

    def contains(self, position: Position) -> bool:
        """True when `position` lies in the range, its end included (a cursor after a word)."""
        return self.start <= position <= self.end

    def overlaps_lines(self, first: int, last: int) -> bool:
        """True when the range touches any line in [first, last]."""
        return self.start.line <= last and self.end.line >= first


def encode_text(text: str) -> bytes:
    return text.encode("utf-8", "surrogatepass")


def decode_bytes(data: bytes) -> str:
    return data.decode("utf-8", "surrogatepass")


def decode_prefix(data: bytes) -> str:
    """Decode `data`, dropping a character cut in half at its end (a byte offset inside it)."""
    for cut in range(4):
        try:
            return (data[: len(data) - cut] if cut else data).decode("utf-8", "surrogatepass")
        except UnicodeDecodeError:
            continue
    return data.decode("utf-8", "ignore")


def utf16_length(text: str) -> int:
    """Length of `text` in UTF-16 code units."""
    if text.isascii():
        return len(text)
    return len(text.encode("utf-16-le", "surrogatepass")) // 2


def _utf16_to_offset(line: str, character: int) -> int:
    """Index into `line` of UTF-16 column `character`, clamped to the line and to pair starts."""
    if character <= 0:
        return 0
    if line.isascii() or not _ASTRAL.search(line):
        return min(character, len(line))
    units = 0
    for index, char in enumerate(line):
        width = 2 if ord(char) > 0xFFFF else 1
        if units + width > character:
            return index
        units += width
    return len(line)


def _line_starts(text: str) -> list[int]:
    """Line starts of a text whose lines end at "\n" or "\r\n" (no lone "\r"), with C-level
    loops: a 1 MB edit of a million short lines must not cost a Python step per line."""
    starts = list(accumulate(map((1).__add__, map(len, text.split("\n"))), initial=0))
    starts.pop()
    return starts


def _line_starts_any(text: str) -> list[int]:
    return [0, *(match.end() for match in _EOL.finditer(text))]


class TextIndex:
    """Line and byte tables of one immutable text; answers every coordinate conversion.

    Tables are built lazily on first use and never change afterwards, so an index may be shared
    between threads (a racing first use builds the same table twice, harmlessly).
    """

    __slots__ = ("text", "_starts", "_byte_starts", "_ascii", "_rows_are_lines", "_bytes")

    def __init__(self, text: str) -> None:
        self.text = text
        self._rows_are_lines = "\r" not in text or _LONE_CR.search(text) is None
        self._starts = _line_starts(text) if self._rows_are_lines else _line_starts_any(text)
        self._ascii = text.isascii()
        self._byte_starts: list[int] | None = None
        self._bytes: bytes | None = None

    @property
    def line_count(self) -> int:
        return len(self._starts)

    @property
    def data(self) -> bytes:
        """The text encoded as tree-sitter sees it."""
        if self._bytes is None:
            self._bytes = encode_text(self.text)
        return self._bytes

    def line(self, line: int) -> str:
        """The text of `line` without its terminator ("" outside the text)."""
        if not 0 <= line < len(self._starts):
            return ""
        return self.text[self._starts[line] : self._end(line)]

    def line_start(self, line: int) -> int:
        return self._starts[min(max(line, 0), len(self._starts) - 1)]

    def line_end(self, line: int) -> int:
        return self._end(min(max(line, 0), len(self._starts) - 1))

    def offset_at(self, position: Position) -> int:
        """String offset of `position`, clamped as the module docstring says."""
        if position.line < 0:
            return 0
        if position.line >= len(self._starts):
            return len(self.text)
        start = self._starts[position.line]
        return start + _utf16_to_offset(self.line(position.line), position.character)

    def position_at(self, offset: int) -> Position:
        """Position of string offset `offset`; an offset inside a line terminator maps to the line end."""
        offset = min(max(offset, 0), len(self.text))
        line = bisect_right(self._starts, offset) - 1
        start = self._starts[line]
        column = min(offset, self._end(line)) - start
        if self._ascii:
            return Position(line, column)
        return Position(line, utf16_length(self.text[start : start + column]))

    def byte_at(self, offset: int) -> int:
        """UTF-8 byte offset of string offset `offset`."""
        offset = min(max(offset, 0), len(self.text))
        if self._ascii:
            return offset
        line = bisect_right(self._starts, offset) - 1
        start = self._starts[line]
        return self._line_byte_starts()[line] + len(encode_text(self.text[start:offset]))

    def offset_of_byte(self, byte: int) -> int:
        """String offset of UTF-8 byte offset `byte` (a byte inside a character maps to its start)."""
        if self._ascii:
            return min(max(byte, 0), len(self.text))
        byte_starts = self._line_byte_starts()
        byte = min(max(byte, 0), len(self.data))
        line = bisect_right(byte_starts, byte) - 1
        start = self._starts[line]
        return start + len(decode_prefix(self.data[byte_starts[line] : byte]))

    def position_of_byte(self, byte: int) -> Position:
        return self.position_at(self.offset_of_byte(byte))

    def position_of_point(self, byte: int, point: tuple[int, int]) -> Position:
        """Position of a tree-sitter node boundary given as both a byte offset and a point; the
        point gives it without searching when rows and lines agree (no lone "\r")."""
        row, column = point
        if not self._rows_are_lines or row >= len(self._starts):
            return self.position_of_byte(byte)
        if self._ascii:
            return Position(row, min(column, self._end(row) - self._starts[row]))
        line = self.line(row)
        if line.isascii():
            return Position(row, min(column, len(line)))
        return Position(row, utf16_length(decode_prefix(encode_text(line)[:column])))

    def point_at(self, offset: int) -> tuple[int, int]:
        """Tree-sitter point (row, byte column) of string offset `offset`; rows end at "\\n" only."""
        offset = min(max(offset, 0), len(self.text))
        if self._rows_are_lines:
            row = bisect_right(self._starts, offset) - 1
            return row, self.byte_at(offset) - self.byte_at(self._starts[row])
        row = self.text.count("\n", 0, offset)
        row_start = self.text.rfind("\n", 0, offset) + 1
        if self._ascii:
            return row, offset - row_start
        return row, len(encode_text(self.text[row_start:offset]))

    def _end(self, line: int) -> int:
        """String offset where `line` ends (before its terminator): derived from the next line's
        start, so the table holds one entry per line."""
        if line + 1 >= len(self._starts):
            return len(self.text)
        end, text = self._starts[line + 1] - 1, self.text
        return end - 1 if text[end] == "\n" and end > self._starts[line] and text[end - 1] == "\r" else end

    def _line_byte_starts(self) -> list[int]:
        if self._byte_starts is None:
            starts, total, previous = [], 0, 0
            for start in self._starts:
                total += len(encode_text(self.text[previous:start]))
                starts.append(total)
                previous = start
            self._byte_starts = starts
        return self._byte_starts


def offset_at(text: str, position: Position) -> int:
    """String offset of an LSP position in `text` (clamped, never raises)."""
    return TextIndex(text).offset_at(position)


def position_at(text: str, offset: int) -> Position:
    """LSP position of string offset `offset` in `text` (clamped, never raises)."""
    return TextIndex(text).position_at(offset)

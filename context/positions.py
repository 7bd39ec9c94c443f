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
from bisect import bisect_left, bisect_right
from dataclasses import dataclass
from itertools import accumulate

_EOL = re.compile(r"\r\n|\r|\n")
_ASTRAL = re.compile("[\U00010000-\U0010ffff]")


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


CHUNK_CHARS = 1 << 15  # characters per chunk of the lazily built line and byte tables


def _newlines(text: str, start: int, end: int) -> list[int]:
    """Offsets of the "\n"s in text[start:end], with C-level loops (no Python step per line)."""
    offsets = list(accumulate(map((1).__add__, map(len, text[start:end].split("\n"))), initial=start - 1))
    return offsets[1:-1]


def _line_starts_any(text: str) -> list[int]:
    return [0, *(match.end() for match in _EOL.finditer(text))]


class TextIndex:
    """Line and byte tables of one immutable text; answers every coordinate conversion.

    The text is cut into chunks of `CHUNK_CHARS` characters. Building the index counts the "\n"s
    of each chunk (C-level, no Python step per line); the offsets of one chunk's line breaks and
    the UTF-8 size of the chunks are built on first use. A conversion thus costs at most one
    chunk's table, never one entry per line of the whole text: a 1 MB edit of blank lines does
    not build a million-entry table on the thread that applies it. A text with a lone "\r" (rare)
    keeps one table of every line start, built at once.

    Tables never change once built, so an index may be shared between threads (a racing first
    use builds the same table twice, harmlessly).
    """

    __slots__ = ("text", "_rows_are_lines", "_ascii", "_bytes", "_counts", "_chunks", "_flat", "_byte_bases")

    def __init__(self, text: str) -> None:
        self.text = text
        self._rows_are_lines = text.count("\r") == text.count("\r\n")  # no lone "\r" (C-level counts)
        self._ascii = text.isascii()
        self._bytes: bytes | None = None
        self._byte_bases: list[int] | None = None
        self._flat: list[int] | None = None if self._rows_are_lines else _line_starts_any(text)
        bounds = range(0, len(text), CHUNK_CHARS) if self._rows_are_lines else range(0)
        self._counts = list(accumulate((text.count("\n", b, b + CHUNK_CHARS) for b in bounds), initial=0))
        self._chunks: list[list[int] | None] = [None] * len(bounds)

    @property
    def line_count(self) -> int:
        return len(self._flat) if self._flat is not None else self._counts[-1] + 1

    @property
    def data(self) -> bytes:
        """The text encoded as tree-sitter sees it."""
        if self._bytes is None:
            self._bytes = encode_text(self.text)
        return self._bytes

    def line(self, line: int) -> str:
        """The text of `line` without its terminator ("" outside the text)."""
        if not 0 <= line < self.line_count:
            return ""
        return self.text[self._start(line) : self._end(line)]

    def line_start(self, line: int) -> int:
        return self._start(min(max(line, 0), self.line_count - 1))

    def line_end(self, line: int) -> int:
        return self._end(min(max(line, 0), self.line_count - 1))

    def offset_at(self, position: Position) -> int:
        """String offset of `position`, clamped as the module docstring says."""
        if position.line < 0:
            return 0
        if position.line >= self.line_count:
            return len(self.text)
        start = self._start(position.line)
        return start + _utf16_to_offset(self.text[start : self._end(position.line)], position.character)

    def position_at(self, offset: int) -> Position:
        """Position of string offset `offset`; an offset inside a line terminator maps to the line end."""
        offset = min(max(offset, 0), len(self.text))
        line = self._line_of(offset)
        start = self._start(line)
        column = min(offset, self._end(line)) - start
        if self._ascii:
            return Position(line, column)
        return Position(line, utf16_length(self.text[start : start + column]))

    def byte_at(self, offset: int) -> int:
        """UTF-8 byte offset of string offset `offset`."""
        offset = min(max(offset, 0), len(self.text))
        if self._ascii:
            return offset
        chunk = min(offset // CHUNK_CHARS, len(self._byte_table()) - 1)
        start = chunk * CHUNK_CHARS
        return self._byte_table()[chunk] + len(encode_text(self.text[start:offset]))

    def offset_of_byte(self, byte: int) -> int:
        """String offset of UTF-8 byte offset `byte` (a byte inside a character maps to its start)."""
        if self._ascii:
            return min(max(byte, 0), len(self.text))
        bases = self._byte_table()
        byte = min(max(byte, 0), bases[-1])
        chunk = bisect_right(bases, byte) - 1
        if chunk * CHUNK_CHARS >= len(self.text):
            return len(self.text)
        return chunk * CHUNK_CHARS + len(decode_prefix(self.data[bases[chunk] : byte]))

    def position_of_byte(self, byte: int) -> Position:
        return self.position_at(self.offset_of_byte(byte))

    def position_of_point(self, byte: int, point: tuple[int, int]) -> Position:
        """Position of a tree-sitter node boundary given as both a byte offset and a point; the
        point gives it without searching when rows and lines agree (no lone "\r")."""
        row, column = point
        if not self._rows_are_lines or row >= self.line_count:
            return self.position_of_byte(byte)
        if self._ascii:
            return Position(row, min(column, self._end(row) - self._start(row)))
        line = self.line(row)
        if line.isascii():
            return Position(row, min(column, len(line)))
        return Position(row, utf16_length(decode_prefix(encode_text(line)[:column])))

    def point_at(self, offset: int) -> tuple[int, int]:
        """Tree-sitter point (row, byte column) of string offset `offset`; rows end at "\\n" only."""
        offset = min(max(offset, 0), len(self.text))
        if self._rows_are_lines:
            row = self._line_of(offset)
            return row, self.byte_at(offset) - self.byte_at(self._start(row))
        row = self.text.count("\n", 0, offset)
        row_start = self.text.rfind("\n", 0, offset) + 1
        if self._ascii:
            return row, offset - row_start
        return row, len(encode_text(self.text[row_start:offset]))

    def _start(self, line: int) -> int:
        """String offset where `line` (0 <= line < line_count) starts."""
        if self._flat is not None:
            return self._flat[line]
        if line == 0:
            return 0
        chunk = bisect_left(self._counts, line) - 1  # the chunk holding the line's "\n" before it
        return self._chunk_newlines(chunk)[line - self._counts[chunk] - 1] + 1

    def _line_of(self, offset: int) -> int:
        """The line holding string offset `offset` (0 <= offset <= len(text))."""
        if self._flat is not None:
            return bisect_right(self._flat, offset) - 1
        chunk = offset // CHUNK_CHARS
        if chunk >= len(self._chunks):
            return self._counts[-1]
        return self._counts[chunk] + self.text.count("\n", chunk * CHUNK_CHARS, offset)

    def _end(self, line: int) -> int:
        """String offset where `line` ends (before its terminator): derived from the next line's
        start, so the tables hold one entry per line."""
        if line + 1 >= self.line_count:
            return len(self.text)
        start, end, text = self._start(line), self._start(line + 1) - 1, self.text
        return end - 1 if text[end] == "\n" and end > start and text[end - 1] == "\r" else end

    def _chunk_newlines(self, chunk: int) -> list[int]:
        table = self._chunks[chunk]
        if table is None:
            start = chunk * CHUNK_CHARS
            table = self._chunks[chunk] = _newlines(self.text, start, start + CHUNK_CHARS)
        return table

    def _byte_table(self) -> list[int]:
        """UTF-8 byte offset of each chunk's start, and of the text's end."""
        if self._byte_bases is None:
            sizes = (len(encode_text(self.text[b : b + CHUNK_CHARS])) for b in range(0, len(self.text), CHUNK_CHARS))
            self._byte_bases = list(accumulate(sizes, initial=0))
        return self._byte_bases


def offset_at(text: str, position: Position) -> int:
    """String offset of an LSP position in `text` (clamped, never raises)."""
    return TextIndex(text).offset_at(position)


def position_at(text: str, offset: int) -> Position:
    """LSP position of string offset `offset` in `text` (clamped, never raises)."""
    return TextIndex(text).position_at(offset)

"""Position encodings at the LSP boundary: the client's code units <-> the context layer's UTF-16.

Role: pygls negotiates `positionEncoding` in `initialize` (the first of utf-8, utf-16 and
utf-32 the client offers; utf-16 when it offers none), and every handler hands its positions
to `PositionEncoding`: incoming ones become UTF-16 positions (what `context/` works on) against
the line they refer to, outgoing ones go back to the client's units. Each position is converted
once, at the boundary; nothing below `lsp_server/features` knows the negotiated encoding.

Invariants:
- utf-16 is the identity and needs no text; the other encodings convert against the line's
  text as the client sees it (the document before a change, the file for a location).
- A character past the end of its line maps to the line end, a utf-8 offset inside a multi-byte
  character maps to that character's start; conversions never raise.
"""

from __future__ import annotations

from lsprotocol import types

from context.positions import Position, Range, TextIndex, utf16_length

UTF8 = types.PositionEncodingKind.Utf8.value
UTF16 = types.PositionEncodingKind.Utf16.value
UTF32 = types.PositionEncodingKind.Utf32.value


def _units(char: str, kind: str) -> int:
    code = ord(char)
    if kind == UTF32:
        return 1
    return 1 if code < 0x80 else 2 if code < 0x800 else 3 if code < 0x10000 else 4


class PositionEncoding:
    """Converts `character` values between one client encoding and UTF-16."""

    def __init__(self, kind: str = UTF16) -> None:
        self.kind = kind if kind in (UTF8, UTF32) else UTF16

    @property
    def identity(self) -> bool:
        return self.kind == UTF16

    def to_utf16(self, line: str, character: int) -> int:
        """The UTF-16 column of client column `character` in `line`."""
        if self.identity or character <= 0 or line.isascii():
            return character if self.identity or character <= 0 else min(character, len(line))
        units = utf16 = 0
        for char in line:
            width = _units(char, self.kind)
            if units + width > character:
                break
            units += width
            utf16 += 2 if ord(char) > 0xFFFF else 1
        return utf16

    def from_utf16(self, line: str, character: int) -> int:
        """The client column of UTF-16 column `character` in `line`."""
        if self.identity or character <= 0 or line.isascii():
            return character if self.identity or character <= 0 else min(character, len(line))
        units = utf16 = 0
        for char in line:
            width = 2 if ord(char) > 0xFFFF else 1
            if utf16 + width > character:
                break
            utf16 += width
            units += _units(char, self.kind)
        return units

    # ---- LSP types <-> context positions, against one text (None: the line is unknown) ------
    def position_in(self, lines: TextIndex | None, p: types.Position) -> Position:
        if self.identity or lines is None:
            return Position(p.line, p.character)
        return Position(p.line, self.to_utf16(lines.line(p.line), p.character))

    def range_in(self, lines: TextIndex | None, r: types.Range) -> Range:
        return Range(self.position_in(lines, r.start), self.position_in(lines, r.end))

    def position_out(self, lines: TextIndex | None, p: Position) -> types.Position:
        line, character = max(p.line, 0), max(p.character, 0)
        if not self.identity and lines is not None:
            character = self.from_utf16(lines.line(line), character)
        return types.Position(line=line, character=character)

    def range_out(self, lines: TextIndex | None, r: Range) -> types.Range:
        return types.Range(start=self.position_out(lines, r.start), end=self.position_out(lines, r.end))

    def length(self, text: str) -> int:
        """`text`'s length in the client's units."""
        if self.kind == UTF8:
            return len(text.encode("utf-8", "surrogatepass"))
        return len(text) if self.kind == UTF32 else utf16_length(text)

"""UTF-16 positions, clamping and surrogate pairs (context.positions)."""

from __future__ import annotations

import pytest

from context.positions import Position, TextIndex, offset_at, position_at, utf16_length

TEXT = "a😀b\r\n中文x\rlast\n"


@pytest.mark.parametrize(
    ("position", "offset"),
    [
        (Position(0, 0), 0),
        (Position(0, 1), 1),
        (Position(0, 2), 1),  # inside the surrogate pair of 😀: clamps to the pair start
        (Position(0, 3), 2),
        (Position(0, 4), 3),
        (Position(0, 99), 3),  # past the line end: clamps before "\r\n"
        (Position(1, 0), 5),
        (Position(1, 2), 7),
        (Position(1, 3), 8),
        (Position(2, 2), 11),  # lone "\r" ends line 1
        (Position(3, 0), 14),
        (Position(3, 5), 14),
        (Position(9, 0), 14),  # past the last line: end of text
        (Position(-1, 4), 0),
        (Position(1, -3), 5),
    ],
)
def test_offset_at_clamps(position: Position, offset: int) -> None:
    assert offset_at(TEXT, position) == offset


@pytest.mark.parametrize(
    ("offset", "position"),
    [
        (0, Position(0, 0)),
        (2, Position(0, 3)),
        (3, Position(0, 4)),
        (4, Position(0, 4)),  # between "\r" and "\n": the line end
        (5, Position(1, 0)),
        (8, Position(1, 3)),
        (14, Position(3, 0)),
        (99, Position(3, 0)),
        (-5, Position(0, 0)),
    ],
)
def test_position_at(offset: int, position: Position) -> None:
    assert position_at(TEXT, offset) == position


def test_round_trip_every_offset() -> None:
    index = TextIndex(TEXT)
    for offset in range(len(TEXT) + 1):
        if TEXT[offset - 1 : offset + 1] == "\r\n":
            continue
        assert index.offset_at(index.position_at(offset)) == offset


def test_bytes_and_points_agree_with_utf8() -> None:
    index = TextIndex(TEXT)
    data = TEXT.encode()
    for offset in range(len(TEXT) + 1):
        byte = len(TEXT[:offset].encode())
        assert index.byte_at(offset) == byte
        assert index.offset_of_byte(byte) == offset
        row = data[:byte].count(b"\n")
        assert index.point_at(offset) == (row, byte - (data.rfind(b"\n", 0, byte) + 1))


def test_utf16_length_counts_pairs() -> None:
    assert utf16_length("a😀中") == 4
    assert utf16_length("") == 0


def test_lone_surrogates_keep_bytes_and_offsets_aligned() -> None:
    text = "x = 'a\ud800b'\ny\n"
    index = TextIndex(text)
    for offset in range(len(text) + 1):
        assert index.offset_of_byte(index.byte_at(offset)) == offset
    assert index.position_of_point(index.byte_at(8), (0, index.byte_at(8))) == Position(0, 8)


def test_lines_match_a_split_on_every_terminator_for_random_texts() -> None:
    """The line table (built without a Python step per line when there is no lone "\\r") gives
    the lines a plain split on "\\r\\n", "\\r" and "\\n" gives, at the offsets they occupy."""
    import random
    import re

    rng = random.Random(7)
    pieces = ["a", "bc", "\n", "\r\n", "\r", "é", "😀", " ", "\n\n", "\r\r\n"]
    for _ in range(3000):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 10)))
        lines = re.split(r"\r\n|\r|\n", text)
        index = TextIndex(text)
        assert index.line_count == len(lines)
        assert [index.line(i) for i in range(len(lines))] == lines
        starts = [0] + [m.end() for m in re.finditer(r"\r\n|\r|\n", text)]
        assert [index.line_start(i) for i in range(len(lines))] == starts
        assert [index.line_end(i) for i in range(len(lines))] == [s + len(line) for s, line in zip(starts, lines)]
        assert utf16_length(text) == sum(2 if ord(c) > 0xFFFF else 1 for c in text)


def test_chunked_tables_agree_with_a_plain_reading_of_the_text(monkeypatch) -> None:
    """With chunks of 3 characters (a line, a "\\r\\n" or a character's bytes across chunk
    boundaries), every conversion agrees with slicing, counting and encoding the text itself."""
    import random
    import re

    from context import positions
    from context.positions import decode_prefix, encode_text

    monkeypatch.setattr(positions, "CHUNK_CHARS", 3)
    rng = random.Random(11)
    pieces = ["a", "bc", "\n", "\r\n", "é", "😀", " ", "\n\n\n", "\ud800", "中"]
    for _ in range(400):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 14)))
        if rng.random() < 0.2:
            text += "\rz"  # a lone "\r": the one-table path
        index, data = TextIndex(text), encode_text(text)
        starts = [0] + [m.end() for m in re.finditer(r"\r\n|\r|\n", text)]
        lines = re.split(r"\r\n|\r|\n", text)
        assert index.line_count == len(lines)
        assert [index.line(i) for i in range(len(lines))] == lines
        for offset in range(len(text) + 1):
            line = max(i for i, start in enumerate(starts) if start <= offset)
            column = utf16_length(text[starts[line] : min(offset, starts[line] + len(lines[line]))])
            assert index.position_at(offset) == Position(line, column)
            assert index.byte_at(offset) == len(encode_text(text[:offset]))
            if "\r" not in text.replace("\r\n", ""):
                row_start = text.rfind("\n", 0, offset) + 1
                assert index.point_at(offset) == (text.count("\n", 0, offset), len(encode_text(text[row_start:offset])))
        for byte in range(len(data) + 2):
            assert index.offset_of_byte(byte) == len(decode_prefix(data[:byte]))
        for line in range(len(lines) + 1):
            assert index.offset_at(Position(line, 99)) == (starts[line] + len(lines[line]) if line < len(lines) else len(text))

"""Position encodings: the server adopts what the client offers first and converts at the
boundary, so edits on non-ASCII lines land where the editor put them (as Neovim offers them)."""

from __future__ import annotations

import pytest
from lsprotocol import types

from context.positions import Position, TextIndex
from lsp_harness import Session, client_capabilities
from lsp_server.encoding import PositionEncoding

LINE = 's = "é😀"'  # é: 2 UTF-8 bytes, 1 UTF-16 unit; 😀: 4 bytes, 2 units, 1 code point


@pytest.mark.parametrize(
    ("kind", "client", "utf16"),
    [
        ("utf-8", 5, 5), ("utf-8", 6, 5), ("utf-8", 7, 6), ("utf-8", 11, 8), ("utf-8", 12, 9), ("utf-8", 99, 9),
        ("utf-32", 6, 6), ("utf-32", 7, 8), ("utf-32", 8, 9), ("utf-16", 7, 7), ("utf-16", 99, 99),
    ],
)
def test_client_columns_convert_to_utf16(kind, client, utf16):
    assert PositionEncoding(kind).to_utf16(LINE, client) == utf16


@pytest.mark.parametrize(
    ("kind", "utf16", "client"),
    [("utf-8", 5, 5), ("utf-8", 6, 7), ("utf-8", 8, 11), ("utf-8", 9, 12), ("utf-32", 8, 7), ("utf-32", 9, 8), ("utf-16", 8, 8)],
)
def test_utf16_columns_convert_to_the_clients(kind, utf16, client):
    assert PositionEncoding(kind).from_utf16(LINE, utf16) == client


def test_a_utf8_offset_inside_a_character_maps_to_its_start_and_ranges_convert_per_line():
    encoding = PositionEncoding("utf-8")
    lines = TextIndex(f"{LINE}\nascii\n")
    assert encoding.position_in(lines, types.Position(line=0, character=6)) == Position(0, 5)
    out = encoding.position_out(lines, Position(0, 9))
    assert (out.line, out.character) == (0, 12)
    assert encoding.position_in(lines, types.Position(line=1, character=3)) == Position(1, 3)


def _offering(*encodings: str) -> types.ClientCapabilities:
    capabilities = client_capabilities()
    capabilities.general = types.GeneralClientCapabilities(position_encodings=list(encodings))
    return capabilities


async def _explained_text(session: Session, uri: str) -> str:
    explained = await session.command("glm5.explainContext", {"uri": uri, "position": {"line": 0, "character": 0}})
    return explained["prompt"]


async def test_a_client_offering_utf8_first_edits_a_non_ascii_line_as_neovim_does(tmp_path):
    session = await Session.start_fake(tmp_path, {"text": "42"}, capabilities=_offering("utf-8", "utf-16"))
    try:
        assert session.initialize_result.capabilities.position_encoding == "utf-8"
        uri = session.create("n.py", 's = "é"\nt = 1\n')
        session.change(uri, "x", (0, 7))  # after é: byte 7, which is UTF-16 column 6
        session.change(uri, "ü", (0, 8))  # after the x just typed
        session.change(uri, "", (0, 10), (0, 11))  # delete the closing quote (bytes 10..11)
        session.change(uri, '"', (0, 10))
        assert 's = "éxü"\nt = 1\n' in await _explained_text(session, uri)
        result = await session.inline(uri, 0, 11)  # the end of the line, in bytes
        end = result.items[0].range.end
        assert (end.line, end.character) == (0, 11)
    finally:
        assert await session.stop() == 0


async def test_a_client_offering_only_utf32_gets_utf32(tmp_path):
    session = await Session.start_fake(tmp_path, {"text": "42"}, capabilities=_offering("utf-32"))
    try:
        assert session.initialize_result.capabilities.position_encoding == "utf-32"
        uri = session.create("w.py", 'e = "😀"\n')
        session.change(uri, "x", (0, 6))  # after the emoji: code point 6, UTF-16 column 7
        assert 'e = "😀x"\n' in await _explained_text(session, uri)
    finally:
        assert await session.stop() == 0

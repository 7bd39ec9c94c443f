"""Documents: LSP-style changes, incremental re-parsing, snapshots (context.document)."""

from __future__ import annotations

import random

import pytest
import tree_sitter as ts

from context.document import Document, Position, Range, path_from_uri
from context.positions import TextIndex, encode_text

SEEDS = {
    "python": "def f(x):\n    return x  # é\n\nclass A:\n    pass\n",
    "javascript": "function f(a) {\n  return a + 1; // 中\n}\nconst o = { k: [1, 2] };\n",
    "typescriptreact": "const C = (p: P) => <div>{p.x}</div>;\ninterface P { x: number }\n",
    "go": "package main\n\nfunc main() {\n\tx := 1\n\t_ = x\n}\n",
    "rust": "fn main() {\n    let s = \"😀\";\n    println!(\"{}\", s);\n}\n",
}
PIECES = ["a", "b1", " ", "\n", "(", ")", "{", "}", ":", ";", "é", "中文", "😀", "\r\n", "\t", "x = 1\n", '"', "//", "\ud800"]


def shape(node: ts.Node) -> list[tuple[str, int, int, tuple[int, int], tuple[int, int]]]:
    """Every node of a tree with its type, bytes and points, in document order."""
    out, stack = [], [node]
    while stack:
        current = stack.pop()
        out.append((current.type, current.start_byte, current.end_byte, current.start_point, current.end_point))
        stack.extend(reversed(current.children))
    return out


@pytest.mark.parametrize("language_id", sorted(SEEDS))
def test_incremental_parse_equals_fresh_parse(language_id: str) -> None:
    rng = random.Random(language_id)
    document = Document(f"file:///w/f.{language_id}", language_id, 1, SEEDS[language_id])
    assert document.tree is not None
    for version in range(2, 150):
        lines = TextIndex(document.text)
        first = rng.randint(0, len(document.text))
        edit = Range(lines.position_at(first), lines.position_at(first + rng.randint(0, 6)))
        start, end = lines.offset_at(edit.start), lines.offset_at(edit.end)
        inserted = "".join(rng.choice(PIECES) for _ in range(rng.randint(0, 3)))
        document.apply_change(edit, inserted, version)
        assert document.text == lines.text[:start] + inserted + lines.text[end:]
        fresh = document.language.parse(encode_text(document.text))
        assert shape(document.tree.root_node) == shape(fresh.root_node)


def test_change_positions_are_utf16_units() -> None:
    document = Document("file:///w/a.py", "python", 1, "s = '😀x'\n")
    # "😀" spans UTF-16 columns 5-6; replace the "x" after it (column 7).
    document.apply_change(Range(Position(0, 7), Position(0, 8)), "中", 2)
    assert document.text == "s = '😀中'\n"
    assert document.version == 2
    assert not document.tree.root_node.has_error


def test_out_of_range_and_reversed_ranges_clamp() -> None:
    document = Document("file:///w/a.py", "python", 1, "ab\ncd\n")
    document.apply_change(Range(Position(1, 50), Position(0, 1)), "X", 2)  # reversed, past line end
    assert document.text == "aX\n"
    document.apply_change(Range(Position(40, 0), Position(41, 0)), "tail", 3)  # past the end
    assert document.text == "aX\ntail"


def test_full_replacement_and_text_change_lines() -> None:
    document = Document("file:///w/a.py", "python", 1, "one\ntwo\nthree\n")
    change = document.apply_change(Range(Position(1, 1), Position(2, 2)), "X\nY", 2)
    assert document.text == "one\ntX\nYree\n"
    assert (change.start_line, change.old_end_line, change.new_end_line) == (1, 2, 2)
    assert (change.before, change.after) == ("two\nthree", "tX\nYree")
    document.apply_change(None, "fresh = 1\n", 3)
    assert document.text == "fresh = 1\n"
    assert document.tree.root_node.text == b"fresh = 1\n"


def test_snapshot_is_not_changed_by_later_edits() -> None:
    document = Document("file:///w/a.py", "python", 1, "def f():\n    pass\n")
    before = document.snapshot()
    shape_before = shape(before.tree.root_node)
    document.apply_change(Range(Position(0, 0), Position(0, 0)), "import os\n", 2)
    assert before.text == "def f():\n    pass\n"
    assert before.version == 1
    assert shape(before.tree.root_node) == shape_before
    assert document.snapshot().text.startswith("import os\n")


def test_unknown_language_keeps_text_without_tree() -> None:
    document = Document("untitled:Untitled-1", "plaintext", 1, "hello")
    document.apply_change(Range(Position(0, 5), Position(0, 5)), " world", 2)
    snap = document.snapshot()
    assert (snap.text, snap.tree, snap.language, snap.path) == ("hello world", None, None, None)


def test_language_falls_back_to_the_extension() -> None:
    assert Document("file:///w/lib.rs", "", 1, "fn f() {}").language.name == "rust"
    assert Document("file:///w/App.tsx", "typescriptreact", 1, "").language.name == "tsx"


@pytest.mark.parametrize(
    ("uri", "path"),
    [
        ("file:///home/u/a%20b/c.py", "/home/u/a b/c.py"),
        ("file:///home/u/100%25.py", "/home/u/100%.py"),
        ("untitled:Untitled-1", None),
    ],
)
def test_path_from_uri(uri: str, path: str | None) -> None:
    assert path_from_uri(uri) == path


def test_a_large_document_parses_on_first_use_of_a_version_not_on_each_edit(monkeypatch) -> None:
    """Over SYNC_PARSE_CHARS, edits change the text at once and parse nothing; the first read of
    a version's tree parses it (incrementally when the previous version was parsed), and every
    tree equals a fresh parse of its version's text. Small documents still parse on each edit."""
    import context.document as doc_module

    monkeypatch.setattr(doc_module, "SYNC_PARSE_CHARS", 1_000)
    parsed: list[bool] = []  # one entry per parse: whether it was incremental
    language = doc_module.language_for("python", "a.py")
    real = type(language).parse
    monkeypatch.setattr(type(language), "parse", lambda self, data, old=None: parsed.append(old is not None) or real(self, data, old))
    body = "def f(x):\n    return x\n" * 100  # 2,300 characters
    document = Document("file:///w/big.py", "python", 1, body)
    snapshots = [document.snapshot()]
    for version in range(2, 6):
        line = document.snapshot().line(0)
        document.apply_change(Range(Position(0, 0), Position(0, len(line))), f"def g{version}(x):", version)
        snapshots.append(document.snapshot())
    assert parsed == [] and document.text.startswith("def g5(x):")
    assert shape(snapshots[2].tree.root_node) == shape(real(language, encode_text(snapshots[2].text)).root_node)
    assert parsed == [False]  # a full parse: version 2's parent was never parsed
    assert shape(snapshots[-1].tree.root_node) == shape(real(language, encode_text(document.text)).root_node)
    parsed.clear()
    document.apply_change(Range(Position(1, 11), Position(1, 12)), "y", 6)
    assert document.snapshot().tree.root_node.text.startswith(b"def g5(x):\n    return y")
    assert parsed == [True]  # after a parsed version: incremental
    small = Document("file:///w/small.py", "python", 1, "x = 1\n")
    small.apply_change(Range(Position(0, 4), Position(0, 5)), "2", 2)
    assert parsed[1:] == [False, True]  # opened and edited: parsed at once


def test_an_edit_of_a_million_blank_lines_builds_no_table_per_line() -> None:
    """The line table of a new version is built a chunk at a time, on use: applying a 1 MB
    edit of blank lines and converting a position near its end builds at most two chunks'
    tables (today's whole-text table had a million entries, built on the thread applying it)."""
    from context import positions

    doc = Document("file:///tmp/blank.txt", "plaintext", 1, "x\n")
    doc.apply_change(None, "\n" * 1_000_000, 2)
    doc.apply_change(Range(Position(999_990, 0), Position(999_990, 0)), "y", 3)
    lines = doc.snapshot().lines
    assert lines.line_count == 1_000_001 and lines.line(999_990) == "y"
    assert lines.position_at(len(lines.text) - 1) == Position(999_999, 0)
    built = [table for table in lines._chunks if table is not None]
    assert len(built) <= 2 and all(len(table) <= positions.CHUNK_CHARS for table in built)


def test_a_large_parse_lets_another_thread_run_in_the_middle_of_it() -> None:
    """py-tree-sitter holds the interpreter lock while it parses; a large text is read in chunks
    through Python, so another thread (the server's event loop) runs between chunks: here the
    main thread does its work while the parse is part-way through, then lets it finish."""
    import threading

    from context.languages import PARSE_CHUNK_BYTES, language_for

    halfway, resume = threading.Event(), threading.Event()

    class Source(bytes):
        reads = 0

        def __getitem__(self, key):
            Source.reads += 1
            if Source.reads == 3:  # part-way: hand over and wait (bounded) for the other thread
                halfway.set()
                resume.wait(30)
            return super().__getitem__(key)

    source = Source(b"def f(x):\n    return x\n" * (20 * PARSE_CHUNK_BYTES // 23))
    trees: list[ts.Tree] = []
    parsing = threading.Thread(target=lambda: trees.append(language_for("python", "a.py").parse(source)))
    parsing.start()
    assert halfway.wait(30), "the parser read the whole text without handing control back"
    assert not trees  # the main thread runs while the parse is unfinished
    resume.set()
    parsing.join(60)
    assert trees and trees[0].root_node.end_byte == len(source) and not trees[0].root_node.has_error

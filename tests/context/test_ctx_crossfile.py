"""Cross-file snippet selection (context.crossfile) and similar windows (context.similar)."""

from __future__ import annotations

from pathlib import Path

import pytest

from context.crossfile import CrossFileOptions, gather_snippets
from context.document import Document, DocumentSnapshot
from context.edits import Edit
from context.index import WorkspaceIndex
from context.positions import Position, Range
from context.similar import best_window, tokens_before

UTIL = '''\
def parse_config(source):
    """Parse a config mapping."""
    return dict(source)


def render_table(rows):
    return "\\n".join(rows)
'''
HELPERS = '''\
def slugify(title):
    return title.lower().replace(" ", "-")
'''
MAIN = '''\
from util import parse_config

def main(raw):
    config = parse_config(raw)
    name = slugify(config["title"])
    
    return name
'''
OTHER_OPEN = "\n".join(
    ["import json", "", "def load(path):", "    with open(path) as handle:", "        return json.load(handle)", ""]
    + [f"x{i} = {i}" for i in range(40)]
    + ["def configure(raw):", "    config = parse_config(raw)", "    name = slugify(config['title'])", "    return name"]
)


def count_words(text: str) -> int:
    return len(text.split())


@pytest.fixture
def setup(tmp_path: Path) -> tuple[Path, WorkspaceIndex, DocumentSnapshot]:
    (tmp_path / "util.py").write_text(UTIL)
    (tmp_path / "helpers.py").write_text(HELPERS)
    (tmp_path / "main.py").write_text(MAIN)
    index = WorkspaceIndex([tmp_path])
    index.build()
    snap = Document((tmp_path / "main.py").as_uri(), "python", 3, MAIN).snapshot()
    return tmp_path, index, snap


def test_imported_and_nearby_definitions_are_chosen_with_reasons(setup) -> None:
    root, index, snap = setup
    snippets = gather_snippets(snap, Position(5, 4), index, [], [], 500, count_words)
    by_reason = {s.reason: s for s in snippets}
    imported = by_reason["imported-definition"]
    assert Path(imported.path) == root / "util.py"
    assert imported.text.startswith("def parse_config(source):")
    assert imported.detail == "definition of `parse_config` imported at line 1"
    nearby = by_reason["nearby-identifier-definition"]
    assert Path(nearby.path) == root / "helpers.py" and "def slugify" in nearby.text
    assert "slugify" in nearby.detail
    assert all(Path(s.path) != root / "main.py" for s in snippets)
    assert all("render_table" not in s.text for s in snippets)  # imported module, but unused name


def test_similar_window_from_an_open_document(setup) -> None:
    root, index, snap = setup
    other = Document((root / "other.py").as_uri(), "python", 1, OTHER_OPEN).snapshot()
    snippets = gather_snippets(snap, Position(5, 4), index, [snap, other], [], 2000, count_words)
    [similar] = [s for s in snippets if s.reason == "similar-window"]
    assert Path(similar.path) == root / "other.py"
    assert "def configure(raw):\n    config = parse_config(raw)" in similar.text
    assert similar.range.start.line <= 46 <= 48 <= similar.range.end.line  # configure's lines
    assert similar.text.count("\n") == similar.range.end.line - similar.range.start.line
    assert "Jaccard" in similar.detail


def test_recent_edits_skip_the_current_window_and_deletions(setup) -> None:
    root, index, snap = setup
    edits = [
        Edit(str(root / "helpers.py"), Range(Position(0, 0), Position(1, 10)), "old", "def slug():\n    pass", 2.0),
        Edit(str(root / "main.py"), Range(Position(3, 0), Position(3, 10)), "x", "    config = 1", 1.0),  # near the cursor
        Edit(str(root / "util.py"), Range(Position(0, 0), Position(0, 0)), "gone", "", 0.5),
    ]
    snippets = gather_snippets(snap, Position(5, 4), None, [], edits, 500, count_words)
    assert [(Path(s.path).name, s.reason) for s in snippets] == [("helpers.py", "recent-edit")]


def test_budget_is_respected_and_zero_budget_gives_nothing(setup) -> None:
    root, index, snap = setup
    other = Document((root / "other.py").as_uri(), "python", 1, OTHER_OPEN).snapshot()
    everything = gather_snippets(snap, Position(5, 4), index, [other], [], 10_000, count_words)
    assert len(everything) == 3
    tight = gather_snippets(snap, Position(5, 4), index, [other], [], 25, count_words)
    assert sum(s.tokens for s in tight) <= 25 and tight
    assert gather_snippets(snap, Position(5, 4), index, [other], [], 0, count_words) == []
    reasons = [s.reason for s in everything]
    assert reasons == sorted(reasons, key=["imported-definition", "nearby-identifier-definition", "similar-window", "recent-edit"].index)


def test_ambiguous_names_are_skipped(tmp_path: Path) -> None:
    for i in range(6):
        (tmp_path / f"m{i}.py").write_text("def run():\n    pass\n")
    text = "def main():\n    run()\n    \n"
    (tmp_path / "main.py").write_text(text)
    index = WorkspaceIndex([tmp_path])
    index.build()
    snap = Document((tmp_path / "main.py").as_uri(), "python", 1, text).snapshot()
    options = CrossFileOptions(ambiguous_files=4)
    assert gather_snippets(snap, Position(2, 4), index, [], [], 500, count_words, options) == []


def test_best_window_scores_jaccard() -> None:
    reference = frozenset({"alpha", "beta", "gamma"})
    text = "one two\nalpha beta\ngamma delta\nthree four\n"
    window = best_window(reference, text, 2)
    assert (window.first_line, window.last_line) == (1, 2)
    assert window.score == pytest.approx(3 / 4)
    assert best_window(reference, "nothing shared here\n", 2) is None
    assert tokens_before("a b\nc d\ne fg", 2, "e f", 2) == frozenset({"c", "d", "e"})  # "f" is being typed
    assert tokens_before("a b\nc d\ne f", 2, "e f ", 2) == frozenset({"c", "d", "e", "f"})


def test_go_package_imports_bring_the_used_definitions(tmp_path: Path) -> None:
    (tmp_path / "go.mod").write_text("module example.com/shop\n\ngo 1.22\n")
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "item.go").write_text(
        "package models\n\ntype Item struct{ Name string }\n\nfunc NewItem(name string) Item { return Item{Name: name} }\n\nfunc Unused() {}\n"
    )
    text = 'package main\n\nimport "example.com/shop/models"\n\nfunc main() {\n\titem := models.NewItem("x")\n\t\n}\n'
    (tmp_path / "main.go").write_text(text)
    index = WorkspaceIndex([tmp_path])
    index.build()
    assert index.files_in(tmp_path / "models") == [str(tmp_path / "models" / "item.go")]
    snap = Document((tmp_path / "main.go").as_uri(), "go", 1, text).snapshot()
    snippets = gather_snippets(snap, Position(6, 1), index, [], [], 500, count_words)
    imported = [s for s in snippets if s.reason == "imported-definition"]
    assert [s.text.split("(")[0] for s in imported] == ["func NewItem"]
    assert imported[0].detail == "definition of `NewItem` from `example.com/shop/models` (imported at line 3)"

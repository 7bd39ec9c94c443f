"""Retrieval candidates from the IDE state, on a fixture workspace."""

from __future__ import annotations

from pathlib import Path

import pytest

from context.classify import CompletionKind
from context.constraints import build_site
from context.document import Document
from context.index import WorkspaceIndex
from context.members import disk_reader
from context.positions import TextIndex
from context.retrieval import (
    RetrievalOptions,
    call_candidates,
    context_lines,
    identifier_completions,
    previous_line,
    retrieve,
    similar,
    similar_lines,
)

CURSOR = "┃"

GEOMETRY = '''\
def centroid(points, weights=None):
    return sum(points) / len(points)


def scale(points, factor, *, origin=0):
    return [p * factor for p in points]


class Grid:
    def cell(self, row, column):
        return row, column
'''

CONFIG = '''\
from geometry import centroid, scale


def load(config):
    name = config.get("name")
    size = config.get("size")
    return name, size


def save(config, points):
    name = config.get("name")
┃
    return name, size
'''


def site_for(tmp_path: Path, marked: str):
    (tmp_path / "geometry.py").write_text(GEOMETRY)
    offset = marked.index(CURSOR)
    text = marked.replace(CURSOR, "")
    path = tmp_path / "config.py"
    path.write_text(text)
    index = WorkspaceIndex([tmp_path])
    index.build()
    snapshot = Document(path.as_uri(), "python", 1, text).snapshot()
    return build_site(snapshot, TextIndex(text).position_at(offset), CompletionKind.SINGLE_LINE, index), index


def test_line_after_the_most_similar_line_is_re_indented(tmp_path: Path) -> None:
    site, index = site_for(tmp_path, CONFIG)
    found = similar_lines(site, index, disk_reader({}), 1)
    assert [f.text for f in found] == ['    size = config.get("size")']
    assert found[0].source == "similar-line" and found[0].detail.endswith("config.py:6")
    assert previous_line(site) == '    name = config.get("name")'


def test_similar_line_keeps_what_was_typed_out(tmp_path: Path) -> None:
    site, index = site_for(tmp_path, CONFIG.replace("┃", "    size = ┃"))
    assert [f.text for f in similar_lines(site, index, disk_reader({}), 1)] == ['config.get("size")']


def test_calls_to_imported_functions_with_required_parameter_names(tmp_path: Path) -> None:
    site, index = site_for(tmp_path, CONFIG.replace("┃", "    center = ┃"))
    calls = [c.text for c in call_candidates(site, index, 4)]
    assert calls == ["centroid(points)", "scale(points, factor)"]


def test_no_call_whose_annotated_builtin_return_lacks_a_member_used_below(tmp_path: Path) -> None:
    """`center = ` followed by `center.x`: a function annotated `-> float` cannot be it (float
    has no `x`); an unannotated one, or one returning a workspace class, stays."""
    (tmp_path / "shapes.py").write_text(
        "class Point:\n    x = 0\n\n\ndef perimeter(points) -> float:\n    return 0.0\n\n\n"
        "def middle(points) -> Point:\n    return Point()\n\n\ndef first(points):\n    return points[0]\n\n\n"
        "def count(points) -> int:\n    return len(points)\n"
    )
    text = "from shapes import perimeter, middle, first, count\n\n\ndef main(points):\n    center = \n    print(center.x)\n"
    (tmp_path / "app.py").write_text(text)
    index = WorkspaceIndex([tmp_path])
    index.build()
    snapshot = Document((tmp_path / "app.py").as_uri(), "python", 1, text).snapshot()
    site = build_site(snapshot, TextIndex(text).position_at(text.index("center = ") + 9), CompletionKind.SINGLE_LINE, index)
    assert [c.text for c in call_candidates(site, index, 4)] == ["middle(points)", "first(points)"]
    used_as_int = text.replace("center.x", "center.bit_length()")
    snapshot = Document((tmp_path / "app.py").as_uri(), "python", 2, used_as_int).snapshot()
    site = build_site(snapshot, TextIndex(used_as_int).position_at(used_as_int.index("center = ") + 9), CompletionKind.SINGLE_LINE, index)
    assert "count(points)" in [c.text for c in call_candidates(site, index, 4)]


def test_calls_need_something_typed_on_the_line_and_lose_the_typed_prefix(tmp_path: Path) -> None:
    """No bare call statement at the start of a blank line (right for none of 1,259 on the
    tuning packages); after `c = cen` the call's rest."""
    site, index = site_for(tmp_path, CONFIG)
    assert call_candidates(site, index, 4) == []
    site, index = site_for(tmp_path, CONFIG.replace("┃", "    ┃"))
    assert call_candidates(site, index, 4) == []
    site, index = site_for(tmp_path, CONFIG.replace("┃", "    c = cen┃"))
    assert [c.text for c in call_candidates(site, index, 4)] == ["troid(points)"]


def test_identifier_completions_come_from_the_names_in_scope(tmp_path: Path) -> None:
    site, index = site_for(tmp_path, CONFIG.replace("┃", "    x = poi┃"))
    assert [c.text for c in identifier_completions(site, index, 4)] == ["nts"]
    site, index = site_for(tmp_path, CONFIG.replace("┃", "    x = hidden_na┃"))
    assert identifier_completions(site, index, 4) == []


def test_retrieve_merges_sources_uniquely(tmp_path: Path) -> None:
    """Each (text, source) once; a text two sources propose comes once from each, with its own
    evidence; at most `limit` distinct texts."""
    site, index = site_for(tmp_path, CONFIG)
    found = retrieve(site, index, disk_reader({}))
    keys = [(f.text, f.source) for f in found]
    assert len(keys) == len(set(keys))
    assert {"similar-line", "similar-window", "similar-context"} <= {f.source for f in found}
    assert all("\n" not in f.text and f.text.strip() for f in found)
    size = [f for f in found if f.text == '    size = config.get("size")']
    assert {f.source for f in size} >= {"similar-line", "similar-window"} and all(f.similarity > 0 for f in size)
    few = retrieve(site, index, disk_reader({}), RetrievalOptions(limit=2))
    assert len({f.text for f in few}) == 2 and {f.text for f in few} <= {f.text for f in found}


def test_context_lines_match_the_neighbours_above_and_below(tmp_path: Path) -> None:
    marked = 'def f(d):\n    a = d["a"]\n    b = d["b"]\n    return a, b\n\n\ndef g(d):\n    a = d["a"]\n┃\n    return a, b\n'
    site, _ = site_for(tmp_path, marked)
    found = context_lines(site, 1)
    assert [f.text for f in found] == ['    b = d["b"]']
    assert found[0].source == "similar-context"


def test_the_line_after_a_similar_line_skips_any_run_of_blank_lines(tmp_path: Path) -> None:
    """The candidate is the next line with code, however many blank (or whitespace) lines come
    between, in this file and in a related one; a document that is mostly blank lines (a fuzzer's
    100,000 newlines) is scanned once, not once per blank line."""
    blanks = "\n   \n\t\n" + "\n" * 20_000
    marked = CONFIG.replace('    size = config.get("size")\n', blanks + '    size = config.get("size")\n', 1)
    site, index = site_for(tmp_path, marked)
    found = similar_lines(site, index, disk_reader({}), 1)
    assert [f.text for f in found] == ['    size = config.get("size")']
    assert found[0].detail.endswith(f"config.py:{6 + blanks.count(chr(10))}")
    (tmp_path / "helpers.py").write_text('def other(config):\n    name = config.get("name")\n' + blanks + "    return name.upper()\n")
    index.build()
    related = [f for f in similar_lines(site, index, disk_reader({}), 3) if "helpers.py" in f.detail]
    assert [f.text for f in related] == ["    return name.upper()"]


def test_similar_lines_carry_their_matchs_similarity_and_support(tmp_path: Path) -> None:
    """Each candidate reports the Jaccard of the line that proposed it, and how many well-matching
    lines (at least `SUPPORT_RATIO` of the best) are followed by the same text: here two of the
    three `name = ...` lines are followed by `size = ...`, the third by `title = ...`."""
    marked = (
        'def a(config):\n    name = config.get("name")\n    size = config.get("size")\n\n\n'
        'def b(config):\n    name = config.get("name")\n    size = config.get("size")\n\n\n'
        'def c(config):\n    name = config.get("name")\n    title = config.get("title")\n\n\n'
        'def d(config):\n    name = config.get("name")\n┃\n'
    )
    site, index = site_for(tmp_path, marked)
    found = similar_lines(site, index, disk_reader({}), 3)
    by_text = {f.text: f for f in found}
    size, title = by_text['    size = config.get("size")'], by_text['    title = config.get("title")']
    assert size.similarity == title.similarity == 1.0
    assert (size.support, title.support) == (2, 1)
    assert all(0.0 < f.similarity <= 1.0 for f in found)
    assert all(f.similarity <= found[0].similarity for f in found)


def test_the_wider_window_prefers_the_match_whose_neighbours_also_match(tmp_path: Path) -> None:
    """Two `x = parse(text)` lines; only one sits between the same neighbours as the cursor
    (`text = read(path)` above it, `return x` below its follower). The one-line search picks
    the nearer match's follower; the window picks the other one's."""
    marked = (
        "def a(path):\n    text = read(path)\n    x = parse(text)\n    x.check()\n    return x\n\n\n"
        "def b(stream):\n    text = stream.read()\n    x = parse(text)\n    log(x)\n    stream.close()\n\n\n"
        "def c(path):\n    text = read(path)\n    x = parse(text)\n┃\n    return x\n"
    )
    site, index = site_for(tmp_path, marked)
    by_line, by_window = similar(site, index, disk_reader({}), 1, 1)
    assert [f.text for f in by_line] == ["    log(x)"]
    assert [f.text for f in by_window] == ["    x.check()"] and by_window[0].source == "similar-window"
    assert 0.0 < by_window[0].similarity <= 1.0


# (language, file name, a sibling with the line that answers, the file with the cursor)
SIBLINGS = [
    ("javascript", "orders.js", "function load(config) {\n  const name = config.get('name');\n  const size = config.get('size');\n}\n",
     "function save(config) {\n  const name = config.get('name');\n┃\n}\n"),
    ("typescript", "orders.ts", "export function load(config: Config) {\n  const name = config.get('name');\n  const size = config.get('size');\n}\n",
     "export function save(config: Config) {\n  const name = config.get('name');\n┃\n}\n"),
    ("go", "orders.go", "package orders\n\nfunc Load(config Config) {\n\tname := config.Get(\"name\")\n\tsize := config.Get(\"size\")\n}\n",
     "package orders\n\nfunc Save(config Config) {\n\tname := config.Get(\"name\")\n┃\n}\n"),
    ("rust", "orders.rs", "fn load(config: &Config) {\n    let name = config.get(\"name\");\n    let size = config.get(\"size\");\n}\n",
     "fn save(config: &Config) {\n    let name = config.get(\"name\");\n┃\n}\n"),
]


@pytest.mark.parametrize(("language", "sibling", "other", "marked"), SIBLINGS)
def test_similar_lines_come_from_files_of_the_same_language(tmp_path: Path, language, sibling, other, marked) -> None:
    """The cursor's file has no line after its `name` line; its sibling in the same language does."""
    (tmp_path / sibling).write_text(other)
    (tmp_path / "noise.py").write_text("def load(config):\n    name = config.get('name')\n    size = 1\n")
    text = marked.replace(CURSOR, "")
    path = tmp_path / ("main" + Path(sibling).suffix)
    path.write_text(text)
    index = WorkspaceIndex([tmp_path])
    index.build()
    snapshot = Document(path.as_uri(), language, 1, text).snapshot()
    site = build_site(snapshot, TextIndex(text).position_at(marked.index(CURSOR)), CompletionKind.SINGLE_LINE, index)
    found = similar_lines(site, index, disk_reader({}), 1)
    expected = [line for line in other.splitlines() if "size" in line][0]  # indented as the file indents (Go: a tab)
    assert [f.text for f in found] == [expected] and found[0].detail.startswith(str(tmp_path / sibling))

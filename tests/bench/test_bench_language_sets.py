"""The held-out language sets: which lines become holes, which files make the workspace, and the
baselines reading each file as its language (no download: a package directory made here; the
files open with a long comment, as the sets skip files under 500 characters)."""

from __future__ import annotations

import random
from pathlib import Path

from bench.bench_languages import baseline_answers
from bench.bench_quality import BASELINE_ROWS
from bench.language_sets import Source, _holes, _workspace

GO = "// " + "x" * 500 + """
package shapes

// Area of a rectangle.
func Area(w, h int) int {
\treturn w * h
}

func Perimeter(w, h int) int {
\treturn 2 * (w + h)
}
"""


def test_holes_are_code_lines_of_the_sources_and_tests_stay_out(tmp_path: Path) -> None:
    package = tmp_path / "package"
    (package / "internal").mkdir(parents=True)
    (package / "shapes.go").write_text(GO)
    (package / "shapes_test.go").write_text(GO.replace("package shapes", "package shapes_test"))
    (package / "internal" / "more.go").write_text(GO.replace("Area", "Volume"))
    source = Source("go", "deb", "x=1", "BSD-3-Clause", ("package",), ".go")
    root = _workspace(package, tmp_path / "work", source)
    assert sorted(p.relative_to(root).as_posix() for p in root.rglob("*.go")) == ["internal/more.go", "shapes.go"]
    items = _holes(root, source, 100, random.Random(0))
    targets = {item.target for item in items}
    assert targets == {"package shapes", "func Area(w, h int) int {", "\treturn w * h", "func Perimeter(w, h int) int {",
                       "\treturn 2 * (w + h)", "func Volume(w, h int) int {"}
    item = next(i for i in items if i.target == "\treturn 2 * (w + h)")
    assert item.text.split("\n")[item.line] == "" and item.set == "go" and item.root == root


def test_the_baselines_read_the_file_as_its_language(tmp_path: Path) -> None:
    (tmp_path / "a.go").write_text(GO)
    text = GO.replace("\treturn 2 * (w + h)", "")
    (tmp_path / "b.go").write_text(text)
    source = Source("go", "deb", "x=1", "BSD-3-Clause", (".",), ".go")
    item = next(i for i in _holes(tmp_path, source, 100, random.Random(0)) if i.path.name == "b.go" and i.target == "\treturn w * h")
    answers = baseline_answers(item, "go", {})
    assert answers[BASELINE_ROWS[0]] == "func Area(w, h int) int {"
    assert answers[BASELINE_ROWS[1]] == "\treturn w * h"  # the line after the same line in a.go, indented with its tab

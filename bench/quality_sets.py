"""The evaluation sets of `bench_quality.py` and the tuning set of `fit_rerank.py`.

Every item is one blanked line: a workspace directory, a file in it, the file's text with the
line emptied (its newline kept), the line number and the original line (the target, indentation
included). The completion is asked at the start of the blanked line, or, for a typed item, after
the part of the line already typed (`column`; the file keeps that part, and the completion
should insert the rest, `expected`).

Sets (none of this code or data is in the training corpus: `bench/` is not scanned, and the
packages below are not installed where `training.corpus` looks):
- `humaneval`: single-line infilling of the HumanEval canonical solutions (`training.humaneval`),
  a deterministic subset (every k-th hole) sized by `--humaneval`; pass@1 runs the tests.
- `heldout`: random lines of the CPython standard library files that the training corpus holds
  out (`training.corpus.split_of`), each file alone in a workspace.
- `repo`: real multi-file packages from PyPI that the training corpus does not contain
  (`EVAL_PACKAGES`), downloaded once with `pip download --no-deps` into `--cache`, each opened
  as the workspace; the blanked lines use a name that the file imports from another file of the
  package.
- `repo-typed`: the same packages and kind of lines, typed up to the cursor as an editor asks
  mid-line: after an assignment's `=`, a `return`, `yield`, `raise`, `assert`, `if`, `elif` or
  `while` keyword, or a call's `(` (`package_typed_items`).
- `tuning` (for the reranker's weights only, never evaluated): the same constructions on other
  packages (`TUNING_PACKAGES`).

Invariants: the items depend only on the package versions, the flags and the seed.
"""

from __future__ import annotations

import random
import re
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from dataclasses import dataclass
from pathlib import Path

from context.index import WorkspaceIndex
from context.languages import language_named
from training import humaneval
from training.corpus import split_of

EVAL_PACKAGES = ("toolz==1.2.0", "tomlkit==0.15.2", "humanize==4.17.0", "marshmallow==4.4.0")  # BSD-3, MIT, MIT, MIT
TUNING_PACKAGES = (  # the reranker's tuning set: nine packages, so that a package left out of a fit is one of many
    "isodate==0.7.2", "pyrsistent==0.20.0", "more-itertools==11.2.1",  # BSD-3, MIT, MIT
    "arrow==1.4.0", "boltons==26.2.0", "funcy==2.1", "glom==25.12.0", "sqlparse==0.6.1", "wcmatch==12.0.4",  # Apache-2.0, BSD x4, MIT
)
_IDENT = re.compile(r"[A-Za-z_]\w*")
_SKIPPED = frozenset({"string", "import_statement", "import_from_statement"})
# a typed item's cursor: after an assignment's `=`, a statement keyword, or a call's first `(`
TYPED_PREFIX = re.compile(
    r"\s*(?:(?:return|yield|raise|assert|if|elif|while)\s+|[\w.\[\]\"', ]+?\s*(?<![=!<>])[-+*/|&%]?=(?!=)\s*|[\w.]+\()"
)


@dataclass(frozen=True, slots=True)
class Item:
    set: str
    root: Path  # the workspace
    path: Path  # the file, inside root
    text: str  # the file with the line blanked
    line: int  # 0-based
    target: str  # the original line
    task_id: str = ""  # HumanEval problem
    column: int = 0  # characters of the line already typed (the cursor's column)

    @property
    def typed(self) -> str:
        return self.target[: self.column]

    @property
    def expected(self) -> str:
        """What the completion should insert at the cursor."""
        return self.target[self.column :]


def humaneval_items(work: Path, count: int) -> tuple[list[Item], dict[str, humaneval.Problem]]:
    """`count` holes spread evenly over all HumanEval holes (every k-th), each problem in its own workspace."""
    problems = humaneval.load_problems()
    holes = [(p, h) for p in problems for h in humaneval.line_holes(p)]
    step = max(1, len(holes) // max(1, count))
    items = []
    for problem, hole in holes[::step][:count]:
        root = work / "humaneval" / problem.task_id.replace("/", "_").lower()
        path = root / "solution.py"
        text = hole.prefix + hole.suffix
        _write(path, text)
        items.append(Item("humaneval", root, path, text, hole.prefix.count("\n"), hole.target, problem.task_id))
    return items, {p.task_id: p for p in problems}


def heldout_items(work: Path, files: int, per_file: int, seed: int = 11) -> list[Item]:
    """Random non-blank lines of held-out standard-library files (each alone in a workspace)."""
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    candidates = sorted(
        p for p in stdlib.rglob("*.py")
        if "site-packages" not in p.parts and "test" not in p.parts and split_of(str(p.relative_to(stdlib))) == "heldout"
        and 2_000 < p.stat().st_size < 60_000
    )
    rng = random.Random(seed)
    chosen = rng.sample(candidates, min(files, len(candidates)))
    items = []
    for source in sorted(chosen):
        rel = source.relative_to(stdlib)
        text = source.read_text(encoding="utf-8", errors="replace")
        lines = text.split("\n")
        code = [i for i, line in enumerate(lines) if line.strip() and not line.lstrip().startswith("#")]
        for line in sorted(rng.sample(code, min(per_file, len(code)))):
            root = work / "heldout" / str(rel).replace("/", "_").removesuffix(".py") / f"L{line}"
            items.append(_blanked("heldout", root, root / source.name, lines, line))
    for item in items:
        _write(item.path, item.text)
    return items


def package_items(cache: Path, specs: tuple[str, ...], per_package: int, set_name: str, seed: int = 11) -> list[Item]:
    """Lines using a name imported from another file of the package, `per_package` per package."""
    items = []
    for spec in specs:
        root = fetch_package(cache, spec)
        items += _cross_file_lines(root, set_name, per_package, random.Random(f"{seed}:{spec}"))
    return items


def package_random_items(cache: Path, specs: tuple[str, ...], per_package: int, set_name: str, seed: int = 12) -> list[Item]:
    """Random non-blank code lines of the packages' files (outside tests, docstrings, imports)."""
    items = []
    for spec in specs:
        root = fetch_package(cache, spec)
        rng = random.Random(f"{seed}:{spec}")
        found = []
        for path in sorted(p for p in root.rglob("*.py") if "tests" not in p.parts):
            text = path.read_text(encoding="utf-8")
            skipped = _skipped_lines(text)
            found += [(path, i) for i, line in enumerate(text.split("\n"))
                      if line.strip() and i not in skipped and not line.lstrip().startswith(("#", "import ", "from "))]
        for path, line in sorted(rng.sample(found, min(per_package, len(found)))):
            items.append(_blanked(set_name, root, path, path.read_text(encoding="utf-8").split("\n"), line))
    return items


def fetch_package(cache: Path, spec: str) -> Path:
    """The unpacked wheel of `spec` under `cache` (downloaded once, without dependencies)."""
    name = spec.split("==")[0].replace("-", "_").lower()
    root = cache / spec.replace("==", "-")
    if root.is_dir():
        return root
    cache.mkdir(parents=True, exist_ok=True)
    download = cache / "wheels"
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "-d", str(download), spec],
        check=True, stdout=subprocess.DEVNULL,
    )
    wheel = next(w for w in sorted(download.glob("*.whl")) if w.name.lower().startswith(name + "-"))
    staging = root.with_suffix(".tmp")
    shutil.rmtree(staging, ignore_errors=True)
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(staging)
    for info in staging.glob("*.dist-info"):
        shutil.rmtree(info)
    staging.rename(root)
    return root


def package_typed_items(cache: Path, specs: tuple[str, ...], per_package: int, set_name: str, seed: int = 13) -> list[Item]:
    """Lines using a name imported from another file of the package, typed up to `TYPED_PREFIX`'s
    end, `per_package` per package."""
    items = []
    for spec in specs:
        root = fetch_package(cache, spec)
        items += _cross_file_lines(root, set_name, per_package, random.Random(f"{seed}:{spec}"), typed=True)
    return items


def _typed_column(line: str) -> int | None:
    """Where a typed item's cursor goes in `line`: after its `TYPED_PREFIX`, with something left
    to complete; None when the line has no such prefix."""
    match = TYPED_PREFIX.match(line)
    return match.end() if match and line[match.end() :].strip() else None


def _cross_file_lines(root: Path, set_name: str, count: int, rng: random.Random, typed: bool = False) -> list[Item]:
    index = WorkspaceIndex([root])
    index.build()
    found: list[tuple[str, int]] = []
    for path in index.files():
        if "/tests/" in path or not path.endswith(".py"):
            continue
        imported = _imported_names(index, path)
        if not imported:
            continue
        text = Path(path).read_text(encoding="utf-8")
        strings = _skipped_lines(text)
        for i, line in enumerate(text.split("\n")):
            body = line.strip()
            if not body or i in strings or body.startswith(("#", "import ", "from ", "@")) or len(body) > 100:
                continue
            if imported & set(_IDENT.findall(body)) and (not typed or _typed_column(line) is not None):
                found.append((path, i))
    chosen = sorted(rng.sample(found, min(count, len(found))))
    items = []
    for path, line in chosen:
        lines = Path(path).read_text(encoding="utf-8").split("\n")
        items.append(_blanked(set_name, root, Path(path), lines, line, _typed_column(lines[line]) or 0 if typed else 0))
    return items


def _imported_names(index: WorkspaceIndex, path: str) -> set[str]:
    """Names `path` imports from other files of the workspace (modules imported whole included)."""
    names: set[str] = set()
    for item in index.imports_of(path):
        if item.resolved_path and item.resolved_path != path:
            names |= set(item.names) if item.names else {item.module.split(".")[-1]}
    return names


def _skipped_lines(text: str) -> set[int]:
    """Lines inside multi-line strings (docstrings) and import statements: not code to complete."""
    tree = language_named("python").parse(text.encode())
    lines: set[int] = set()
    stack = [tree.root_node]
    while stack:
        node = stack.pop()
        if node.type in _SKIPPED and node.end_point[0] > node.start_point[0]:
            lines.update(range(node.start_point[0], node.end_point[0] + 1))
        else:
            stack.extend(node.children)
    return lines


def _blanked(set_name: str, root: Path, path: Path, lines: list[str], line: int, column: int = 0) -> Item:
    text = "\n".join(lines[:line] + [lines[line][:column]] + lines[line + 1 :])
    return Item(set_name, root, path, text, line, lines[line], column=column)


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")

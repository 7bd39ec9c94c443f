"""The index watcher: files changed on disk show up in the index (context.watcher)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from context.index import WorkspaceIndex
from context.watcher import IndexWatcher

DEADLINE_S = 10.0


def eventually(condition: Callable[[], bool]) -> bool:
    """Poll `condition` until it holds or the deadline passes."""
    end = time.monotonic() + DEADLINE_S
    while time.monotonic() < end:
        if condition():
            return True
        time.sleep(0.02)
    return condition()


class Batches:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.calls: list[list[Path]] = []

    def __call__(self, paths: list[Path]) -> None:
        with self.lock:
            self.calls.append(paths)

    def changed(self) -> set[Path]:
        with self.lock:
            return {p for call in self.calls for p in call}


@pytest.fixture
def running(tmp_path: Path) -> Iterator[tuple[Path, WorkspaceIndex, Batches, IndexWatcher]]:
    (tmp_path / "a.py").write_text("def alpha():\n    pass\n")
    index = WorkspaceIndex([tmp_path])
    index.build()
    batches = Batches()
    watcher = IndexWatcher(index, on_change=batches, debounce_s=0.05)
    watcher.start()
    try:
        yield tmp_path, index, batches, watcher
    finally:
        watcher.stop()


@pytest.fixture
def watched(running: tuple[Path, WorkspaceIndex, Batches, IndexWatcher]) -> tuple[Path, WorkspaceIndex, Batches]:
    return running[:3]


def names(index: WorkspaceIndex, name: str) -> list[str]:
    return [Path(d.path).name for d in index.definitions(name)]


def test_create_modify_rename_delete(watched: tuple[Path, WorkspaceIndex, Batches]) -> None:
    root, index, batches = watched
    (root / "b.py").write_text("def beta():\n    pass\n")
    assert eventually(lambda: names(index, "beta") == ["b.py"])
    (root / "a.py").write_text("def alpha2():\n    pass\n")
    assert eventually(lambda: names(index, "alpha2") == ["a.py"] and names(index, "alpha") == [])
    (root / "b.py").rename(root / "c.py")
    assert eventually(lambda: names(index, "beta") == ["c.py"])
    (root / "c.py").unlink()
    assert eventually(lambda: names(index, "beta") == [])
    assert {root / "a.py", root / "b.py", root / "c.py"} <= batches.changed()


def test_directory_moves_and_deletes(running: tuple[Path, WorkspaceIndex, Batches, IndexWatcher]) -> None:
    root, index, _, watcher = running
    staging = root.parent / f"{root.name}-staging"
    (staging / "pkg" / "sub").mkdir(parents=True)
    (staging / "pkg" / "mod.py").write_text("def moved_in():\n    pass\n")
    (staging / "pkg").rename(root / "pkg")
    assert eventually(lambda: names(index, "moved_in") == ["mod.py"])
    assert eventually(lambda: str(root / "pkg" / "sub") in watcher.watched())
    (root / "pkg" / "sub" / "deep.py").write_text("def deep():\n    pass\n")  # seen through the new watch
    assert eventually(lambda: names(index, "deep") == ["deep.py"])
    (root / "pkg" / "sub" / "deep.py").unlink()
    (root / "pkg" / "mod.py").unlink()
    (root / "pkg" / "sub").rmdir()
    (root / "pkg").rmdir()
    assert eventually(lambda: names(index, "moved_in") == [] and names(index, "deep") == [])
    assert eventually(lambda: str(root / "pkg") not in watcher.watched())


def test_ignored_directories_are_not_watched(tmp_path: Path) -> None:
    (tmp_path / "node_modules" / "dep" / "lib").mkdir(parents=True)
    (tmp_path / "src" / "app").mkdir(parents=True)
    (tmp_path / ".gitignore").write_text("generated/\n")
    (tmp_path / "generated").mkdir()
    watcher = IndexWatcher(WorkspaceIndex([tmp_path]))
    watcher.start()
    try:
        assert watcher.watched() == [str(tmp_path), str(tmp_path / "src"), str(tmp_path / "src" / "app")]
    finally:
        watcher.stop()


def test_ignored_paths_stay_out(watched: tuple[Path, WorkspaceIndex, Batches]) -> None:
    root, index, batches = watched
    (root / "node_modules" / "x").mkdir(parents=True)
    (root / "node_modules" / "x" / "index.js").write_text("function vendored() {}\n")
    (root / "notes.txt").write_text("def text(): pass\n")
    (root / "marker.py").write_text("def marker():\n    pass\n")
    assert eventually(lambda: names(index, "marker") == ["marker.py"])
    assert index.definitions("vendored") == []
    assert all("node_modules" not in p.parts and p.suffix != ".txt" for p in batches.changed())


def test_gitignore_change_reindexes(watched: tuple[Path, WorkspaceIndex, Batches]) -> None:
    root, index, _ = watched
    (root / ".gitignore").write_text("a.py\n")
    assert eventually(lambda: index.definitions("alpha") == [])
    (root / ".gitignore").write_text("")
    assert eventually(lambda: names(index, "alpha") == ["a.py"])


def test_many_files_arrive_as_one_batch(tmp_path: Path) -> None:
    index = WorkspaceIndex([tmp_path])
    index.build()
    batches = Batches()
    watcher = IndexWatcher(index, on_change=batches, debounce_s=0.5)
    watcher.start()
    try:
        for i in range(200):
            (tmp_path / f"m{i}.py").write_text(f"def f{i}():\n    pass\n")
        assert eventually(lambda: len(index.files()) == 200)
        assert eventually(lambda: len(batches.changed()) == 200)
        assert len(batches.calls) == 1
    finally:
        watcher.stop()

"""The index saved on disk and reused by the next build (context.index_snapshot, WorkspaceIndex.build(reuse=))."""

from __future__ import annotations

import os
from pathlib import Path

import msgpack
import pytest

import context.index as index_module
from context import index_snapshot
from context.index import WorkspaceIndex

FILES = {
    "main.py": "from util import parse_config\nfrom models import User\n\ndef run():\n    return parse_config(User())\n",
    "util.py": "def parse_config(source):\n    return dict(source)\n",
    "models.py": "class User:\n    name: str = ''\n",
    "web/api.ts": 'import { format } from "./fmt";\nexport function fetchUser(id: number) { return format(id); }\n',
    "web/fmt.ts": "export function format(x: number): string { return String(x); }\n",
}


@pytest.fixture
def root(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    for name, text in FILES.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def tables(index: WorkspaceIndex) -> tuple:
    return index._definitions, index._references, index._importers, {p: (e.language, e.tags) for p, e in index._files.items()}


def saved(root: Path, tmp_path: Path) -> tuple[WorkspaceIndex, Path]:
    index = WorkspaceIndex([root])
    index.build()
    path = tmp_path / "cache" / "index.msgpack"
    index_snapshot.save(path, index.snapshot())
    return index, path


def parse_counter(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    parsed: list[str] = []
    real = index_module.tags_of_text

    def counting(language, text, path="", resolver=None):
        parsed.append(path)
        return real(language, text, path, resolver)

    monkeypatch.setattr(index_module, "tags_of_text", counting)
    return parsed


def test_a_build_from_the_snapshot_parses_nothing_and_answers_the_same(root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first, path = saved(root, tmp_path)
    parsed = parse_counter(monkeypatch)
    second = WorkspaceIndex([root])
    second.build(reuse=index_snapshot.load(path, second.roots))
    assert parsed == []
    assert second.reused == len(FILES)
    assert tables(second) == tables(first)
    assert [d.path for d in second.definitions("parse_config")] == [str(root / "util.py")]
    assert second.importers_of(root / "util.py") == [str(root / "main.py")]


def test_a_file_changed_since_is_parsed_again(root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _, path = saved(root, tmp_path)
    (root / "util.py").write_text("def load_config(source, strict=False):\n    return dict(source)\n")
    parsed = parse_counter(monkeypatch)
    index = WorkspaceIndex([root])
    index.build(reuse=index_snapshot.load(path, index.roots))
    assert parsed == [str(root / "util.py")]
    assert index.definitions("parse_config") == []
    assert [d.path for d in index.definitions("load_config")] == [str(root / "util.py")]


def test_a_file_added_since_makes_the_build_parse_everything(root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`from pkg import helpers` resolves differently once pkg/helpers.py exists, so no stored
    entry may be trusted after the set of files changed."""
    (root / "user.py").write_text("from pkg import helpers\n\nhelpers.run()\n")
    (root / "pkg").mkdir()
    (root / "pkg" / "__init__.py").write_text("")
    _, path = saved(root, tmp_path)
    (root / "pkg" / "helpers.py").write_text("def run():\n    pass\n")
    parsed = parse_counter(monkeypatch)
    index = WorkspaceIndex([root])
    index.build(reuse=index_snapshot.load(path, index.roots))
    assert index.reused == 0
    assert len(parsed) == len(FILES) + 3
    assert str(root / "user.py") in index.importers_of(root / "pkg" / "helpers.py")


def test_an_open_buffer_saves_its_file_as_read_from_disk_not_the_unsaved_text(root: Path, tmp_path: Path) -> None:
    index = WorkspaceIndex([root])
    index.build()
    index.open_buffer(root / "util.py")
    index.update_buffer(root / "util.py", "def unsaved_edit():\n    pass\n")
    assert [d.path for d in index.definitions("unsaved_edit")] == [str(root / "util.py")]
    stored = {f.path: f for f in index.snapshot().files}
    assert str(root / "main.py") in stored
    names = {d.name for d in stored[str(root / "util.py")].tags.definitions}
    assert "parse_config" in names and "unsaved_edit" not in names


def test_a_restart_with_the_same_buffer_open_parses_nothing(root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The editor reopens its buffers at every start: their files come from the snapshot too."""
    first = WorkspaceIndex([root])
    first.build()
    first.open_buffer(root / "util.py")
    first.update_buffer(root / "util.py", "def unsaved_edit():\n    pass\n")
    path = tmp_path / "cache" / "index.msgpack"
    index_snapshot.save(path, first.snapshot())
    parsed = parse_counter(monkeypatch)
    second = WorkspaceIndex([root])
    second.build(reuse=index_snapshot.load(path, second.roots))
    assert parsed == []
    assert second.reused == len(FILES)
    assert [d.path for d in second.definitions("parse_config")] == [str(root / "util.py")]


def test_closing_a_buffer_restores_the_disk_copy_unless_the_file_changed(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    index = WorkspaceIndex([root])
    index.build()
    parsed = parse_counter(monkeypatch)
    for text in ("def unsaved_edit():\n    pass\n", "def other_edit():\n    pass\n"):
        index.open_buffer(root / "util.py")
        index.update_buffer(root / "util.py", text)
        index.close_buffer(root / "util.py")
        assert [d.path for d in index.definitions("parse_config")] == [str(root / "util.py")]
        assert index.definitions("unsaved_edit") == [] and index.definitions("other_edit") == []
    assert parsed == [str(root / "util.py")] * 2  # the buffers' texts; the disk file is never re-read
    index.open_buffer(root / "util.py")
    index.update_buffer(root / "util.py", "def unsaved_edit():\n    pass\n")
    (root / "util.py").write_text("def saved_edit(x):\n    return x\n")
    index.close_buffer(root / "util.py")
    assert [d.path for d in index.definitions("saved_edit")] == [str(root / "util.py")]
    assert index.definitions("parse_config") == []
    saved = {f.path: f for f in index.snapshot().files}[str(root / "util.py")]
    assert {d.name for d in saved.tags.definitions} == {"saved_edit"}


@pytest.mark.parametrize("damage", ["truncated", "garbage", "other format", "other roots", "bad entry"])
def test_a_damaged_or_foreign_snapshot_is_ignored(root: Path, tmp_path: Path, damage: str, caplog: pytest.LogCaptureFixture) -> None:
    first, path = saved(root, tmp_path)
    data = path.read_bytes()
    raw = msgpack.unpackb(data)
    if damage == "truncated":
        path.write_bytes(data[: len(data) // 2])
    elif damage == "garbage":
        path.write_bytes(os.urandom(256))
    elif damage == "other format":
        path.write_bytes(msgpack.packb({**raw, "format": "glm5-index/0"}))
    elif damage == "other roots":
        path.write_bytes(msgpack.packb({**raw, "roots": ["/elsewhere"]}))
    else:
        raw["files"][0]["stamp"] = ["not", "a", "stamp"]
        path.write_bytes(msgpack.packb(raw))
    index = WorkspaceIndex([root])
    assert index_snapshot.load(path, index.roots) is None
    index.build(reuse=None)
    assert tables(index) == tables(first)


def test_a_missing_snapshot_loads_as_none(tmp_path: Path) -> None:
    assert index_snapshot.load(tmp_path / "absent.msgpack", ("/ws",)) is None


def test_a_failed_write_keeps_the_previous_snapshot(root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first, path = saved(root, tmp_path)
    before = path.read_bytes()

    def full_disk(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(index_snapshot.os, "replace", full_disk)
    with pytest.raises(OSError):
        index_snapshot.save(path, first.snapshot())
    assert path.read_bytes() == before
    assert [p.name for p in path.parent.iterdir()] == ["index.msgpack"]


def test_adopting_compiles_the_tags_queries_a_parse_would_have(root: Path, tmp_path: Path) -> None:
    """The first completion's retrieval extracts tags; it must not pay for compiling the query."""
    from context import languages

    _, path = saved(root, tmp_path)
    languages._query_cached.cache_clear()
    index = WorkspaceIndex([root])
    index.build(reuse=index_snapshot.load(path, index.roots))
    assert index.reused == len(FILES)  # nothing was parsed
    misses = languages._query_cached.cache_info().misses
    for name in ("python", "typescript"):
        assert languages.language_named(name).tags_query is not None
    assert languages._query_cached.cache_info().misses == misses  # both were compiled by the adoption

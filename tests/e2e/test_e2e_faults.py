"""Faults around the server: a KV cache directory it cannot use, two servers on one workspace
and cache, and a hostile workspace (symlink loop, a 50 MB file, a binary and an invalid UTF-8
`.py`, 20,000 small files). `lsp_server --stdio` with a tiny random checkpoint each time; the
completion's text is random, so the tests check that one is answered, not what it says.

The read-only and full-disk cases mount a small tmpfs where the test runs as root (root writes
through a read-only mode, so only a read-only mount makes a directory read-only for it); without
root, a read-only mode does it and the full disk cannot be made, and that one case is skipped.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from lsprotocol import types

from lsp_harness import Session

pytestmark = pytest.mark.e2e

SOURCE = "def area(w, h):\n    return w * h\n\n\ndef total(rects):\n    return \n"


async def _server(model: Path, root: Path, log: Path, cache: Path | str) -> Session:
    argv = [sys.executable, "-m", "lsp_server", "--stdio", "--model", str(model), "--log-file", str(log)]
    session = await Session.start(argv, [root], init_options={"maxTokens": 4}, env={"GLM5_LSP_CACHE_DIR": str(cache)}, log_file=log)
    session.root = root
    return session


async def _completes(session: Session, name: str = "main.py") -> None:
    uri = session.create(name, SOURCE)
    result = await asyncio.wait_for(session.inline(uri, 5, 11), 120)
    assert all(isinstance(item.insert_text, str) for item in result.items)


@contextlib.contextmanager
def _tmpfs(path: Path, options: str) -> Iterator[bool]:
    """A tmpfs at `path` with mount `options`; yields False where mounting is not allowed."""
    path.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(path)], capture_output=True).returncode:
        yield False
        return
    try:
        yield True
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


async def _complete_with_cache(model: Path, tmp_path: Path, cache: Path, completions: int = 1) -> str:
    """Start a server on an empty workspace with KV cache dir `cache`, answer `completions`
    completions (each in its own file), stop it cleanly; the server's whole log."""
    root, log = tmp_path / "ws", tmp_path / "server.log"
    root.mkdir()
    session = await _server(model, root, log, cache)
    try:
        for i in range(completions):
            await _completes(session, f"f{i}.py")
        await session.wait_ready(120)
        assert (await session.stats())["engine"]["requests_finished"] >= completions
    finally:
        assert await session.stop() == 0
    return log.read_text()


async def test_a_cache_path_that_is_a_file_leaves_completions_working_and_says_why(tiny_checkpoint, tmp_path):
    cache = tmp_path / "cache-is-a-file"
    cache.write_text("not a directory")
    assert "no persistent KV cache" in await _complete_with_cache(tiny_checkpoint, tmp_path, cache)


async def test_a_read_only_cache_dir_leaves_completions_working_and_says_why(tiny_checkpoint, tmp_path):
    cache = tmp_path / "ro-cache"
    with _tmpfs(cache, "ro,size=1m") as mounted:
        if not mounted:
            if os.geteuid() == 0:
                pytest.skip("root, and mounting a read-only tmpfs is not allowed here")
            cache.chmod(0o555)
        log = await _complete_with_cache(tiny_checkpoint, tmp_path, cache)
    assert "no persistent KV cache" in log and ("Read-only file system" in log or not mounted)


async def test_a_full_disk_leaves_completions_working_and_says_why(tiny_checkpoint, tmp_path):
    cache = tmp_path / "tiny-disk"
    with _tmpfs(cache, "size=16k") as mounted:
        if not mounted:
            pytest.skip("a full disk needs a tiny tmpfs, and mounting one is not allowed here")
        log = await _complete_with_cache(tiny_checkpoint, tmp_path, cache, completions=3)
    assert "No space left on device" in log, log[-3000:]


async def test_two_servers_on_one_workspace_and_cache_complete_concurrently(tiny_checkpoint, tmp_path):
    root, cache = tmp_path / "ws", tmp_path / "shared-cache"
    root.mkdir()
    (root / "lib.py").write_text("def helper(x):\n    return x * 2\n")
    a, b = await asyncio.gather(*(_server(tiny_checkpoint, root, tmp_path / f"server-{n}.log", cache) for n in "ab"))
    try:
        await asyncio.gather(a.wait_ready(120), b.wait_ready(120))
        for _ in range(3):
            await asyncio.gather(_completes(a, "a.py"), _completes(b, "b.py"))
    finally:
        codes = await asyncio.gather(a.stop(), b.stop())
    assert codes == [0, 0]
    assert any(cache.rglob("*")), "neither server persisted anything to the shared cache"


def _hostile_workspace(root: Path, small_files: int) -> None:
    (root / "loop").mkdir(parents=True)
    (root / "loop" / "again").symlink_to(root / "loop", target_is_directory=True)
    (root / "self").symlink_to(root, target_is_directory=True)
    with open(root / "huge.py", "wb") as f:
        line = b"value = 'x' * 40  # padding to make a fifty megabyte file\n"
        for _ in range(50 * 1024 * 1024 // len(line) + 1):
            f.write(line)
    (root / "binary.py").write_bytes(b"\x00\x01\x02def f():\x00\xff" * 1000)
    (root / "latin1.py").write_bytes("s = 'café'\n".encode("latin-1"))
    for i in range(small_files):
        folder = root / "many" / f"d{i // 500}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"m{i}.py").write_text(f"def f{i}():\n    return {i}\n")


async def test_a_hostile_workspace_is_indexed_and_the_server_answers_meanwhile(tiny_checkpoint, tmp_path):
    root = tmp_path / "ws"
    _hostile_workspace(root, 20_000)
    session = await _server(tiny_checkpoint, root, tmp_path / "server.log", tmp_path / "cache")
    try:
        uri = session.create("main.py", SOURCE)
        answered = await asyncio.wait_for(session.command("glm5.stats"), 60)  # while indexing
        assert answered["model"]["state"] in ("loading", "ready", "unloaded")
        result = await asyncio.wait_for(session.inline(uri, 5, 11), 300)
        assert all(isinstance(item.insert_text, str) for item in result.items)
        await session.wait_ready(600)
        index = (await session.stats())["index"]
        assert index["files"] >= 20_000
        reasons = {Path(p).name: why for p, why in index["skipped"].items()}
        assert {"huge.py", "binary.py", "latin1.py"} <= set(reasons), reasons
        where = types.DefinitionParams(text_document=types.TextDocumentIdentifier(uri=uri), position=types.Position(line=5, character=4))
        assert await asyncio.wait_for(session.client.text_document_definition_async(where), 60) is not None
    finally:
        assert await session.stop() == 0

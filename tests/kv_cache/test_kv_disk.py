"""The disk tier on its own: round trips, every kind of bad file, recovery, LRU cap, clearing,
index merging between writers, and the workspace directory layout."""

from __future__ import annotations

import hashlib
import logging
import os
import struct
from pathlib import Path

import msgpack
import pytest

from model_runtime.kvstore import paths
from model_runtime.kvstore.blockfile import MAGIC
from model_runtime.kvstore.disk import INDEX_NAME, DiskStore
from model_runtime.kvstore.host import HostTier

from kv_support import FINGERPRINT, LAYOUT, block_entry, block_hash, block_payload, block_tokens


def open_store(path: Path, capacity: int = 1 << 30, fingerprint: str = FINGERPRINT, layout=LAYOUT) -> DiskStore:
    return DiskStore(path, fingerprint, layout, capacity)


def block_file(store: DiskStore, n: int) -> Path:
    return store.blocks_dir / f"{block_hash(n).hex()}.kvb"


def load(store: DiskStore, n: int) -> bytes | None:
    payload = store.get(block_hash(n), block_tokens(n))
    return None if payload is None else bytes(payload)


def test_blocks_survive_a_restart_byte_for_byte(tmp_path):
    store = open_store(tmp_path)
    assert store.put(block_entry(n) for n in range(3)) == 3
    assert store.put([block_entry(1)]) == 0  # already stored: not rewritten
    reopened = open_store(tmp_path)
    assert len(reopened) == 3
    assert all(load(reopened, n) == block_payload(n) for n in range(3))
    assert load(reopened, 7) is None


def _flip_payload_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[-40] ^= 0x01
    path.write_bytes(bytes(data))


def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[:-100])


def _append(path: Path) -> None:
    path.write_bytes(path.read_bytes() + b"\0" * 16)


def _wrong_magic(path: Path) -> None:
    path.write_bytes(b"NOTMAGIC" + path.read_bytes()[8:])


def _wrong_version(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[:8] + struct.pack("<I", 99) + data[12:])


def _empty(path: Path) -> None:
    path.write_bytes(b"")


@pytest.mark.parametrize("damage", [_flip_payload_byte, _truncate, _append, _wrong_magic, _wrong_version, _empty])
def test_a_damaged_block_is_discarded_with_a_log_line(tmp_path, caplog, damage):
    store = open_store(tmp_path)
    store.put(block_entry(n) for n in range(2))
    damage(block_file(store, 0))
    with caplog.at_level(logging.WARNING, logger="model_runtime.kvstore.disk"):
        assert load(store, 0) is None
    assert "discarding" in caplog.text
    assert not block_file(store, 0).exists()
    assert load(store, 1) == block_payload(1)
    assert block_hash(0) not in open_store(tmp_path)


def test_a_damaged_block_found_at_open_is_discarded_before_use(tmp_path, caplog):
    store = open_store(tmp_path)
    store.put(block_entry(n) for n in range(2))
    (tmp_path / INDEX_NAME).unlink()  # so opening must read the files' headers
    _wrong_magic(block_file(store, 0))
    with caplog.at_level(logging.WARNING, logger="model_runtime.kvstore.disk"):
        reopened = open_store(tmp_path)
    assert "discarding" in caplog.text
    assert len(reopened) == 1 and load(reopened, 1) == block_payload(1)


def _as_format_1(path: Path) -> None:
    """What the release before CRC-32 digests wrote: version 1 and a 16-byte blake2b digest."""
    data = path.read_bytes()[:-4]
    body = data[:8] + struct.pack("<I", 1) + data[12:]
    path.write_bytes(body + hashlib.blake2b(body, digest_size=16).digest())


def test_blocks_of_the_previous_format_are_dropped_quietly_at_open_and_at_read(tmp_path, caplog):
    """After an upgrade every stored block is in the old format: each is deleted and recomputed
    once, logged at INFO (not a warning per file, as damage is)."""
    store = open_store(tmp_path)
    store.put(block_entry(n) for n in range(3))
    for n in range(3):
        _as_format_1(block_file(store, n))
    index = msgpack.unpackb((tmp_path / INDEX_NAME).read_bytes())
    (tmp_path / INDEX_NAME).write_bytes(msgpack.packb({**index, "version": 1}))  # the old index: opening reads the files' headers
    with caplog.at_level(logging.INFO, logger="model_runtime.kvstore.disk"):
        reopened = open_store(tmp_path)
        assert len(reopened) == 0 and not any(reopened.blocks_dir.iterdir())
    assert "format version 1" in caplog.text and "earlier release's (version 1)" in caplog.text
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    current = open_store(tmp_path / "current")
    current.put([block_entry(0)])
    _as_format_1(block_file(current, 0))  # still indexed: found at read
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="model_runtime.kvstore.disk"):
        assert load(current, 0) is None
    assert "format version 1" in caplog.text and not block_file(current, 0).exists()
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


@pytest.mark.parametrize(
    "foreign",
    [
        {"fingerprint": "ffffffffffffffffffffffffffffffff"},
        {"layout": {**LAYOUT, "kv": [2, 8, 8]}},  # another shape
        {"layout": {**LAYOUT, "dtype": "bfloat16"}},
    ],
)
def test_a_foreign_block_is_never_loaded(tmp_path, caplog, foreign):
    open_store(tmp_path).put([block_entry(0)])
    with caplog.at_level(logging.WARNING, logger="model_runtime.kvstore.disk"):
        other = open_store(tmp_path, **foreign)
        assert load(other, 0) is None
    assert "discarding" in caplog.text
    assert not any(other.blocks_dir.iterdir())


def test_a_block_with_other_token_ids_is_not_returned(tmp_path):
    store = open_store(tmp_path)
    store.put([block_entry(0)])
    assert store.get(block_hash(0), (9, 9, 9, 9)) is None  # a hash collision: the tokens decide


def test_a_block_file_under_another_blocks_name_is_rejected(tmp_path):
    store = open_store(tmp_path)
    store.put(block_entry(n) for n in range(2))
    os.replace(block_file(store, 1), block_file(store, 0))
    assert load(store, 0) is None


def test_an_unreadable_index_is_rebuilt_from_the_block_files(tmp_path, caplog):
    open_store(tmp_path).put(block_entry(n) for n in range(3))
    (tmp_path / INDEX_NAME).write_bytes(b"\xc1garbage")
    with caplog.at_level(logging.WARNING, logger="model_runtime.kvstore.disk"):
        store = open_store(tmp_path)
    assert "rebuilding" in caplog.text
    assert all(load(store, n) == block_payload(n) for n in range(3))
    raw = msgpack.unpackb((tmp_path / INDEX_NAME).read_bytes())
    assert len(raw["blocks"]) == 3  # the rebuilt index was written back


def test_dead_writers_temporary_files_are_removed_and_live_ones_kept(tmp_path):
    store = open_store(tmp_path)
    dead = store.blocks_dir / f".{block_hash(5).hex()}.kvb.999999999.abcd.tmp"
    live = store.blocks_dir / f".{block_hash(6).hex()}.kvb.{os.getppid()}.abcd.tmp"
    dead.write_bytes(MAGIC)
    live.write_bytes(MAGIC)
    open_store(tmp_path)
    assert not dead.exists() and live.exists()


def test_disk_cap_evicts_least_recently_used_blocks(tmp_path):
    probe = open_store(tmp_path / "probe")
    probe.put([block_entry(0)])
    size = probe.total_bytes
    store = open_store(tmp_path / "s", capacity=3 * size)
    for n in range(3):
        store.put([block_entry(n)])
    assert load(store, 0) is not None  # 0 is now more recently used than 1
    store.put([block_entry(3)])
    assert store.total_bytes <= 3 * size
    assert block_hash(1) not in store and not block_file(store, 1).exists()
    assert all(block_hash(n) in store for n in (0, 2, 3))


def test_clear_deletes_every_block_and_reports_the_bytes(tmp_path):
    store = open_store(tmp_path)
    store.put(block_entry(n) for n in range(3))
    on_disk = sum(p.stat().st_size for p in store.blocks_dir.iterdir()) + (tmp_path / INDEX_NAME).stat().st_size
    assert store.clear() == on_disk
    assert len(store) == 0 and list(store.blocks_dir.iterdir()) == []
    assert len(open_store(tmp_path)) == 0


def test_two_writers_merge_their_index_updates(tmp_path):
    a, b = open_store(tmp_path), open_store(tmp_path)
    a.put([block_entry(0)])
    b.put([block_entry(1)])  # b's index write must keep a's block
    assert block_hash(0) in b  # b re-reads the index it did not write
    assert load(b, 0) == block_payload(0)
    fresh = open_store(tmp_path)
    assert {block_hash(0).hex(), block_hash(1).hex()} == set(fresh.entries)


def test_a_block_evicted_by_another_process_is_a_plain_miss(tmp_path, caplog):
    a, b = open_store(tmp_path), open_store(tmp_path)
    a.put([block_entry(0)])
    assert block_hash(0) in b
    a.clear()
    with caplog.at_level(logging.WARNING):
        assert load(b, 0) is None
    assert "discarding" not in caplog.text


def test_write_errors_are_logged_not_raised(tmp_path, caplog, monkeypatch):
    import model_runtime.kvstore.disk as disk

    store = open_store(tmp_path)
    store.put([block_entry(0)])
    real = disk.atomic_write

    def full_disk(path, parts):
        if path.suffix == ".kvb":
            raise OSError(28, "No space left on device")
        return real(path, parts)

    monkeypatch.setattr(disk, "atomic_write", full_disk)
    with caplog.at_level(logging.WARNING, logger="model_runtime.kvstore.disk"):
        assert store.put([block_entry(1)]) == 0
    assert "No space left" in caplog.text
    assert load(open_store(tmp_path), 0) == block_payload(0)


# ---- workspace layout ------------------------------------------------------------------------
def test_workspace_id_ignores_order_spelling_and_duplicates(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir(), b.mkdir()
    (tmp_path / "link").symlink_to(a)
    same = [[str(a), str(b)], [f"{b}/", str(a), str(a)], [str(tmp_path / "b" / ".." / "a"), str(b)], [str(tmp_path / "link"), str(b)]]
    assert len({paths.workspace_id(roots) for roots in same}) == 1
    assert paths.workspace_id([str(a)]) != paths.workspace_id([str(a), str(b)])
    with pytest.raises(ValueError, match="root"):
        paths.workspace_id([])


def test_cache_root_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.delenv(paths.ENV_VAR, raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert paths.cache_root() == tmp_path / "home" / ".cache" / "glm5-lsp"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert paths.cache_root() == tmp_path / "xdg" / "glm5-lsp"
    monkeypatch.setenv(paths.ENV_VAR, str(tmp_path / "explicit"))
    assert paths.cache_root() == tmp_path / "explicit"


def test_store_dir_is_keyed_by_workspace_and_model(tmp_path):
    root = tmp_path / "cache"
    one = paths.store_dir([str(tmp_path / "w1")], FINGERPRINT, root)
    two = paths.store_dir([str(tmp_path / "w2")], FINGERPRINT, root)
    other_model = paths.store_dir([str(tmp_path / "w1")], "f" * 32, root)
    assert len({one, two, other_model}) == 3 and one.parent == other_model.parent
    assert paths.marked_workspaces(root) == sorted({one.parent, two.parent})
    for bad in ("", "../x", "a/b", ".hidden"):
        with pytest.raises(ValueError, match="store key"):
            paths.store_dir([str(tmp_path)], bad, root)


def test_two_workspaces_never_share_blocks(tmp_path):
    root = tmp_path / "cache"
    one = open_store(paths.store_dir([str(tmp_path / "w1")], FINGERPRINT, root))
    two = open_store(paths.store_dir([str(tmp_path / "w2")], FINGERPRINT, root))
    one.put([block_entry(0)])
    assert block_hash(0) not in two and load(two, 0) is None
    two.put([block_entry(0)])
    one.clear()
    assert load(two, 0) == block_payload(0)


# ---- host tier ---------------------------------------------------------------------------------
class Item:
    def __init__(self, nbytes: int) -> None:
        self.nbytes = nbytes


def test_host_tier_is_lru_within_its_byte_cap():
    tier: HostTier[str, Item] = HostTier(100)
    a, b, c = Item(40), Item(40), Item(40)
    assert tier.put("a", a) == [] and tier.put("b", b) == []
    assert tier.get("a") is a  # b is now the least recently used
    assert tier.put("c", c) == [b]
    assert tier.total_bytes == 80 and "b" not in tier
    huge = Item(500)
    assert tier.put("huge", huge) == [a, c, huge]  # larger than the whole cap: nothing stays
    assert tier.total_bytes == 0 and len(tier) == 0
    tier.put("a", a)
    assert tier.clear() == 40 and tier.get("a") is None

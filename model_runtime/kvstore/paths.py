"""Where the persistent KV cache lives: one directory per workspace and model.

Layout: `<cache root>/<workspace id>/<store key>/` (and `<cache root>/inductor/` for compiled
decoding's code) where the cache root is
`${GLM5_LSP_CACHE_DIR:-${XDG_CACHE_HOME:-~/.cache}/glm5-lsp}`, the workspace id is a hash of the
workspace's resolved root paths, and the store key is the model fingerprint (weights, config,
dtype, runtime version). Each workspace directory also holds `workspace.msgpack`, naming its roots,
which marks it as ours: clearing every workspace removes only marked directories.

Invariants: no torch; the workspace id does not depend on the order, spelling (`a/../b`, trailing
slashes, symlinks) or duplicates of the roots; two different root sets never share a directory.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from pathlib import Path

import msgpack

from model_runtime.kvstore.blockfile import atomic_write

ENV_VAR = "GLM5_LSP_CACHE_DIR"
WORKSPACE_MARKER = "workspace.msgpack"


def cache_root() -> Path:
    """The cache root from the environment (not created)."""
    explicit = os.environ.get(ENV_VAR, "").strip()
    if explicit:
        return Path(explicit).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME", "").strip()
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "glm5-lsp"


def inductor_dir() -> Path:
    """Where compiled decoding keeps Inductor's compiled code (`model_runtime.compiled`): under the
    cache root, beside the workspaces, but not one of them (clearing them leaves it)."""
    return cache_root() / "inductor"


def canonical_roots(roots: Sequence[str | os.PathLike]) -> list[str]:
    """Sorted, de-duplicated, resolved absolute root paths; ValueError when there are none."""
    resolved = sorted({str(Path(r).expanduser().resolve()) for r in roots})
    if not resolved:
        raise ValueError("a workspace needs at least one root path")
    return resolved


def workspace_id(roots: Sequence[str | os.PathLike]) -> str:
    """A stable 32-hex-digit id of a set of workspace roots."""
    h = hashlib.blake2b(digest_size=16, person=b"glm5-workspace")
    for root in canonical_roots(roots):
        h.update(root.encode("utf-8", "surrogatepass") + b"\0")
    return h.hexdigest()


def store_dir(roots: Sequence[str | os.PathLike], store_key: str, root: str | os.PathLike | None = None) -> Path:
    """`<root or cache_root()>/<workspace id>/<store_key>`; writes the workspace marker."""
    if not store_key or not all(c.isalnum() or c in "-_." for c in store_key) or store_key.startswith("."):
        raise ValueError(f"store key must be a plain directory name, got {store_key!r}")
    workspace = (Path(root).expanduser() if root is not None else cache_root()) / workspace_id(roots)
    workspace.mkdir(parents=True, exist_ok=True)
    marker = workspace / WORKSPACE_MARKER
    if not marker.is_file():
        atomic_write(marker, [msgpack.packb({"roots": canonical_roots(roots)})])
    return workspace / store_key


def marked_workspaces(root: str | os.PathLike | None = None) -> list[Path]:
    """Workspace directories under the cache root that carry our marker."""
    base = Path(root).expanduser() if root is not None else cache_root()
    if not base.is_dir():
        return []
    return sorted(p for p in base.iterdir() if p.is_dir() and (p / WORKSPACE_MARKER).is_file())

"""Where a `glm5-serve` on this machine leaves its token, and where its clients find it.

Role: the daemon requires a token by default. Unless it is given a key (`--api-key-env`) or told
`--no-auth`, it makes a random one and writes it, as Jupyter does, to a file only this user can
read, named by its address: `<runtime dir>/serve-<host>-<port>.json` holding
`{"url", "token", "pid"}`. A language server pointed at that address with no `apiKeyEnv` reads
the token from there, so a local daemon needs no configuration and is closed to other users.

Runtime dir: `$GLM5_RUNTIME_DIR`, else `$XDG_RUNTIME_DIR/glm5-lsp`, else
`~/.local/share/glm5-lsp/runtime`; created mode 0700, files written mode 0600 (never readable
by another user, not even for a moment: the file is created with that mode).

Invariants: no torch, no network; a token file that is missing, unreadable, not ours, readable
by others or malformed gives no token (the request then fails with a message naming the file).
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from urllib.parse import urlsplit


def runtime_dir() -> Path:
    if os.environ.get("GLM5_RUNTIME_DIR"):
        return Path(os.environ["GLM5_RUNTIME_DIR"])
    if os.environ.get("XDG_RUNTIME_DIR"):
        return Path(os.environ["XDG_RUNTIME_DIR"]) / "glm5-lsp"
    return Path.home() / ".local" / "share" / "glm5-lsp" / "runtime"


def token_file(host: str, port: int) -> Path:
    name = host.strip("[]").replace(":", "_")
    return runtime_dir() / f"serve-{name}-{port}.json"


def token_file_for(url: str) -> Path | None:
    """The token file of the daemon at `url` (None for a URL without host)."""
    parts = urlsplit(url)
    if not parts.hostname:
        return None
    port = parts.port or (443 if parts.scheme == "https" else 80)
    host = "127.0.0.1" if parts.hostname == "localhost" else parts.hostname
    return token_file(host, port)


def write_token(host: str, port: int, url: str, token: str) -> Path:
    """Write the daemon's token file (mode 0600 from its creation); returns its path."""
    directory = runtime_dir()
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.chmod(directory, 0o700)
    path = token_file(host, port)
    path.unlink(missing_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as out:
        json.dump({"url": url, "token": token, "pid": os.getpid()}, out)
    return path


def read_token(url: str) -> str | None:
    """The token the daemon at `url` wrote, when this user owns the file and no one else can read it."""
    path = token_file_for(url)
    if path is None:
        return None
    try:
        info = path.stat()
        if info.st_uid != os.getuid() or info.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
            return None
        token = json.loads(path.read_text()).get("token")
    except (OSError, ValueError, AttributeError):
        return None
    return token if isinstance(token, str) and token else None

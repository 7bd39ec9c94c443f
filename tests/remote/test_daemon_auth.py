"""`glm5-serve` is closed by default: with no key given it makes a random token and writes it to
this user's token file for its address (mode 0600 in a 0700 folder), every route but /health
needs it, and a client configured with the address alone finds it there. `--no-auth` opens it
explicitly; `--tls-cert`/`--tls-key` serve https. The bound workspace KV store is persisted or
cleared only by the client that bound it (its lease)."""

from __future__ import annotations

import ssl
import stat
import subprocess

import httpx
import pytest

from daemon import Daemon
from model_runtime.remote.config import RemoteConfig
from model_runtime.remote.daemon_files import read_token, token_file_for, write_token


@pytest.fixture(scope="module")
def closed(tiny_checkpoint, tmp_path_factory):
    d = Daemon.start(tiny_checkpoint, tmp_path_factory.mktemp("closed") / "serve.log",
                     env={"GLM5_LSP_CACHE_DIR": str(tmp_path_factory.mktemp("kv"))})
    yield d
    assert d.stop() == 0


def test_the_daemon_needs_a_token_by_default_and_writes_it_for_this_user_only(closed, runtime_dir):
    assert httpx.get(closed.url + "/v1/models").status_code == 401
    assert httpx.post(closed.url + "/glm5/workspace", json={"roots": ["/tmp"]}).status_code == 401
    assert httpx.get(closed.url + "/health").status_code == 200
    path = token_file_for(closed.url)
    assert path is not None and path.parent == runtime_dir
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and stat.S_IMODE(runtime_dir.stat().st_mode) == 0o700
    token = read_token(closed.url)
    assert token and len(token) >= 32 and closed.key == token
    assert httpx.get(closed.url + "/v1/models", headers={"Authorization": f"Bearer {token}"}).status_code == 200
    assert RemoteConfig(closed.url).api_key() == token  # what a language server given only the URL sends


def test_the_token_file_goes_when_the_daemon_stops(tiny_checkpoint, tmp_path):
    d = Daemon.start(tiny_checkpoint, tmp_path / "serve.log")
    path = token_file_for(d.url)
    assert path.exists()
    assert d.stop() == 0
    assert not path.exists()


def test_a_token_file_others_can_read_is_not_trusted(runtime_dir):
    path = write_token("127.0.0.1", 9, "http://127.0.0.1:9", "secret-token")
    assert read_token("http://localhost:9") == "secret-token"
    path.chmod(0o644)
    assert read_token("http://127.0.0.1:9") is None
    path.unlink()


def test_only_the_client_that_bound_a_workspace_persists_or_clears_it(closed, tmp_path):
    auth = {"Authorization": f"Bearer {closed.key}"}
    mine = httpx.post(closed.url + "/glm5/workspace", json={"roots": [str(tmp_path / "a")]}, headers=auth, timeout=30).json()
    assert mine["lease"]
    refused = httpx.post(closed.url + "/glm5/persist", json={}, headers=auth, timeout=30)
    assert refused.status_code == 403 and "another client's workspace" in refused.json()["error"]["message"]
    assert httpx.post(closed.url + "/glm5/cache/clear", json={"workspace": True}, headers=auth, timeout=30).status_code == 403
    lease = {**auth, "X-Glm5-Workspace": mine["lease"]}
    assert httpx.post(closed.url + "/glm5/persist", json={}, headers=lease, timeout=30).status_code == 200
    theirs = httpx.post(closed.url + "/glm5/workspace", json={"roots": [str(tmp_path / "b")]}, headers=auth, timeout=30).json()
    assert theirs["lease"] != mine["lease"]
    assert httpx.post(closed.url + "/glm5/cache/clear", json={"workspace": True}, headers=lease, timeout=30).status_code == 403
    their_lease = {**auth, "X-Glm5-Workspace": theirs["lease"]}
    assert httpx.post(closed.url + "/glm5/cache/clear", json={"workspace": True}, headers=their_lease, timeout=30).status_code == 200


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> dict[str, str]:
    d = tmp_path_factory.mktemp("pki")
    run = lambda *args: subprocess.run(["openssl", *args], cwd=d, check=True, capture_output=True, timeout=60)  # noqa: E731
    run("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", "server.key",
        "-out", "server.pem", "-days", "2", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1")
    return {name: str(d / name) for name in ("server.pem", "server.key")}


def test_no_auth_is_explicit_and_tls_is_served(tiny_checkpoint, tmp_path, pki):
    d = Daemon.start(tiny_checkpoint, tmp_path / "serve.log", extra=["--no-auth", "--tls-cert", pki["server.pem"], "--tls-key", pki["server.key"]])
    try:
        assert d.url.startswith("https://") and token_file_for(d.url).exists() is False
        assert httpx.get(d.url + "/v1/models", verify=ssl.create_default_context(cafile=pki["server.pem"])).status_code == 200
    finally:
        assert d.stop() == 0


def test_contradicting_flags_are_refused(tiny_checkpoint, tmp_path):
    with pytest.raises(AssertionError, match="--no-auth and --api-key-env"):
        Daemon.start(tiny_checkpoint, tmp_path / "serve.log", api_key="k", extra=["--no-auth"], timeout=60)

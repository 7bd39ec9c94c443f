"""TLS to the engine: a private CA is trusted through `caBundle` or `SSL_CERT_FILE`, and an
untrusted certificate fails with a message naming the URL (never a silent plain-text retry).
The CA and the server's certificate (for IP 127.0.0.1) are made here with the openssl CLI."""

from __future__ import annotations

import subprocess
import threading

import pytest

from model_runtime.api import FinishReason, GenerationRequest, SamplingParams
from model_runtime.remote.config import RemoteConfig
from model_runtime.remote.engine import RemoteEngine
from model_runtime.remote.errors import EndpointUnavailable
from scripted import Scripted, good

@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> dict[str, str]:
    d = tmp_path_factory.mktemp("pki")
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    run = lambda *args: subprocess.run(["openssl", *args], cwd=d, check=True, capture_output=True, timeout=60)  # noqa: E731
    run("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.pem", "-days", "2", "-subj", "/CN=glm5 test CA")
    run("req", *ec, "-keyout", "server.key", "-out", "server.csr", "-subj", "/CN=127.0.0.1")
    (d / "san.ext").write_text("subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\n")
    run("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
        "-out", "server.pem", "-days", "2", "-extfile", "san.ext")
    return {name: str(d / name) for name in ("ca.pem", "server.pem", "server.key")}


def complete(config: RemoteConfig) -> str:
    engine = RemoteEngine(config).start()
    done, box = threading.Event(), []
    try:
        engine.submit(GenerationRequest("t", (1, 2), SamplingParams(max_tokens=4)), None, lambda r: (box.append(r), done.set()))
        assert done.wait(30)
    finally:
        engine.shutdown()
    assert box[0].finish_reason is FinishReason.LENGTH, box[0].error
    return box[0].text


def test_ca_bundle_setting_trusts_a_private_ca(pki, monkeypatch):
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    with Scripted([good("secure")], tls=(pki["server.pem"], pki["server.key"])) as server:
        assert server.url.startswith("https://")
        assert complete(RemoteConfig(server.url, ca_bundle=pki["ca.pem"])) == "secure"


def test_ssl_cert_file_is_the_fallback(pki, monkeypatch):
    monkeypatch.setenv("SSL_CERT_FILE", pki["ca.pem"])
    with Scripted([good("via env")], tls=(pki["server.pem"], pki["server.key"])) as server:
        assert complete(RemoteConfig(server.url)) == "via env"


def test_an_untrusted_certificate_fails_with_the_url(pki, monkeypatch):
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    with Scripted([good()], tls=(pki["server.pem"], pki["server.key"])) as server:
        with pytest.raises(EndpointUnavailable, match=rf"cannot reach the engine at {server.url}.*CERTIFICATE_VERIFY_FAILED"):
            RemoteEngine(RemoteConfig(server.url, timeout_ms=5000)).start()
        assert server.requests == []

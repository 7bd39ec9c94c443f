"""Where and how to reach a remote engine: `RemoteConfig`, parsed from `initializationOptions.engine`.

Role: one frozen value naming the OpenAI-compatible endpoint (vLLM, SGLang or `glm5-serve`), the
served model's name, the *name* of the environment variable holding the API key, a CA bundle,
the per-request time bound and the client's concurrency cap.

Invariants:
- No torch, no network: parsing only.
- The API key itself never lives here (nor in any settings file): only the variable's name;
  `api_key()` reads the environment when a request is made, and `repr` never shows a key.
- Bad input raises `ValueError` naming the key, the value and what was expected.
"""

from __future__ import annotations

import os
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

KEYS = ("url", "model", "apiKeyEnv", "caBundle", "timeoutMs", "maxConcurrency", "promptFormat")
PROMPT_FORMATS = ("auto", "ids", "text")


@dataclass(frozen=True, slots=True)
class RemoteConfig:
    url: str  # base URL, e.g. http://127.0.0.1:8000 (a trailing /v1 is accepted and dropped)
    model: str | None = None  # the served model name; None: the first of GET /v1/models
    api_key_env: str | None = None  # name of the env var that holds the Bearer token
    ca_bundle: str | None = None  # PEM file of trusted CAs; else SSL_CERT_FILE, else the system store
    timeout_ms: int = 10_000  # bound on one request, retries included
    max_concurrency: int = 4  # requests in flight at once from this server
    prompt_format: str = "auto"  # "ids" (token ids), "text", or "auto": ids, text if the endpoint refuses ids

    def __post_init__(self) -> None:
        parts = urlsplit(self.url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ValueError(f"engine.url: expected an http(s) URL such as http://127.0.0.1:8000, got {self.url!r}")
        if self.timeout_ms < 100:
            raise ValueError(f"engine.timeoutMs: expected at least 100, got {self.timeout_ms}")
        if not 1 <= self.max_concurrency <= 256:
            raise ValueError(f"engine.maxConcurrency: expected 1..256, got {self.max_concurrency}")
        if self.prompt_format not in PROMPT_FORMATS:
            raise ValueError(f"engine.promptFormat: expected one of {', '.join(PROMPT_FORMATS)}, got {self.prompt_format!r}")

    @property
    def base_url(self) -> str:
        url = self.url.rstrip("/")
        return url[: -len("/v1")] if url.endswith("/v1") else url

    def api_key(self) -> str | None:
        """The key from the named environment variable (None when unset or not configured)."""
        return os.environ.get(self.api_key_env) or None if self.api_key_env else None

    def verify(self) -> ssl.SSLContext | bool:
        """httpx's `verify`: trust the CA bundle, else SSL_CERT_FILE, else the default store."""
        cafile = self.ca_bundle or os.environ.get("SSL_CERT_FILE")
        return ssl.create_default_context(cafile=cafile) if cafile else True

    @classmethod
    def from_options(cls, raw: Any) -> RemoteConfig:
        """From `initializationOptions.engine`: a URL string or an object with `KEYS`."""
        if isinstance(raw, str):
            return cls(url=raw)
        if not isinstance(raw, Mapping):
            raise ValueError(f"engine: expected a URL or an object with url, model, apiKeyEnv, ..., got {raw!r}")
        if "apiKey" in raw:
            raise ValueError("engine.apiKey: keys never come from settings; name an env var with apiKeyEnv")
        unknown = sorted(set(raw) - set(KEYS))
        if unknown:
            raise ValueError(f"engine: unknown keys {unknown} (known: {', '.join(KEYS)})")
        url = raw.get("url")
        if not isinstance(url, str):
            raise ValueError(f"engine.url: expected a URL string, got {url!r}")
        return cls(
            url=url,
            model=_optional_str(raw, "model"),
            api_key_env=_optional_str(raw, "apiKeyEnv"),
            ca_bundle=_optional_str(raw, "caBundle"),
            timeout_ms=_int(raw, "timeoutMs", 10_000),
            max_concurrency=_int(raw, "maxConcurrency", 4),
            prompt_format=_optional_str(raw, "promptFormat") or "auto",
        )


def _optional_str(raw: Mapping[str, Any], key: str) -> str | None:
    value = raw.get(key)
    if value is None:
        return None
    if not isinstance(value, str) or not value:
        raise ValueError(f"engine.{key}: expected a non-empty string, got {value!r}")
    return value


def _int(raw: Mapping[str, Any], key: str, default: int) -> int:
    value = raw.get(key, default)
    if not isinstance(value, int) or isinstance(value, bool):
        raise ValueError(f"engine.{key}: expected an integer, got {value!r}")
    return value

"""Where and how to reach a remote engine: `RemoteConfig`, parsed from `initializationOptions.engine`.

Role: one frozen value naming the OpenAI-compatible endpoint (vLLM, SGLang or `glm5-serve`), the
served model's name, the *name* of the environment variable holding the API key, a CA bundle,
the per-request time bound, the idle bound of a stream, the client's concurrency cap and the
served model's fill-in-the-middle template (`fimTemplate`; "auto" detects it from the tokenizer).

Settings merge key by key: a command-line flag replaces its own key of `initializationOptions.engine`
and nothing else (`RemoteConfig.over`).

Invariants:
- No torch, no network: parsing only.
- The API key itself never lives here (nor in any settings file): only the variable's name;
  `api_key()` reads the environment when a request is made (or, with no variable named, the
  token file of a local `glm5-serve`), and `repr` never shows a key.
- Bad input raises `ValueError` naming the key, the value and what was expected.
"""

from __future__ import annotations

import os
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any
from urllib.parse import urlsplit

from model_runtime.remote.daemon_files import read_token

KEYS = ("url", "model", "apiKeyEnv", "caBundle", "timeoutMs", "idleTimeoutMs", "maxConcurrency", "promptFormat", "fimTemplate")
PROMPT_FORMATS = ("auto", "ids", "text")
FIM_TEMPLATES = ("auto", "glm", "qwen", "deepseek", "starcoder", "codellama", "none")  # see model_runtime.fim_templates
IDLE_TIMEOUT_MS = 5_000


@dataclass(frozen=True, slots=True)
class RemoteConfig:
    url: str  # base URL, e.g. http://127.0.0.1:8000 (a trailing /v1 is accepted and dropped)
    model: str | None = None  # the served model name; None: the first of GET /v1/models
    api_key_env: str | None = None  # name of the env var that holds the Bearer token
    ca_bundle: str | None = None  # PEM file of trusted CAs; else SSL_CERT_FILE, else the system store
    timeout_ms: int = 10_000  # bound on one request, retries included
    idle_timeout_ms: int = IDLE_TIMEOUT_MS  # a stream silent this long is dropped (a stopped engine keeps it open)
    max_concurrency: int = 4  # requests in flight at once from this server
    prompt_format: str = "auto"  # "ids" (token ids), "text", or "auto": ids, text if the endpoint refuses ids
    fim_template: str = "auto"  # the served model's FIM tokens; "auto": detected from its tokenizer

    def __post_init__(self) -> None:
        parts = urlsplit(self.url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ValueError(f"engine.url: expected an http(s) URL such as http://127.0.0.1:8000, got {self.url!r}")
        if self.timeout_ms < 100:
            raise ValueError(f"engine.timeoutMs: expected at least 100, got {self.timeout_ms}")
        if self.idle_timeout_ms < 100:
            raise ValueError(f"engine.idleTimeoutMs: expected at least 100, got {self.idle_timeout_ms}")
        if not 1 <= self.max_concurrency <= 256:
            raise ValueError(f"engine.maxConcurrency: expected 1..256, got {self.max_concurrency}")
        if self.prompt_format not in PROMPT_FORMATS:
            raise ValueError(f"engine.promptFormat: expected one of {', '.join(PROMPT_FORMATS)}, got {self.prompt_format!r}")
        if self.fim_template not in FIM_TEMPLATES:
            raise ValueError(f"engine.fimTemplate: expected one of {', '.join(FIM_TEMPLATES)}, got {self.fim_template!r}")

    @property
    def base_url(self) -> str:
        url = self.url.rstrip("/")
        return url[: -len("/v1")] if url.endswith("/v1") else url

    @property
    def idle_s(self) -> float:
        """Seconds a stream may stay silent: the idle bound, never past the request's own bound."""
        return min(self.idle_timeout_ms, self.timeout_ms) / 1000

    def over(self, settings: RemoteConfig | None) -> RemoteConfig:
        """This configuration from the command line (`--engine-url`, `--engine-api-key-env`) over
        the one from the settings: the URL replaces theirs, the key's variable too when the flag
        was given (not None); every other key (model, caBundle, timeoutMs, ...) stays theirs."""
        if settings is None:
            return self
        key_env = self.api_key_env if self.api_key_env is not None else settings.api_key_env
        return replace(settings, url=self.url, api_key_env=key_env)

    def api_key(self) -> str | None:
        """The key from the named environment variable; without `apiKeyEnv`, the token a
        `glm5-serve` at this address wrote for this user (`daemon_files`); else None."""
        if self.api_key_env:
            return os.environ.get(self.api_key_env) or None
        return read_token(self.base_url)

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
            idle_timeout_ms=_int(raw, "idleTimeoutMs", IDLE_TIMEOUT_MS),
            max_concurrency=_int(raw, "maxConcurrency", 4),
            prompt_format=_optional_str(raw, "promptFormat") or "auto",
            fim_template=_optional_str(raw, "fimTemplate") or "auto",
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

"""`RemoteTokenizer`: the served model's tokenizer through the endpoint's `/tokenize` and `/detokenize`.

Role: when the server is not given the model directory (its `tokenizer.json`), prompts are still
built from the served model's own ids. Same interface as `GlmTokenizer` (`encode`, `encode_batch`,
`count`, `decode`, `special`, `token_to_id`).

Invariants:
- Special-token ids are asked of the endpoint once (each special string must tokenize to one id);
  a token the model lacks is None, as with `GlmTokenizer`. The served model's FIM template
  (`fim`, `model_runtime.fim_templates`) is detected from the same answers, or named by
  `engine.fimTemplate`; its end tokens are the eos list.
- Editor text that spells a special token (`<|code_prefix|>` in a file, or any token asked
  about that the model has) is sent in two pieces, so
  it comes back as plain-text ids and can never act as a FIM marker.
- Encodings are memoised (bounded LRU): prompt building counts the same lines on every keystroke,
  and each miss costs one round trip. Give the model directory when the endpoint is far away.
- Failures raise `RemoteError` subclasses with a message for the user.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from typing import Any

import httpx

from model_runtime.remote.config import RemoteConfig
from model_runtime.remote.errors import AuthError, EndpointUnavailable, ProtocolViolation, RequestRejected, RequestTimeout
from model_runtime.remote.sse import error_text
from model_runtime.remote.transport import auth_message, describe
from model_runtime.fim_templates import resolve
from model_runtime.tokenizer import SPECIAL_NAMES, SpecialTokens

CACHE_ENTRIES = 8192


class RemoteTokenizer:
    def __init__(self, config: RemoteConfig, model: str) -> None:
        self.config, self.model = config, model
        self.source = f"{config.base_url}/tokenize"
        self._client = httpx.Client(base_url=config.base_url, verify=config.verify(), trust_env=True, timeout=config.timeout_ms / 1000)
        self._cache: OrderedDict[str, tuple[int, ...]] = OrderedDict()
        self._ids: dict[str, int | None] = {}
        ids = {name: self.token_to_id(text) for name, text in SPECIAL_NAMES.items()}
        self.fim = resolve(config.fim_template, self.token_to_id)
        eos = self.fim.end_ids or ((ids["endoftext"],) if ids["endoftext"] is not None else ())
        self.special = SpecialTokens(**ids, eos_ids=eos)
        self._special_ids = frozenset(i for i in (*ids.values(), *self.fim.marker_ids) if i is not None)
        self._special_texts = tuple(text for text, i in self._ids.items() if i is not None)

    def close(self) -> None:
        self._client.close()

    def encode(self, text: str) -> list[int]:
        if text in self._cache:
            self._cache.move_to_end(text)
            return list(self._cache[text])
        ids = [i for piece in self._plain_pieces(text) for i in self._tokenize(piece)]
        self._cache[text] = tuple(ids)
        if len(self._cache) > CACHE_ENTRIES:
            self._cache.popitem(last=False)
        return ids

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        return [self.encode(t) for t in texts]

    def count(self, text: str) -> int:
        return len(self.encode(text))

    def decode(self, ids: list[int] | tuple[int, ...], skip_special: bool = True) -> str:
        ids = [i for i in ids if not (skip_special and i in self._special_ids)]
        if not ids:
            return ""
        body = self._post("/detokenize", {"model": self.model, "tokens": ids})
        if not isinstance(body.get("prompt"), str):
            raise ProtocolViolation(f"/detokenize: expected {{'prompt': str}}, got {str(body)[:120]}")
        return body["prompt"]

    def token_to_id(self, token: str) -> int | None:
        """The id of `token` when the model has it as one token (asked once per token)."""
        if token not in self._ids:
            self._ids[token] = self._single_id(token)
        return self._ids[token]

    @property
    def vocab_size(self) -> int | None:
        return None  # the endpoint does not say; nothing in the server needs it

    def _single_id(self, text: str) -> int | None:
        ids = self._tokenize(text)
        return ids[0] if len(ids) == 1 else None

    def _plain_pieces(self, text: str) -> list[str]:
        """`text` split so that no piece spells a whole special token."""
        pieces = [text]
        for special in self._special_texts:
            pieces = [part for piece in pieces for part in _split_special(piece, special)]
        return [p for p in pieces if p]

    def _tokenize(self, text: str) -> list[int]:
        if not text:
            return []
        body = self._post("/tokenize", {"model": self.model, "prompt": text, "add_special_tokens": False})
        tokens = body.get("tokens")
        if not isinstance(tokens, list) or not all(isinstance(t, int) for t in tokens):
            raise ProtocolViolation(f"/tokenize: expected {{'tokens': [int, ...]}}, got {str(body)[:120]}")
        return tokens

    def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        key = self.config.api_key()
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        try:
            response = self._client.post(path, json=body, headers=headers)
        except httpx.TimeoutException as exc:
            raise RequestTimeout(f"{self.config.base_url}{path} did not answer within {self.config.timeout_ms} ms") from exc
        except httpx.TransportError as exc:
            raise EndpointUnavailable(f"cannot reach the engine at {self.config.base_url} (its tokenizer, {path}): {describe(exc)}") from exc
        try:
            answer = response.json()
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise ProtocolViolation(f"{path}: the engine answered HTTP {response.status_code} with a body that is not JSON") from exc
        if response.status_code in (401, 403):
            raise AuthError(auth_message(self.config, response.status_code, error_text(answer)))
        if response.status_code >= 400:
            raise RequestRejected(f"{path}: the engine refused (HTTP {response.status_code}): {error_text(answer)}", response.status_code)
        if not isinstance(answer, dict):
            raise ProtocolViolation(f"{path}: expected a JSON object, got {str(answer)[:120]}")
        return answer


def _split_special(text: str, special: str) -> list[str]:
    """Cut every occurrence of `special` after its first character."""
    if special not in text:
        return [text]
    parts: list[str] = []
    for i, chunk in enumerate(text.split(special)):
        if i:
            parts += [special[0], special[1:]]
        parts.append(chunk)
    return parts

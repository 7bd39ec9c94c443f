"""A tokenizer view that accepts every Python string the editor can send.

Role: LSP text may hold lone UTF-16 surrogates (JSON `"\\ud800"` is legal), which the
`tokenizers` library rejects ("TextInputSequence must be str"). This wrapper replaces each lone
surrogate with U+FFFD before encoding. Both are one UTF-16 code unit, and the replacement only
affects the prompt text, never the document, so positions and edits are unchanged.

Invariant: same interface and ids as the wrapped `GlmTokenizer` for text without lone surrogates.
"""

from __future__ import annotations

import re
from typing import Any

from model_runtime.tokenizer import GlmTokenizer

_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def clean(text: str) -> str:
    """`text` with every lone surrogate replaced by U+FFFD (paired ones cannot occur in a str)."""
    if text.isascii():
        return text
    return _LONE_SURROGATE.sub("\ufffd", text)


class SafeTokenizer:
    def __init__(self, inner: GlmTokenizer) -> None:
        self.inner = inner
        self.special = inner.special

    def encode(self, text: str) -> list[int]:
        return self.inner.encode(clean(text))

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        return self.inner.encode_batch([clean(t) for t in texts])

    def count(self, text: str) -> int:
        return len(self.encode(text))

    def decode(self, ids: list[int] | tuple[int, ...], skip_special: bool = True) -> str:
        return self.inner.decode(ids, skip_special)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

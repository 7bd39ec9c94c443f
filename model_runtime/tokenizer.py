"""The model's tokenizer: `tokenizer.json` through the `tokenizers` library, plus GLM special tokens.

Role: encode/decode text and name the special tokens a prompt needs (`[gMASK]`, `<sop>`, the
three `<|code_*|>` fill-in-the-middle tokens, role tokens, the eos list).

Invariants:
- No torch import: the language server and `context/` use this module directly.
- Special token ids are read from the checkpoint's own files, never hard-coded. A token the
  checkpoint lacks is `None`; a prompt builder that needs it raises `TokenizerError`.
- The eos list comes from `generation_config.json`, else `config.json`, else the tokenizer's
  `eos_token` in `tokenizer_config.json`, else `<|endoftext|>`.
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass
from pathlib import Path

from tokenizers import Tokenizer

log = logging.getLogger(__name__)

_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


class TokenizerError(ValueError):
    """The checkpoint's tokenizer files are missing, unreadable or lack a required token."""


SPECIAL_NAMES: dict[str, str] = {
    "endoftext": "<|endoftext|>",
    "gmask": "[gMASK]",
    "sop": "<sop>",
    "code_prefix": "<|code_prefix|>",
    "code_middle": "<|code_middle|>",
    "code_suffix": "<|code_suffix|>",
    "system": "<|system|>",
    "user": "<|user|>",
    "assistant": "<|assistant|>",
    "observation": "<|observation|>",
}


@dataclass(frozen=True, slots=True)
class SpecialTokens:
    """Ids of GLM's special tokens as found in this checkpoint (None when absent)."""

    endoftext: int | None
    gmask: int | None
    sop: int | None
    code_prefix: int | None
    code_middle: int | None
    code_suffix: int | None
    system: int | None
    user: int | None
    assistant: int | None
    observation: int | None
    eos_ids: tuple[int, ...]

    def require(self, name: str) -> int:
        """The id of special token `name` (a field name), or a TokenizerError naming it."""
        value = getattr(self, name)
        if value is None:
            raise TokenizerError(f"the tokenizer has no {SPECIAL_NAMES.get(name, name)} token")
        return value


class GlmTokenizer:
    """Byte-level BPE tokenizer of a GLM checkpoint directory."""

    def __init__(self, tokenizer: Tokenizer, special: SpecialTokens, source: str = "") -> None:
        self._tok = tokenizer
        self.special = special
        self.source = source
        self._special_ids = frozenset(
            i for i in (getattr(special, n) for n in SPECIAL_NAMES) if i is not None
        )

    @classmethod
    def from_dir(cls, path: str | Path) -> GlmTokenizer:
        path = Path(path)
        tok_file = path / "tokenizer.json"
        if not tok_file.is_file():
            raise TokenizerError(f"{tok_file}: missing (a checkpoint needs tokenizer.json)")
        try:
            tokenizer = Tokenizer.from_file(str(tok_file))
        except Exception as exc:  # tokenizers raises a bare Exception on bad JSON
            raise TokenizerError(f"{tok_file}: cannot be read: {exc}") from exc
        tokenizer.encode_special_tokens = True  # text such as "<|code_prefix|>" in a file stays text
        ids = {name: tokenizer.token_to_id(text) for name, text in SPECIAL_NAMES.items()}
        eos = _read_eos_ids(path, tokenizer) or ((ids["endoftext"],) if ids["endoftext"] is not None else ())
        return cls(tokenizer, SpecialTokens(**ids, eos_ids=eos), source=str(path))

    @property
    def vocab_size(self) -> int:
        return self._tok.get_vocab_size(with_added_tokens=True)

    def encode(self, text: str) -> list[int]:
        """Token ids of `text`; special-token strings inside `text` are encoded as plain text.
        Lone UTF-16 surrogates (legal in LSP text, unencodable in UTF-8) become U+FFFD."""
        return self._tok.encode(_LONE_SURROGATE.sub("\ufffd", text), add_special_tokens=False).ids

    def encode_offsets(self, text: str) -> list[tuple[int, int]]:
        """Character span in `text` of each token `encode(text)` returns (a character split over
        several byte tokens gives each of them its span)."""
        return self._tok.encode(_LONE_SURROGATE.sub("\ufffd", text), add_special_tokens=False).offsets

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        texts = [_LONE_SURROGATE.sub("\ufffd", t) for t in texts]
        return [e.ids for e in self._tok.encode_batch(texts, add_special_tokens=False)]

    def count(self, text: str) -> int:
        return len(self.encode(text))

    def decode(self, ids: list[int] | tuple[int, ...], skip_special: bool = True) -> str:
        if skip_special:
            ids = [i for i in ids if i not in self._special_ids]
        return self._tok.decode(list(ids), skip_special_tokens=False)

    def token_to_id(self, token: str) -> int | None:
        return self._tok.token_to_id(token)

    def id_to_token(self, token_id: int) -> str | None:
        return self._tok.id_to_token(token_id)


def _read_eos_ids(path: Path, tokenizer: Tokenizer) -> tuple[int, ...]:
    for name in ("generation_config.json", "config.json"):
        file = path / name
        if not file.is_file():
            continue
        try:
            value = json.loads(file.read_text()).get("eos_token_id")
        except (OSError, json.JSONDecodeError) as exc:
            log.warning("%s: cannot read eos_token_id: %s", file, exc)
            continue
        if isinstance(value, int):
            return (value,)
        if isinstance(value, list) and all(isinstance(v, int) for v in value):
            return tuple(value)
    file = path / "tokenizer_config.json"
    if file.is_file():
        try:
            eos = json.loads(file.read_text()).get("eos_token")
        except (OSError, json.JSONDecodeError):
            eos = None
        if isinstance(eos, dict):
            eos = eos.get("content")
        if isinstance(eos, str) and tokenizer.token_to_id(eos) is not None:
            return (tokenizer.token_to_id(eos),)
    return ()

"""The fill-in-the-middle prompt format, shared by serving (`context/`) and training (`bench/`, `training/`).

Role: turn (header, prefix, suffix) into token ids using the tokenizer's own special tokens.

Format (every segment tokenized on its own; `{...}` are text segments):
- SPM, used for serving because typing only changes the *end* of the prompt, so consecutive
  requests share the longest token prefix and reuse their KV cache:
      [gMASK] <sop> {header} <|code_suffix|> {suffix} <|code_prefix|> {prefix} <|code_middle|>
- PSM, used in training only:
      [gMASK] <sop> {header} <|code_prefix|> {prefix} <|code_suffix|> {suffix} <|code_middle|>
- plain left-to-right (training only): [gMASK] <sop> {header} {code}
The model then writes the middle and ends with an eos token (`<|endoftext|>`).

`header` is the cross-file context: snippets rendered by `render_snippet`, most stable first,
then `file_header(current path)`.

A tokenizer of another code-model family (a remote engine serving Qwen2.5-Coder, StarCoder2,
...) carries its template as `fim` (`model_runtime.fim_templates`): the prompt then uses that
family's markers and order, or is prefix-only for a model without FIM tokens.

Invariants: pure functions, no torch, no LSP. A tokenizer lacking a needed special token raises
`TokenizerError` (from `model_runtime.tokenizer`, which does not import torch either).
"""

from __future__ import annotations

from enum import Enum
from typing import Protocol

COMMENT_PREFIX: dict[str, str] = {
    "python": "#",
    "javascript": "//",
    "typescript": "//",
    "typescriptreact": "//",
    "javascriptreact": "//",
    "tsx": "//",
    "go": "//",
    "rust": "//",
}


class FimMode(str, Enum):
    SPM = "spm"
    PSM = "psm"


class _Special(Protocol):
    def require(self, name: str) -> int: ...


class TokenizerLike(Protocol):
    special: _Special

    def encode(self, text: str) -> list[int]: ...


def comment_prefix(language: str) -> str:
    return COMMENT_PREFIX.get(language, "#")


def file_header(path: str, language: str) -> str:
    """The line that names the file being completed, last in the header."""
    return f"{comment_prefix(language)} file: {path}\n"


def render_snippet(path: str, text: str, language: str) -> str:
    """One cross-file snippet as it appears in the header: a path line, then the code."""
    body = text if text.endswith("\n") else text + "\n"
    return f"{file_header(path, language)}{body}"


def fim_prompt_ids(
    tok: TokenizerLike, header: str, prefix: str, suffix: str, mode: FimMode = FimMode.SPM
) -> list[int]:
    """Token ids of a FIM prompt, ending with `<|code_middle|>` (or the family's own layout)."""
    fim = getattr(tok, "fim", None)
    if fim is not None and fim.name != "glm":
        encode = tok.encode
        return fim.prompt_ids(encode(header) if header else [], encode(prefix) if prefix else [], encode(suffix) if suffix else [])
    sp = tok.special
    ids = [sp.require("gmask"), sp.require("sop")]
    ids += tok.encode(header) if header else []
    pre = [sp.require("code_prefix")] + (tok.encode(prefix) if prefix else [])
    suf = [sp.require("code_suffix")] + (tok.encode(suffix) if suffix else [])
    ids += suf + pre if mode is FimMode.SPM else pre + suf
    ids.append(sp.require("code_middle"))
    return ids


def plain_prompt_ids(tok: TokenizerLike, header: str, code: str) -> list[int]:
    """Token ids of a left-to-right prompt (no FIM tokens)."""
    sp = tok.special
    return [sp.require("gmask"), sp.require("sop")] + tok.encode(header + code)

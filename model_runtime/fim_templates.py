"""Fill-in-the-middle templates of the code-model families, and their detection from a tokenizer.

Role: a remote engine may serve any FIM code model, not only GLM. Each family marks prefix,
suffix and middle with its own special tokens (public facts of each model's tokenizer):

| family | template (PSM unless said) | end tokens |
|---|---|---|
| glm | `[gMASK]<sop>` header `<|code_suffix|>` suffix `<|code_prefix|>` prefix `<|code_middle|>` (SPM) | `<|endoftext|>` |
| qwen (Qwen2.5-Coder) | `<|fim_prefix|>` prefix `<|fim_suffix|>` suffix `<|fim_middle|>` | `<|endoftext|>`, `<|fim_pad|>`, `<|file_sep|>` |
| deepseek (DeepSeek-Coder) | `<｜begin▁of▁sentence｜><｜fim▁begin｜>` prefix `<｜fim▁hole｜>` suffix `<｜fim▁end｜>` | `<｜end▁of▁sentence｜>`, `<|EOT|>` |
| starcoder (StarCoder2) | `<fim_prefix>` prefix `<fim_suffix>` suffix `<fim_middle>` | `<|endoftext|>`, `<file_sep>` |
| codellama (Code Llama) | `<s><PRE>` prefix `<SUF>` suffix `<MID>` | `<EOT>`, `</s>` |
| none | the code before the cursor only (a model without FIM tokens) | the tokenizer's eos |

The cross-file header goes right after the prefix marker, as plain text before the prefix.
`detect(token_to_id)` picks the first family whose three markers are each one token of the
tokenizer; `resolve(name, token_to_id)` honours an explicit choice (`engine.fimTemplate`).

Invariants: pure (no torch, no I/O); ids come from the tokenizer, never hard-coded; a forced
template whose markers the tokenizer lacks raises `TokenizerError` naming them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from model_runtime.tokenizer import TokenizerError

TokenToId = Callable[[str], "int | None"]


@dataclass(frozen=True, slots=True)
class FimTemplate:
    name: str
    label: str  # the family as users know it
    prefix: str = ""  # marker tokens; all three empty: no FIM (prefix-only prompts)
    suffix: str = ""
    middle: str = ""
    lead: tuple[str, ...] = ()  # tokens before everything, used when the tokenizer has them
    ends: tuple[str, ...] = ()  # tokens that end the middle, those the tokenizer has


TEMPLATES: tuple[FimTemplate, ...] = (
    FimTemplate("glm", "GLM", "<|code_prefix|>", "<|code_suffix|>", "<|code_middle|>", ("[gMASK]", "<sop>"), ("<|endoftext|>",)),
    FimTemplate("qwen", "Qwen2.5-Coder", "<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>", (),
                ("<|endoftext|>", "<|fim_pad|>", "<|file_sep|>")),
    FimTemplate("deepseek", "DeepSeek-Coder", "<｜fim▁begin｜>", "<｜fim▁hole｜>", "<｜fim▁end｜>", ("<｜begin▁of▁sentence｜>",),
                ("<｜end▁of▁sentence｜>", "<|EOT|>")),
    FimTemplate("starcoder", "StarCoder2", "<fim_prefix>", "<fim_suffix>", "<fim_middle>", (), ("<|endoftext|>", "<file_sep>")),
    FimTemplate("codellama", "Code Llama", "<PRE>", "<SUF>", "<MID>", ("<s>",), ("<EOT>", "</s>")),
)
NONE = FimTemplate("none", "no fill-in-the-middle", ends=("<|endoftext|>", "</s>", "<|end_of_text|>", "<｜end▁of▁sentence｜>", "<|im_end|>"))
BY_NAME = {t.name: t for t in (*TEMPLATES, NONE)}


@dataclass(frozen=True, slots=True)
class ResolvedFim:
    """A template with this tokenizer's ids. `prompt_ids` builds a prompt from encoded segments."""

    template: FimTemplate
    prefix_id: int | None
    suffix_id: int | None
    middle_id: int | None
    lead_ids: tuple[int, ...]
    end_ids: tuple[int, ...]
    detected: bool  # found in the tokenizer (False: named in the settings)

    @property
    def name(self) -> str:
        return self.template.name

    @property
    def marker_ids(self) -> tuple[int, ...]:
        return tuple(i for i in (*self.lead_ids, self.prefix_id, self.suffix_id, self.middle_id, *self.end_ids) if i is not None)

    def prompt_ids(self, header: Sequence[int], prefix: Sequence[int], suffix: Sequence[int]) -> list[int]:
        """`lead` `<prefix>` header prefix `<suffix>` suffix `<middle>`; prefix-only without markers."""
        if self.prefix_id is None or self.suffix_id is None or self.middle_id is None:
            return [*self.lead_ids, *header, *prefix]
        return [*self.lead_ids, self.prefix_id, *header, *prefix, self.suffix_id, *suffix, self.middle_id]

    def describe(self) -> str:
        how = "detected from the tokenizer" if self.detected else "set by engine.fimTemplate"
        return f"{self.template.label} fill-in-the-middle tokens ({how})"


def resolve(name: str, token_to_id: TokenToId) -> ResolvedFim:
    """The template `name` ("auto": detected) with the ids of `token_to_id`."""
    if name == "auto":
        return detect(token_to_id)
    template = BY_NAME.get(name)
    if template is None:
        raise TokenizerError(f"unknown FIM template {name!r} (known: auto, {', '.join(BY_NAME)})")
    missing = [m for m in (template.prefix, template.suffix, template.middle) if m and token_to_id(m) is None]
    if missing:
        raise TokenizerError(f"the served model's tokenizer has no {', '.join(missing)} token, which the {template.label} template needs")
    return _with_ids(template, token_to_id, detected=False)


def detect(token_to_id: TokenToId) -> ResolvedFim:
    """The first family whose three markers are each one token, else prefix-only (`NONE`)."""
    for template in TEMPLATES:
        if all(token_to_id(m) is not None for m in (template.prefix, template.suffix, template.middle)):
            return _with_ids(template, token_to_id, detected=True)
    return _with_ids(NONE, token_to_id, detected=True)


def _with_ids(template: FimTemplate, token_to_id: TokenToId, detected: bool) -> ResolvedFim:
    def one(token: str) -> int | None:
        return token_to_id(token) if token else None

    lead = tuple(i for i in map(one, template.lead) if i is not None)
    ends = tuple(dict.fromkeys(i for i in map(one, template.ends) if i is not None))
    return ResolvedFim(template, one(template.prefix), one(template.suffix), one(template.middle), lead, ends, detected)

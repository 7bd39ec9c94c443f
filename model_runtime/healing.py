"""Token healing: back a prompt off to a token boundary before the word being typed.

Role: when the cursor sits inside a word (`pri|`), the prompt's last tokens spell a partial word
the model rarely saw tokenised that way. `heal` drops the trailing tokens that cover the typed
characters and returns the text they spelled as `heal_prefix`; the engine's constraint then makes
the first generated tokens reproduce it (`ConstraintSpec.heal_prefix`) and strips it again.

Invariants:
- No torch import: the language server may call it.
- `decode(shorter_ids) + heal_prefix == decode(prompt_ids)` for the healed text, and
  `heal_prefix` ends with `typed`; the tokens dropped never split a UTF-8 character.
- Trailing special tokens (a FIM prompt's `<|code_middle|>`) are kept at the end: healing
  acts on the text before them.
- `typed == ""` returns the ids unchanged and "".
"""

from __future__ import annotations

from model_runtime.tokenizer import SPECIAL_NAMES, GlmTokenizer

_MAX_BYTES_PER_CHAR = 4  # a UTF-8 character is at most 4 bytes, so at most 4 byte tokens


def heal(tokenizer: GlmTokenizer, prompt_ids: list[int], typed: str) -> tuple[list[int], str]:
    """(prompt ids backed off to the token boundary before `typed`, the text the dropped tokens spelled).

    Raises ValueError when the prompt's text (before trailing special tokens) does not end with `typed`.
    """
    ids = list(prompt_ids)
    if not typed:
        return ids, ""
    special = {i for i in (getattr(tokenizer.special, n) for n in SPECIAL_NAMES) if i is not None}
    tail_special: list[int] = []
    while ids and ids[-1] in special:
        tail_special.insert(0, ids.pop())
    limit = max(0, len(ids) - len(typed.encode()) * _MAX_BYTES_PER_CHAR - 1)
    for start in range(len(ids) - 1, limit - 1, -1):
        if ids[start] in special:
            break
        spelled = tokenizer.decode(ids[start:])
        if len(spelled) >= len(typed) and not spelled.startswith("\ufffd"):
            if not spelled.endswith(typed):
                break
            return ids[:start] + tail_special, spelled
    raise ValueError(f"the prompt does not end with the typed text {typed!r}")

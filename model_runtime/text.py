"""Incremental detokenization for streaming, with stop strings.

Invariants:
- `text` never contains a stop string: generation output is cut before the first occurrence.
- `streamable` is a prefix of every later `text`: it holds back a trailing partial UTF-8
  character (U+FFFD from a split byte sequence) and any tail that could still grow into a stop
  string, so a streamed client never has to take text back.
"""

from __future__ import annotations

from model_runtime.tokenizer import GlmTokenizer


class TextState:
    def __init__(self, tokenizer: GlmTokenizer | None, stop_strings: tuple[str, ...]) -> None:
        if stop_strings and tokenizer is None:
            raise ValueError("stop_strings need a tokenizer, and this checkpoint has none")
        self.tokenizer, self.stop_strings = tokenizer, tuple(s for s in stop_strings if s)
        self.text = ""
        self.streamable = ""

    def update(self, output_ids: list[int]) -> bool:
        """Decode the output so far; True when a stop string ended it."""
        if self.tokenizer is None:
            return False
        text = self.tokenizer.decode(output_ids)
        stopped = False
        for stop in self.stop_strings:
            at = text.find(stop)
            if at >= 0:
                text, stopped = text[:at], True
        self.text = text
        self.streamable = text if stopped else self._safe_prefix(text)
        return stopped

    def _safe_prefix(self, text: str) -> str:
        end = len(text)
        while end and text[end - 1] == "\ufffd":
            end -= 1
        for stop in self.stop_strings:
            for k in range(min(len(stop) - 1, end), 0, -1):
                if text[end - k : end] == stop[:k]:
                    end -= k
                    break
        return text[:end]

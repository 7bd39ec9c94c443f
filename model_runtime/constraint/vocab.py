"""The tokenizer's vocabulary as character strings, and a character trie over them.

Role: the monitor checks a token by running its decoded characters through the lexer
(`model_runtime.constraint.lexer`); the trie lets it compute the exact set of legal tokens in
one walk that shares every common prefix and prunes a whole subtree at the first refused char.

Invariants:
- Built once per tokenizer and cached (the vocabulary never changes); torch-free. The trie is
  built on a background thread from the first use of the vocabulary, so the engine thread only
  waits for it if it needs a full mask first (a large vocabulary takes seconds).
- `strings[i]` is token i decoded on its own; special tokens decode to "" and are never in the
  trie. A byte token that is only part of a UTF-8 character decodes to U+FFFD.
- A trie node is a dict from a character to its child; key "" holds the ids of tokens that end there.
"""

from __future__ import annotations

import threading
import weakref

from model_runtime.tokenizer import SPECIAL_NAMES, GlmTokenizer

END = ""

_CACHE: weakref.WeakKeyDictionary[GlmTokenizer, Vocab] = weakref.WeakKeyDictionary()
_LOCK = threading.Lock()


class Vocab:
    def __init__(self, strings: list[str], special: frozenset[int]) -> None:
        self.strings, self.special = strings, special
        self._trie: dict | None = None
        self._trie_lock = threading.Lock()

    @classmethod
    def of(cls, tokenizer: GlmTokenizer) -> Vocab:
        """The (cached) vocabulary of `tokenizer`."""
        with _LOCK:
            vocab = _CACHE.get(tokenizer)
            if vocab is None:
                special = frozenset(i for i in (getattr(tokenizer.special, n) for n in SPECIAL_NAMES) if i is not None)
                strings = [tokenizer.decode([i]) for i in range(tokenizer.vocab_size)]
                vocab = _CACHE[tokenizer] = cls(strings, special | {i for i, s in enumerate(strings) if not s})
                threading.Thread(target=lambda: vocab.trie, name="glm5-vocab-trie", daemon=True).start()
            return vocab

    def __len__(self) -> int:
        return len(self.strings)

    @property
    def trie(self) -> dict:
        with self._trie_lock:
            if self._trie is None:
                self._trie = self._build()
            return self._trie

    def _build(self) -> dict:
        root: dict = {}
        for token_id, text in enumerate(self.strings):
            if token_id in self.special:
                continue
            node = root
            for ch in text:
                node = node.setdefault(ch, {})
            node.setdefault(END, []).append(token_id)
        return root

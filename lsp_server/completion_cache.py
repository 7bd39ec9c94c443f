"""Completion cache with type-through: typing the suggested characters reuses the suggestion.

Role: after a completion `c` is produced at (prefix, suffix), the cache holds one entry for
every state the user reaches by typing a prefix of `c`: key (uri, hash of the prefix near the
cursor + the typed part, hash of the suffix near the cursor) -> the rest of `c`. A later
request at such a state is answered from the cache, without a model call.

Invariants:
- LRU over completions (not entries): evicting a completion removes all its entries.
- A hit never returns an empty string: a fully typed suggestion is a miss, so the model is
  asked for what comes next.
- Keys hash only a window of text around the cursor (`window` characters each side), so a
  lookup costs the same in a 5 MB file as in a small one.
"""

from __future__ import annotations

import hashlib
import itertools
from collections import OrderedDict
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class CacheKey:
    uri: str
    prefix_hash: bytes
    suffix_hash: bytes


class CompletionCache:
    def __init__(self, capacity: int = 256, window: int = 512, forward_chars: int = 256) -> None:
        self.capacity = capacity
        self.window = window
        self.forward_chars = forward_chars
        self._entries: dict[CacheKey, tuple[int, str]] = {}
        self._groups: OrderedDict[int, list[CacheKey]] = OrderedDict()
        self._ids = itertools.count()
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self._groups)

    def key(self, uri: str, prefix: str, suffix: str) -> CacheKey:
        return CacheKey(uri, _digest(prefix[-self.window :]), _digest(suffix[: self.window]))

    def get(self, uri: str, prefix: str, suffix: str) -> str | None:
        found = self._entries.get(self.key(uri, prefix, suffix))
        if found is None:
            self.misses += 1
            return None
        group, rest = found
        self._groups.move_to_end(group)
        self.hits += 1
        return rest

    def put(self, uri: str, prefix: str, suffix: str, completion: str) -> None:
        if self.capacity <= 0 or not completion:
            return
        group = next(self._ids)
        suffix_hash = _digest(suffix[: self.window])
        keys: list[CacheKey] = []
        for typed in range(min(len(completion), self.forward_chars)):
            key = CacheKey(uri, _digest((prefix + completion[:typed])[-self.window :]), suffix_hash)
            self._entries[key] = (group, completion[typed:])
            keys.append(key)
        self._groups[group] = keys
        while len(self._groups) > self.capacity:
            self._drop(*self._groups.popitem(last=False))

    def reset(self, capacity: int) -> None:
        """Forget everything and keep at most `capacity` completions from now on."""
        self.clear()
        self.capacity = capacity

    def clear(self, uri: str | None = None) -> None:
        """Forget everything, or only the completions of one document."""
        if uri is None:
            self._entries.clear()
            self._groups.clear()
            return
        for group, keys in list(self._groups.items()):
            if keys and keys[0].uri == uri:
                del self._groups[group]
                self._drop(group, keys)

    def _drop(self, group: int, keys: list[CacheKey]) -> None:
        for key in keys:
            if self._entries.get(key, (None, ""))[0] == group:  # a newer completion may own it
                del self._entries[key]


def _digest(text: str) -> bytes:
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest()

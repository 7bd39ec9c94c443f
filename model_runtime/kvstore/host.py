"""The warm tier: blocks evicted from the device pool, kept in host RAM under a byte cap.

Invariants: least recently used first out; `put` returns what it evicted (the caller may send it
on to the disk tier); the sum of the entries' `nbytes` never exceeds `capacity_bytes` after `put`
(an entry larger than the whole cap is not kept). No torch: entries are opaque objects with an
`nbytes` attribute.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable, Iterator
from typing import Generic, Protocol, TypeVar


class Sized(Protocol):
    @property
    def nbytes(self) -> int: ...


K = TypeVar("K", bound=Hashable)
V = TypeVar("V", bound=Sized)


class HostTier(Generic[K, V]):
    def __init__(self, capacity_bytes: int) -> None:
        self.capacity_bytes = capacity_bytes
        self.total_bytes = 0
        self._entries: OrderedDict[K, V] = OrderedDict()

    def __contains__(self, key: K) -> bool:
        return key in self._entries

    def __len__(self) -> int:
        return len(self._entries)

    def values(self) -> Iterator[V]:
        return iter(list(self._entries.values()))

    def get(self, key: K) -> V | None:
        """The entry (now the most recently used), or None."""
        value = self._entries.get(key)
        if value is not None:
            self._entries.move_to_end(key)
        return value

    def put(self, key: K, value: V) -> list[V]:
        """Insert or refresh `key`; returns the entries evicted to stay within the cap."""
        old = self._entries.pop(key, None)
        if old is not None:
            self.total_bytes -= old.nbytes
        self._entries[key] = value
        self.total_bytes += value.nbytes
        evicted = []
        while self.total_bytes > self.capacity_bytes and self._entries:
            _, out = self._entries.popitem(last=False)
            self.total_bytes -= out.nbytes
            evicted.append(out)
        return evicted

    def pop(self, key: K) -> V | None:
        value = self._entries.pop(key, None)
        if value is not None:
            self.total_bytes -= value.nbytes
        return value

    def clear(self) -> int:
        """Drop everything; returns the bytes freed."""
        freed = self.total_bytes
        self._entries.clear()
        self.total_bytes = 0
        return freed

"""Helpers for the KV cache tests: a store fingerprint and layout, deterministic blocks."""

from __future__ import annotations

import hashlib

FINGERPRINT = "0123456789abcdef0123456789abcdef"
LAYOUT = {"dtype": "float32", "kv": [2, 4, 8], "index": [2, 4, 4]}
PAYLOAD_BYTES = 4 * (2 * 4 * 8 + 2 * 4 * 4)


def block_hash(n: int) -> bytes:
    return hashlib.blake2b(f"block-{n}".encode(), digest_size=16).digest()


def block_tokens(n: int) -> tuple[int, ...]:
    return (n, n + 1, n + 2, n + 3)


def block_payload(n: int, size: int = PAYLOAD_BYTES) -> bytes:
    seed = hashlib.blake2b(f"payload-{n}".encode()).digest()
    return (seed * (size // len(seed) + 1))[:size]


def block_entry(n: int, size: int = PAYLOAD_BYTES) -> tuple[bytes, tuple[int, ...], list[bytes]]:
    return block_hash(n), block_tokens(n), [block_payload(n, size)]

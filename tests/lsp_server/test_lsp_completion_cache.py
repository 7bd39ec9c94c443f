"""Type-through completion cache."""

from __future__ import annotations

from lsp_server.completion_cache import CompletionCache


def test_typing_through_a_suggestion_returns_the_rest():
    cache = CompletionCache()
    prefix, suffix = "def add(a, b):\n    return ", "\n\nprint(add(1, 2))\n"
    cache.put("file:///a.py", prefix, suffix, "a + b")
    assert cache.get("file:///a.py", prefix, suffix) == "a + b"
    assert cache.get("file:///a.py", prefix + "a", suffix) == " + b"
    assert cache.get("file:///a.py", prefix + "a + ", suffix) == "b"
    assert cache.hits == 3


def test_diverging_typing_fully_typed_other_uri_or_changed_suffix_miss():
    cache = CompletionCache()
    cache.put("file:///a.py", "x = ", "\n", "foo(1)")
    assert cache.get("file:///a.py", "x = b", "\n") is None  # typed something else
    assert cache.get("file:///a.py", "x = foo(1)", "\n") is None  # nothing left to suggest
    assert cache.get("file:///b.py", "x = ", "\n") is None
    assert cache.get("file:///a.py", "x = ", ")\n") is None  # e.g. an auto-inserted bracket
    assert cache.misses == 4


def test_only_the_window_near_the_cursor_is_keyed():
    cache = CompletionCache(window=16)
    tail = "the_total_value = "  # 18 characters: longer than the window
    cache.put("u", "# " + "z" * 100 + "\n" + tail, "", "42")
    assert cache.get("u", "# other text far away\n" + tail, "") == "42"


def test_lru_evicts_whole_completions_and_newer_owners_survive():
    cache = CompletionCache(capacity=2)
    cache.put("u", "a", "", "bc")
    cache.put("u", "x", "", "yz")
    assert cache.get("u", "a", "") == "bc"  # a is now most recent
    cache.put("u", "m", "", "no")  # evicts x
    assert cache.get("u", "x", "") is None and cache.get("u", "xy", "") is None
    assert cache.get("u", "ab", "") == "c"
    cache.put("u", "a", "", "BC")  # same key, newer completion owns it
    cache.put("u", "q", "", "r")  # evicts the old "bc" group, must not drop the new entry
    assert cache.get("u", "a", "") == "BC"


def test_clear_one_document_or_all():
    cache = CompletionCache()
    cache.put("u1", "a", "", "b")
    cache.put("u2", "a", "", "c")
    cache.clear("u1")
    assert cache.get("u1", "a", "") is None and cache.get("u2", "a", "") == "c"
    cache.clear()
    assert len(cache) == 0 and cache.get("u2", "a", "") is None


def test_zero_capacity_disables_the_cache():
    cache = CompletionCache(capacity=0)
    cache.put("u", "a", "", "b")
    assert cache.get("u", "a", "") is None


def test_reset_forgets_everything_and_applies_the_new_capacity() -> None:
    cache = CompletionCache(capacity=4)
    cache.put("u", "a = ", "", "one")
    cache.reset(1)
    assert cache.get("u", "a = ", "") is None and len(cache) == 0
    cache.put("u", "a = ", "", "one")
    cache.put("u", "b = ", "", "two")
    assert cache.get("u", "a = ", "") is None and cache.get("u", "b = ", "") == "two"

"""The tokenizer view that accepts lone surrogates from editor text."""

from __future__ import annotations

from lsp_fakes import byte_tokenizer

from lsp_server.tokens import SafeTokenizer, clean


def test_lone_surrogates_become_replacement_characters_of_the_same_utf16_width():
    text = "a\ud800b\udfffc 😀"
    cleaned = clean(text)
    assert cleaned == "a\ufffdb\ufffdc 😀"
    assert len(cleaned.encode("utf-16-le")) == len(text.encode("utf-16-le", "surrogatepass"))


def test_encoding_matches_the_inner_tokenizer_and_never_raises():
    inner = byte_tokenizer()
    safe = SafeTokenizer(inner)
    assert safe.encode("def f(x): 😀") == inner.encode("def f(x): 😀")
    assert safe.encode("x = '\ud800'") == inner.encode("x = '\ufffd'")
    assert safe.encode_batch(["\udc00", "ok"]) == [inner.encode("\ufffd"), inner.encode("ok")]
    assert safe.count("ab\ud800") == len(inner.encode("ab\ufffd"))
    assert safe.special is inner.special and safe.vocab_size == inner.vocab_size

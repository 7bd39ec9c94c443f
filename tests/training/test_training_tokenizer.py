"""The BPE tokenizer: exact round trip, GLM special tokens, loadable by the runtime (training.tokenizer)."""

from __future__ import annotations

import json

import pytest
from tokenizers import Tokenizer

from model_runtime.tokenizer import GlmTokenizer
from training.samples import LiteralEncoder
from training.tokenizer import SPECIAL_TOKENS, chars_per_token, sample_texts, train_bpe

TRICKY = [
    "def f(x):\n\treturn x  # tab indent\r\n",
    "s = 'héllo wörld ✓ 中文 🐍'\n",
    "    \n\n\n        x = 1\n",
    "x = '<|endoftext|>' + \"[gMASK]\"\n",
    "",
    "\u200b\ufeff zero width\n",
    "1234567890 + 0x1F_FFFF - 3.14e-10j\n",
]


@pytest.mark.parametrize("text", TRICKY)
def test_round_trip_is_exact(tokenizer_dir, text):
    enc = LiteralEncoder(tokenizer_dir)
    assert enc.decode(enc.encode(text)) == text


def test_special_tokens_are_the_last_ids_and_load_in_the_runtime(tokenizer_dir):
    tok = GlmTokenizer.from_dir(tokenizer_dir)
    assert tok.vocab_size == 640
    ids = [tok.token_to_id(t) for t in SPECIAL_TOKENS]
    assert ids == list(range(640 - len(SPECIAL_TOKENS), 640))
    for name in ("endoftext", "gmask", "sop", "code_prefix", "code_middle", "code_suffix", "system", "user", "assistant", "observation"):
        assert tok.special.require(name) in ids
    assert tok.special.eos_ids == (tok.token_to_id("<|endoftext|>"),)


def test_tokenizer_config_names_eos_pad_and_length(tokenizer_dir):
    config = json.loads((tokenizer_dir / "tokenizer_config.json").read_text())
    assert config["eos_token"] == "<|endoftext|>" and config["pad_token"] == "<|endoftext|>"
    assert config["model_max_length"] == 256
    assert set(config["additional_special_tokens"]) | {"<|endoftext|>"} == set(SPECIAL_TOKENS)


def test_literal_encoder_never_emits_special_ids_for_text(tokenizer_dir):
    enc = LiteralEncoder(tokenizer_dir)
    special_ids = {GlmTokenizer.from_dir(tokenizer_dir).token_to_id(t) for t in SPECIAL_TOKENS}
    ids = enc.encode("a = '<|endoftext|><|code_middle|>[gMASK]<sop>'")
    assert not special_ids & set(ids)
    plain = Tokenizer.from_file(str(tokenizer_dir / "tokenizer.json"))
    assert special_ids & set(plain.encode("<|endoftext|>", add_special_tokens=False).ids)


def test_transformers_loads_the_same_vocabulary(tokenizer_dir):
    transformers = pytest.importorskip("transformers")
    hf = transformers.AutoTokenizer.from_pretrained(str(tokenizer_dir))
    ours = GlmTokenizer.from_dir(tokenizer_dir)
    text = "def area(r):\n    return 3.14159 * r ** 2\n"
    assert hf.encode(text, add_special_tokens=False) == ours.encode(text)
    assert hf.eos_token == "<|endoftext|>" and hf.convert_tokens_to_ids("<|code_middle|>") == ours.special.code_middle


def test_training_is_deterministic_and_learns_merges():
    texts = ["def handler(request):\n    return response\n" * 20, "class Handler:\n    pass\n" * 20]
    a, b = train_bpe(texts, vocab_size=400), train_bpe(texts, vocab_size=400)
    assert a.to_str() == b.to_str()
    assert chars_per_token(a, texts) > 2.0  # merges learned: more than a byte-level 1 char/token
    with pytest.raises(ValueError, match="cannot hold"):
        train_bpe(texts, vocab_size=200)


def test_sample_texts_stops_at_the_byte_budget(manifest_path):
    from training.corpus import load_documents

    docs = load_documents(manifest_path, "train")
    taken = list(sample_texts(docs, max_bytes=1))
    assert len(taken) == 1
    assert len(list(sample_texts(docs, max_bytes=10**9))) == len(docs)


def test_cli_trains_checks_and_saves(manifest_path, tmp_path, capsys):
    from training.tokenizer import main

    assert main(["--manifest", str(manifest_path), "--out", str(tmp_path), "--vocab-size", "600", "--max-length", "512"]) == 0
    assert "held-out chars/token" in capsys.readouterr().out
    tok = GlmTokenizer.from_dir(tmp_path)
    assert tok.vocab_size == 600 and json.loads((tmp_path / "tokenizer_config.json").read_text())["model_max_length"] == 512

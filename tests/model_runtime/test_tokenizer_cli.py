"""Tokenizer special tokens from checkpoint files; the `python -m model_runtime generate` CLI."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

from model_runtime.tokenizer import GlmTokenizer, TokenizerError


def test_special_tokens_come_from_the_files(tiny_ckpt):
    tok = GlmTokenizer.from_dir(tiny_ckpt)
    sp = tok.special
    assert tok.id_to_token(sp.require("code_prefix")) == "<|code_prefix|>"
    assert tok.id_to_token(sp.require("gmask")) == "[gMASK]"
    assert sp.eos_ids == (tok.token_to_id("<|endoftext|>"),)
    text = "def f(x):\n    return x  # ünïcode ✓\n"
    assert tok.decode(tok.encode(text)) == text
    assert tok.encode("<|code_prefix|>") != [sp.code_prefix]  # text is never parsed as special


def test_eos_list_from_generation_config(tiny_ckpt, tmp_path):
    dst = tmp_path / "c"
    shutil.copytree(tiny_ckpt, dst)
    tok = GlmTokenizer.from_dir(dst)
    ids = [tok.token_to_id("<|endoftext|>"), tok.token_to_id("<|user|>"), tok.token_to_id("<|observation|>")]
    (dst / "generation_config.json").write_text(json.dumps({"eos_token_id": ids}))
    assert GlmTokenizer.from_dir(dst).special.eos_ids == tuple(ids)


def test_missing_special_token_is_a_clear_error(tmp_path):
    from model_runtime.testing import write_tokenizer
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel()
    tok.train_from_iterator(["hello world"] * 4, trainers.BpeTrainer(vocab_size=300, special_tokens=["<|endoftext|>"], show_progress=False))
    write_tokenizer(tok, tmp_path)
    glm = GlmTokenizer.from_dir(tmp_path)
    with pytest.raises(TokenizerError, match="code_middle"):
        glm.special.require("code_middle")


def test_unreadable_tokenizer(tmp_path):
    (tmp_path / "tokenizer.json").write_text("{not json")
    with pytest.raises(TokenizerError, match="tokenizer.json"):
        GlmTokenizer.from_dir(tmp_path)


def test_cli_streams_a_completion(tiny_ckpt):
    run = subprocess.run(
        [sys.executable, "-m", "model_runtime", "generate", "--model", str(tiny_ckpt), "--prompt", "def load(", "--max-tokens", "8"],
        capture_output=True, text=True, timeout=120,
    )
    assert run.returncode == 0, run.stderr
    assert "8 tokens in" in run.stderr


def test_cli_reports_errors_in_one_line(tmp_path):
    run = subprocess.run([sys.executable, "-m", "model_runtime", "generate", "--model", str(tmp_path), "--prompt", "x"],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 1
    assert run.stderr.startswith("error:") and "Traceback" not in run.stderr


def test_lone_surrogates_encode_as_replacement(tiny_ckpt):
    tok = GlmTokenizer.from_dir(tiny_ckpt)
    assert tok.decode(tok.encode("a\ud800b")) == "a\ufffdb"
    assert tok.encode_batch(["x\udfffy"]) == [tok.encode("x\ufffdy")]

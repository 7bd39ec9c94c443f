"""Fixtures for the context tests: a real byte-level BPE tokenizer with GLM's special tokens."""

from __future__ import annotations

from pathlib import Path

import pytest
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from model_runtime.tokenizer import SPECIAL_NAMES, GlmTokenizer

CONTEXT_SOURCES = Path(__file__).resolve().parents[2] / "context"


@pytest.fixture(scope="session")
def glm_tokenizer(tmp_path_factory: pytest.TempPathFactory) -> GlmTokenizer:
    """A small BPE trained on this package's own sources (about a second), saved and loaded the
    way a checkpoint's tokenizer is."""
    corpus = [path.read_text() for path in sorted(CONTEXT_SOURCES.glob("*.py"))]
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=800,
        special_tokens=list(SPECIAL_NAMES.values()),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(corpus, trainer)
    directory = tmp_path_factory.mktemp("tokenizer")
    tokenizer.save(str(directory / "tokenizer.json"))
    return GlmTokenizer.from_dir(directory)

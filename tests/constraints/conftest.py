"""Fixtures: the embedded model's tokenizer (a real code vocabulary) and a tiny random checkpoint."""

from __future__ import annotations

import pytest

from model_runtime.embedded import default_model_path
from model_runtime.tokenizer import GlmTokenizer


@pytest.fixture(scope="session")
def tokenizer() -> GlmTokenizer:
    return GlmTokenizer.from_dir(default_model_path())

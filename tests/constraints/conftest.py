"""Fixtures: the embedded model's tokenizer (a real code vocabulary), the embedded model, and a
tiny random checkpoint (a model whose numbers are arbitrary but whose engine paths are all real)."""

from __future__ import annotations

import pytest

from model_runtime.embedded import default_model_path
from model_runtime.tokenizer import GlmTokenizer


@pytest.fixture(scope="session")
def tokenizer() -> GlmTokenizer:
    return GlmTokenizer.from_dir(default_model_path())


@pytest.fixture(scope="session")
def embedded():
    from model_runtime import load_model

    return load_model(None)


@pytest.fixture(scope="session")
def tiny(tmp_path_factory):
    from model_runtime import load_model
    from model_runtime.testing import make_tiny_checkpoint

    return load_model(make_tiny_checkpoint(tmp_path_factory.mktemp("tiny-constraints")))

"""`connect`: a started remote engine with its tokenizer and context length.

Role: `connect(config, model_dir)` returns a started `RemoteEngine` (vLLM, SGLang or
`glm5-serve` behind it), the served model's tokenizer (from `model_dir`'s `tokenizer.json` when
given, else the endpoint's `/tokenize`) and the context length.

Invariant: nothing in this package imports torch (the language server imports it).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path

from model_runtime.remote.config import RemoteConfig
from model_runtime.remote.engine import RemoteEngine
from model_runtime.remote.tokenizer import RemoteTokenizer
from model_runtime.tokenizer import GlmTokenizer

log = logging.getLogger(__name__)

DEFAULT_CONTEXT = 8192


@dataclass(frozen=True, slots=True)
class Remote:
    engine: RemoteEngine
    tokenizer: GlmTokenizer | RemoteTokenizer
    context_length: int


def connect(config: RemoteConfig, model_dir: str | None = None) -> Remote:
    """Start a remote engine for `config` and pick its tokenizer (raises `RemoteError`, `TokenizerError`)."""
    tokenizer: GlmTokenizer | RemoteTokenizer | None = GlmTokenizer.from_dir(model_dir) if model_dir else None
    decode = (lambda ids: tokenizer.decode(ids, skip_special=False)) if tokenizer is not None else None
    engine = RemoteEngine(config, decode).start()
    try:
        assert engine.card is not None
        if tokenizer is None:
            tokenizer = RemoteTokenizer(config, engine.card.name)
            engine.decode_prompt = lambda ids: tokenizer.decode(ids, skip_special=False)
        length = engine.card.max_model_len or _config_length(model_dir) or DEFAULT_CONTEXT
    except BaseException:
        engine.shutdown()
        raise
    log.info("remote engine %s: model %s, context %d, tokenizer %s", config.base_url, engine.card.name, length, tokenizer.source)
    return Remote(engine, tokenizer, length)


def _config_length(model_dir: str | None) -> int | None:
    if not model_dir:
        return None
    try:
        value = json.loads((Path(model_dir) / "config.json").read_text()).get("max_position_embeddings")
    except (OSError, json.JSONDecodeError):
        return None
    return value if isinstance(value, int) and value > 0 else None

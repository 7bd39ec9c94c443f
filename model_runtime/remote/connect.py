"""`connect`: a started remote engine with its tokenizer and context length.

Role: `connect(config, model_dir)` returns a started `RemoteEngine` (vLLM, SGLang or
`glm5-serve` behind it), the served model's tokenizer (from `model_dir`'s `tokenizer.json` when
given, else the endpoint's `/tokenize`) and the context length. The tokenizer carries the served
model's FIM template (`fim`: detected from its special tokens, or `engine.fimTemplate`), and the
engine asks the endpoint to stop at that template's end tokens.

Invariant: nothing in this package imports torch (the language server imports it).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path

from model_runtime.fim_templates import resolve
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
    tokenizer: GlmTokenizer | RemoteTokenizer | None = None
    if model_dir:
        tokenizer = GlmTokenizer.from_dir(model_dir)
        tokenizer.fim = resolve(config.fim_template, tokenizer.token_to_id)
    decode = (lambda ids: tokenizer.decode(ids, skip_special=False)) if tokenizer is not None else None
    engine = RemoteEngine(config, decode).start()
    try:
        assert engine.card is not None
        if tokenizer is None:
            tokenizer = RemoteTokenizer(config, engine.card.name)
            engine.decode_prompt = lambda ids: tokenizer.decode(ids, skip_special=False)
        engine.stop_token_ids = tokenizer.fim.end_ids  # a family's end of middle need not be its eos
        length = engine.card.max_model_len or _config_length(model_dir) or DEFAULT_CONTEXT
    except BaseException:
        engine.shutdown()
        raise
    fim = tokenizer.fim
    (log.info if fim.name != "none" else log.warning)(
        "remote engine %s: model %s, context %d, tokenizer %s, %s", config.base_url, engine.card.name, length, tokenizer.source,
        fim.describe() if fim.name != "none" else "no fill-in-the-middle tokens: prompts are prefix-only",
    )
    return Remote(engine, tokenizer, length)


def _config_length(model_dir: str | None) -> int | None:
    if not model_dir:
        return None
    try:
        value = json.loads((Path(model_dir) / "config.json").read_text()).get("max_position_embeddings")
    except (OSError, json.JSONDecodeError):
        return None
    return value if isinstance(value, int) and value > 0 else None

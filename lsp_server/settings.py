"""Server settings: parsed from `initializationOptions` and `workspace/didChangeConfiguration`.

Role: one frozen `ServerSettings` value; every change makes a new one. The keys clients send
(camelCase, under `glm5` in didChangeConfiguration, at the top level in initializationOptions):

    model                 checkpoint directory (used only at start-up; a change needs a restart)
    streaming             send `glm5/inlineCompletionProgress` notifications (bool)
    maxTokens             token cap of a multi-line completion
    singleLineMaxTokens   token cap of a single-line completion
    maxDecodeMs           latency budget of decoding one completion, from its first token (like
                          llama.vim's t_max_predict_ms); 0 = none
    temperature           sampling temperature, 0 = greedy
    multiline             "auto" (from the syntax tree) | "always" | "never"
    debounceMs            wait before an automatically triggered completion starts (cancel-previous
                          drops the ones superseded meanwhile without ever reaching the engine)
    promptTokens          token budget of the whole prompt
    cacheSize             entries of the type-through completion cache
    diagnostics           publish undeclared-symbol diagnostics (bool)
    diagnosticsDebounceMs wait after the last edit before recomputing diagnostics
    fixAttempts           tries of "Fix with model" before giving up
    warmup                run warm-up forwards after start-up (bool)
    device                torch device of the runtime ("cpu", "cuda", ...)
    dtype                 weights' dtype in the runtime: auto (float32 on the CPU, bfloat16 elsewhere),
                          float32, bfloat16 or float16
    mtp                   speculative decoding of greedy requests with the model's MTP layer
    threads               intra-op CPU threads of the in-process runtime (start-up only); 0 = auto:
                          one per core but one, at least 1 (a busy core makes every op wait)
    compileDecode         compile the runtime's decode steps with torch.compile (CPU, start-up only):
                          less than half the time per decode step once compiled, which takes a
                          core for 3-5 minutes in the background after the model loads the first
                          time, under a minute once cached on disk; steps run eager until then,
                          and the compile pauses while requests are served
    constraints           steer decoding with the IDE state: members, defined names, brackets,
                          single line, token healing (`context.constraints`)
    numCandidates         the model's n-best per completion (1 = greedy only)
    retrieval             add candidates from the IDE state (`context.retrieval`)
    rerank                pick among candidates with the fitted reranker (`context.rerank`);
                          off: the highest mean log-likelihood wins
    abstain               show nothing when the reranker is not confident (needs rerank)
    skipUnreachable       with abstain, skip the model's decode (or its scoring) when no candidate
                          could reach the reranker's threshold whatever the model says: the same
                          answer, sooner (`lsp_server.candidates`); off only to measure it
    rerankWeights         a reranker weights file (`python -m bench.fit_rerank --out FILE`, fitted for
                          the model in use; `~` expands, a relative path starts at the server's
                          working directory) instead of the shipped one; null: the shipped one
    engine                a remote OpenAI-compatible engine instead of the in-process one (start-up only):
                          a URL, or {url, model, apiKeyEnv, caBundle, timeoutMs, idleTimeoutMs,
                          maxConcurrency, promptFormat, fimTemplate} (`model_runtime.remote.config`;
                          `--engine-url` replaces only its `url`); `model` then only names
                          the directory of the tokenizer (else the engine's /tokenize is used)

Invariants: parsing never raises. A key with a bad value keeps its previous value and yields a
problem message naming the key, the value and what was expected (the server shows it to the
user); unknown keys are only logged, since editors often send other tools' settings too.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

from context.rerank import load_reranker
from model_runtime.remote.config import RemoteConfig

log = logging.getLogger(__name__)

DTYPES = ("auto", "float32", "bfloat16", "float16")


@dataclass(frozen=True, slots=True)
class ServerSettings:
    model: str | None = None
    streaming: bool = False
    max_tokens: int = 96
    single_line_max_tokens: int = 32
    max_decode_ms: int = 200
    temperature: float = 0.0
    multiline: str = "auto"
    debounce_ms: int = 25
    prompt_tokens: int = 1536
    cache_size: int = 256
    diagnostics: bool = True
    diagnostics_debounce_ms: int = 300
    fix_attempts: int = 3
    warmup: bool = True
    device: str = "cpu"
    dtype: str = "auto"
    mtp: bool = False
    threads: int = 0
    compile_decode: bool = False
    constraints: bool = True
    num_candidates: int = 4
    retrieval: bool = True
    rerank: bool = True
    abstain: bool = True
    skip_unreachable: bool = True
    rerank_weights: str | None = None
    engine: RemoteConfig | None = None


def _snake(key: str) -> str:
    return "".join(f"_{c.lower()}" if c.isupper() else c for c in key)


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


_CHECKS: dict[str, tuple[Callable[[Any], bool], str]] = {
    "model": (lambda v: v is None or (isinstance(v, str) and v != ""), "a directory path"),
    "streaming": (lambda v: isinstance(v, bool), "true or false"),
    "max_tokens": (lambda v: _is_int(v) and 1 <= v <= 4096, "an integer in 1..4096"),
    "single_line_max_tokens": (lambda v: _is_int(v) and 1 <= v <= 1024, "an integer in 1..1024"),
    "max_decode_ms": (lambda v: _is_int(v) and 0 <= v <= 60_000, "an integer in 0..60000"),
    "temperature": (
        lambda v: isinstance(v, int | float) and not isinstance(v, bool) and 0 <= v <= 2,
        "a number in 0..2",
    ),
    "multiline": (lambda v: v in ("auto", "always", "never"), '"auto", "always" or "never"'),
    "debounce_ms": (lambda v: _is_int(v) and 0 <= v <= 5000, "an integer in 0..5000"),
    "prompt_tokens": (lambda v: _is_int(v) and 64 <= v <= 131072, "an integer in 64..131072"),
    "cache_size": (lambda v: _is_int(v) and 0 <= v <= 100_000, "an integer in 0..100000"),
    "diagnostics": (lambda v: isinstance(v, bool), "true or false"),
    "diagnostics_debounce_ms": (lambda v: _is_int(v) and 0 <= v <= 60_000, "an integer in 0..60000"),
    "fix_attempts": (lambda v: _is_int(v) and 1 <= v <= 10, "an integer in 1..10"),
    "warmup": (lambda v: isinstance(v, bool), "true or false"),
    "device": (lambda v: isinstance(v, str) and v != "", "a torch device name"),
    "dtype": (lambda v: v in DTYPES, "one of " + ", ".join(DTYPES)),
    "mtp": (lambda v: isinstance(v, bool), "true or false"),
    "compile_decode": (lambda v: isinstance(v, bool), "true or false"),
    "threads": (lambda v: _is_int(v) and 0 <= v <= 1024, "an integer in 0..1024 (0 = auto)"),
    "constraints": (lambda v: isinstance(v, bool), "true or false"),
    "num_candidates": (lambda v: _is_int(v) and 1 <= v <= 16, "an integer in 1..16"),
    "retrieval": (lambda v: isinstance(v, bool), "true or false"),
    "rerank": (lambda v: isinstance(v, bool), "true or false"),
    "abstain": (lambda v: isinstance(v, bool), "true or false"),
    "skip_unreachable": (lambda v: isinstance(v, bool), "true or false"),
    "rerank_weights": (lambda v: v is None or (isinstance(v, str) and v != ""), "a weights file path or null"),
    "engine": (lambda v: v is None or isinstance(v, str | Mapping), "a URL or an object {url, model, apiKeyEnv, ...}"),
}

_FIELDS = frozenset(f.name for f in fields(ServerSettings))


def parse_settings(raw: Any, base: ServerSettings) -> tuple[ServerSettings, list[str]]:
    """`base` updated with the recognised, valid keys of `raw`, and one message per problem."""
    if raw is None:
        return base, []
    if not isinstance(raw, Mapping):
        return base, [f"settings must be an object, got {type(raw).__name__}"]
    changes: dict[str, Any] = {}
    problems: list[str] = []
    for key, value in raw.items():
        name = _snake(str(key))
        if name not in _FIELDS:
            log.warning("unknown setting %r ignored", key)
            continue
        check, expected = _CHECKS[name]
        if not check(value):
            problems.append(f"setting {key!r}: expected {expected}, got {value!r} (kept {getattr(base, name)!r})")
            continue
        if name == "rerank_weights" and value is not None:
            try:
                load_reranker(Path(value).expanduser())
            except ValueError as exc:
                problems.append(f"setting {key!r}: {exc} (kept {getattr(base, name)!r})")
                continue
        if name == "engine" and value is not None:
            try:
                value = RemoteConfig.from_options(value)
            except ValueError as exc:
                problems.append(f"setting {key!r}: {exc} (kept {getattr(base, name)!r})")
                continue
        changes[name] = float(value) if name == "temperature" else value
    return replace(base, **changes), problems


def section(raw: Any, name: str = "glm5") -> Any:
    """The `glm5` section of a didChangeConfiguration payload (or the payload itself when flat)."""
    if isinstance(raw, Mapping) and name in raw:
        return raw[name]
    return raw

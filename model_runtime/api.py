"""Plain-data API between the runtime and everything above it.

Role: the only types that cross the seam between `model_runtime` (which owns torch) and the
layers above it (`lsp_server`, `context`, benchmarks, the CLI).

Invariants:
- This module never imports torch (the language server imports it at start-up).
- Every type is a frozen, slotted dataclass of plain Python values: ids, strings, numbers.
- A request is identified by its `request_id`; every event and result carries it back.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from typing import Protocol


class FinishReason(str, Enum):
    """Why a generation ended."""

    STOP = "stop"  # a stop token or stop string was produced, or confidence collapsed
    LENGTH = "length"  # max_tokens reached, or the decode budget (`max_decode_ms`) spent
    ABORT = "abort"  # aborted by the caller (cancel, stale document, newer request)
    ERROR = "error"  # the engine failed on this request; see `GenerationResult.error`


@dataclass(frozen=True, slots=True)
class SamplingParams:
    """How to pick tokens. `temperature == 0` means greedy."""

    max_tokens: int = 64
    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0  # 0 = no top-k truncation
    seed: int | None = None
    stop_token_ids: tuple[int, ...] = ()  # added to the tokenizer's eos ids
    stop_strings: tuple[str, ...] = ()  # generation ends *before* the first occurrence
    max_decode_ms: float = 0.0  # latency budget of decoding, from the first token; 0 = none
    min_confidence: float = 0.0  # once a line is complete, stop before a token less likely than this

    def __post_init__(self) -> None:
        if self.max_tokens < 0:
            raise ValueError(f"max_tokens must be >= 0, got {self.max_tokens}")
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.top_k < 0:
            raise ValueError(f"top_k must be >= 0, got {self.top_k}")
        if self.max_decode_ms < 0:
            raise ValueError(f"max_decode_ms must be >= 0, got {self.max_decode_ms}")
        if not 0 <= self.min_confidence < 1:
            raise ValueError(f"min_confidence must be in [0, 1), got {self.min_confidence}")


@dataclass(frozen=True, slots=True)
class MemberScope:
    """After `qualifier.` (e.g. `geometry.` or `self.` or `p.`) only these member names are legal."""

    qualifier: str
    members: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class ConstraintSpec:
    """A decode-time monitor built from the IDE state (by context/), applied by the engine as a
    token mask at every decode step. Language-aware but tokenizer-agnostic: it speaks characters."""

    language: str = "python"
    # token healing: the prompt ids were backed off to a token boundary; the output must begin
    # with exactly these characters. The engine strips them from GenerationResult.text / StreamEvent.text.
    heal_prefix: str = ""
    single_line: bool = False  # the output ends at the first newline (the newline is not output)
    # brackets open before the cursor on this statement, innermost last, e.g. "([": the output
    # may close these, and must keep its own balanced
    open_brackets: str = ""
    member_scopes: tuple[MemberScope, ...] = ()
    # identifiers legal in a *use* position (in scope, imported, builtins, workspace names
    # reachable by import; keywords are always legal). None = no identifier check. New bindings
    # (left of `=`, after def/class/for/as/import/lambda/global, parameters, keyword-argument
    # names) are always legal.
    defined_names: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        bad = set(self.open_brackets) - set("([{")
        if bad:
            raise ValueError(f"open_brackets may hold only '(', '[' and '{{', got {sorted(bad)}")


@dataclass(frozen=True, slots=True)
class ConstraintReport:
    """What the monitor did for one request (for glm5.explainContext and benchmarks)."""

    steps: int = 0  # decode steps where the constraint was active
    masked_steps: int = 0  # steps where the mask removed the model's own top choice
    released: bool = False  # it found nothing legal once and released itself
    fired: tuple[str, ...] = ()  # rules that removed a top choice: "member", "undefined", "bracket", "heal", "line"
    mask_ms: float = 0.0  # total time spent building/applying masks


@dataclass(frozen=True, slots=True)
class GenerationRequest:
    """One completion to run. `prompt_ids` are token ids from the model's tokenizer."""

    request_id: str
    prompt_ids: tuple[int, ...]
    sampling: SamplingParams = field(default_factory=SamplingParams)
    priority: int = 0  # higher runs first when the scheduler must choose
    constraint: ConstraintSpec | None = None
    # >1: n-best (beam search when greedy, diverse sampling otherwise), batched in one engine
    # call sharing the prompt's KV blocks
    num_candidates: int = 1
    record_attention: bool = False  # fill `GenerationResult.attention` (costs a little per step)

    def __post_init__(self) -> None:
        if self.num_candidates < 1:
            raise ValueError(f"num_candidates must be >= 1, got {self.num_candidates}")


@dataclass(frozen=True, slots=True)
class AttentionRecord:
    """What the model looked at for one request (see `model_runtime.attention_record`)."""

    selections: tuple[int, ...]  # per prompt token: DSA selections by generating queries, over layers and steps
    queries: int  # generating query rows counted (the last prompt position, then one per decode step)
    layers: int
    index_topk: int
    expert_load: tuple[tuple[int, ...], ...]  # per layer: tokens routed to each expert; () for dense-MLP layers


@dataclass(frozen=True, slots=True)
class StreamEvent:
    """Emitted after every engine step that produced tokens for a request, and once at the end."""

    request_id: str
    new_token_ids: tuple[int, ...]  # tokens produced since the previous event
    text: str  # the whole decoded text so far (stop strings cut off, unfinished tails held back)
    finished: bool = False
    finish_reason: FinishReason | None = None


@dataclass(frozen=True, slots=True)
class Candidate:
    """One of a request's n-best outputs."""

    text: str  # heal prefix stripped, like GenerationResult.text
    token_ids: tuple[int, ...]
    logprob: float  # sum of log-probabilities of token_ids under the prompt (unconstrained distribution)
    finish_reason: FinishReason


@dataclass(frozen=True, slots=True)
class GenerationResult:
    """The final outcome of a request."""

    request_id: str
    token_ids: tuple[int, ...]
    text: str
    finish_reason: FinishReason
    prompt_tokens: int = 0
    cached_tokens: int = 0  # prompt tokens whose KV was reused from the prefix cache
    prefilled_tokens: int = 0  # prompt tokens actually run through the model
    decode_steps: int = 0  # engine decode steps spent on this request
    first_token_s: float | None = None  # seconds from submit to the first new token
    total_s: float = 0.0
    error: str | None = None
    candidates: tuple[Candidate, ...] = ()  # n-best, best first (also filled when num_candidates == 1)
    constraint: ConstraintReport | None = None
    attention: AttentionRecord | None = None  # when the request set `record_attention`


@dataclass(frozen=True, slots=True)
class ScoreRequest:
    """Score continuations of one prompt in one batched forward over the shared prefix."""

    request_id: str
    prompt_ids: tuple[int, ...]
    continuations: tuple[tuple[int, ...], ...]
    # the most prompt tokens this score may prefill itself; where more are not cached, an engine
    # that honours it raises PromptNotCached (None: it prefills whatever is missing)
    max_prefill: int | None = None

    def __post_init__(self) -> None:
        if not self.prompt_ids:
            raise ValueError("a ScoreRequest needs a non-empty prompt")
        if self.max_prefill is not None and self.max_prefill < 0:
            raise ValueError(f"max_prefill must be >= 0 or None, got {self.max_prefill}")


class PromptNotCached(RuntimeError):
    """A score with `max_prefill` whose prompt has more tokens missing from the KV cache."""


@dataclass(frozen=True, slots=True)
class ContinuationScore:
    logprob: float  # sum of log p(token | prompt, earlier tokens)
    num_tokens: int
    token_logprobs: tuple[float, ...]


@dataclass(frozen=True, slots=True)
class EngineStats:
    """Counters since the engine started; used by tests, benchmarks and `glm5.status`."""

    requests_submitted: int = 0
    requests_finished: int = 0
    requests_aborted: int = 0
    decode_steps: int = 0  # total model steps that decoded at least one sequence
    prefill_tokens: int = 0
    cached_prompt_tokens: int = 0
    generated_tokens: int = 0
    spec_drafted: int = 0  # MTP draft tokens proposed
    spec_accepted: int = 0  # MTP draft tokens accepted by the main model
    engine_restarts: int = 0  # times the engine thread recovered from an exception (its requests failed)
    compiled_decode: str = "off"  # off | compiling | ready | failed | unavailable (model_runtime.compiled)
    compiled_steps: int = 0  # decode steps served by the compiled graphs
    compiled_fallbacks: int = 0  # steps they cover that ran eager (no graph matched)
    compile_seconds: float = 0.0  # wall time of the background compile, once it ended

    @staticmethod
    def zero_counters() -> dict[str, int]:
        """The counters an engine keeps itself, all zero (the compile fields come from its runner)."""
        return {name: 0 for name in EngineStats.__dataclass_fields__ if name not in _COMPILE_FIELDS}


_COMPILE_FIELDS = frozenset({"compiled_decode", "compiled_steps", "compiled_fallbacks", "compile_seconds"})


@dataclass(frozen=True, slots=True)
class WarmupReport:
    """What a warm-up run did: forwards run, tokens seen, experts hit, seconds."""

    forwards: int
    tokens: int
    experts_hit: int
    experts_total: int
    seconds: float


EventCallback = Callable[[StreamEvent], None]
DoneCallback = Callable[[GenerationResult], None]
ProgressCallback = Callable[[float, str], None]  # (fraction in [0, 1], message)


class EngineProtocol(Protocol):
    """What the language server needs from a generation engine (`model_runtime.engine.Engine`).

    Callbacks run on the engine thread: callers that live on an event loop must hop back with
    `loop.call_soon_threadsafe`. `on_done` is called exactly once per submitted request,
    including for aborted and failed ones.
    """

    def submit(
        self, request: GenerationRequest, on_event: EventCallback | None, on_done: DoneCallback
    ) -> None: ...

    def abort(self, request_id: str) -> None: ...

    def stats(self) -> EngineStats: ...

    def warmup(
        self, texts: list[str], progress: ProgressCallback | None = None, hold: Callable[[], bool] | None = None
    ) -> WarmupReport:
        """Warm the engine with `texts`; no new warm-up forward starts while `hold()` is true (the
        caller's users have requests on the way that the engine cannot see yet)."""
        ...

    def prefill(self, prompt_ids: list[int]) -> GenerationResult:
        """Only fill the KV cache with `prompt_ids` (blocks until done; never on the engine thread)."""
        ...

    def open_workspace(self, roots: list[str]) -> str:
        """Bind the persistent KV store of this workspace (roots) for the loaded model; returns its directory."""
        ...

    def persist(self) -> int:
        """Write unsaved cache blocks to the workspace store now; returns how many."""
        ...

    def clear_cache(self, workspace: bool = True) -> int:
        """Forget cached prefixes and delete persisted ones (this workspace, or all); returns bytes freed."""
        ...

    def cache_stats(self) -> dict[str, int]: ...

    def score(self, request: ScoreRequest, timeout: float = 30.0) -> list[ContinuationScore]:
        """Blocking (never on the engine thread); same order as request.continuations; raises
        TimeoutError / RuntimeError with a clear message (NotImplementedError where unsupported)."""
        ...

    def shutdown(self) -> None: ...

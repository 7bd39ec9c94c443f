"""The only seam between the asyncio event loop and the generation engine's thread.

Role: load the model off the event loop, submit `GenerationRequest`s and await their results
as asyncio futures, deliver streamed text back on the loop, abort on cancellation, and run
warm-up. Handlers never touch the engine directly.

Invariants:
- Engine callbacks run on the engine thread; they only hop to the loop with
  `call_soon_threadsafe`. Nothing else crosses threads.
- Cancelling the awaiting task aborts the engine request (it stops between decode steps).
  An abort of a request that has not reached the engine yet (still waiting for the model) is
  remembered: the request then ends as aborted without being submitted.
- Warm-up runs as ordinary low-priority engine requests: completions are never held back
  behind it, and their aborts reach the engine.
- torch is imported only by the loader, on a worker thread, when the first model is needed:
  importing this module never imports torch.
- One model at a time: concurrent `load` calls share a single load.
- Repeated engine failures (recoveries of the engine thread, `EngineStats.engine_restarts`; a
  remote engine counts its endpoint's failures there, its `/tokenize` ones included) are told
  to `health` (`lsp_server.health`), which reports them once as a whole.
- Start-up order: once start-up announced a persistent KV store (`expect_store`), `generate`
  waits for it to be bound (at most `store_wait_s`), so the first completion after a restart
  reuses the blocks a previous session persisted instead of racing the binding.
- `text_ready` gives the tokenizer and the model's positions before the weights have loaded,
  when the checkpoint's own files give them (an in-process model): a completion that arrives
  during start-up builds its prompt and plan while torch imports, not after.
"""

from __future__ import annotations

import asyncio
import enum
import logging
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from model_runtime.api import (
    ContinuationScore,
    EngineProtocol,
    EngineStats,
    FinishReason,
    GenerationRequest,
    GenerationResult,
    ScoreRequest,
    StreamEvent,
    WarmupReport,
)
from model_runtime.fingerprint import weights_identity
from model_runtime.tokenizer import GlmTokenizer

from .errors import GenerationFailed, ModelUnavailable
from .health import EngineHealth
from .tokens import SafeTokenizer

if TYPE_CHECKING:
    from model_runtime.remote.config import RemoteConfig

log = logging.getLogger(__name__)

WAIT_S = 600.0  # the longest a generation is awaited (the engine answers every request; this bounds a bug)
STORE_WAIT_S = 10.0  # the longest a completion waits for the persistent KV store during start-up


@dataclass(frozen=True, slots=True)
class ModelHandle:
    """A loaded model: its engine (with its own thread) and its tokenizer."""

    engine: EngineProtocol
    tokenizer: GlmTokenizer | SafeTokenizer
    path: str
    context_length: int  # the model's positions: prompt + max_tokens must fit
    identity: str = ""  # which weights these are (`fingerprint.weights_identity`): data fitted for a model is keyed by it

    @property
    def notice(self) -> str:
        """What the user must know about this model's prompts ("" when nothing): a served model
        without fill-in-the-middle tokens of a known family gets prefix-only prompts."""
        fim = getattr(self.tokenizer, "fim", None)
        if fim is None or fim.name != "none":
            return ""
        return ("; the served model has no fill-in-the-middle tokens of a known family (GLM, Qwen2.5-Coder, DeepSeek-Coder, "
                "StarCoder2, Code Llama): completions see only the code before the cursor (engine.fimTemplate names a template)")

    def safe(self) -> ModelHandle:
        """This handle with a tokenizer that accepts any editor text (see `tokens`)."""
        if isinstance(self.tokenizer, SafeTokenizer):
            return self
        return replace(self, tokenizer=SafeTokenizer(self.tokenizer))


@dataclass(frozen=True, slots=True)
class TextModel:
    """What building a prompt and a plan needs of a model: its tokenizer and positions, and
    whether its engine scores continuations."""

    tokenizer: GlmTokenizer | SafeTokenizer
    context_length: int
    can_score: bool
    identity: str = ""  # as `ModelHandle.identity`


@dataclass(frozen=True, slots=True)
class RuntimeOptions:
    """How the runtime runs the model: its device, the weights' dtype (`auto`: float32 on the CPU,
    exact and the fast path for small models there; bfloat16 on an accelerator), and whether
    greedy requests decode speculatively with the MTP layer (same output; pays off where
    verifying two tokens costs about one step, i.e. not on a small CPU), and its intra-op CPU
    threads (`model_runtime.runtime.set_threads`; 0 = auto, one per core but one), and whether its
    decode steps are compiled (`model_runtime.compiled`; inductor's code cached under the cache
    root). With `remote`, the model runs behind an OpenAI-compatible endpoint instead
    (`model_runtime.remote`)."""

    device: str = "cpu"
    dtype: str = "auto"
    mtp: bool = False
    remote: RemoteConfig | None = None
    threads: int = 0
    compile_decode: bool = False

    def resolved_dtype(self) -> str:
        if self.dtype != "auto":
            return self.dtype
        return "float32" if self.device.split(":")[0] == "cpu" else "bfloat16"


ModelLoader = Callable[[str, RuntimeOptions], ModelHandle]  # (checkpoint dir, runtime) -> handle
TextLoader = Callable[[str, RuntimeOptions], TextModel | None]  # the same -> its text side, before the weights


def load_runtime(path: str, runtime: RuntimeOptions) -> ModelHandle:
    """Load a checkpoint into the in-process runtime (imports torch; call off the event loop),
    or connect to the remote engine of `runtime.remote` (no torch; `path`: its tokenizer, or "")."""
    if runtime.remote is not None:
        return load_remote(path, runtime.remote)
    from model_runtime import load_model
    from model_runtime.config import EngineConfig
    from model_runtime.kvstore.paths import inductor_dir
    from model_runtime.runtime import set_threads

    set_threads(runtime.threads)
    loaded = load_model(path, device=runtime.device, dtype=runtime.resolved_dtype())
    if loaded.tokenizer is None:
        raise ValueError(f"{path}: the checkpoint has no usable tokenizer.json")
    compile_cache = str(inductor_dir()) if runtime.compile_decode else ""
    engine = loaded.engine(EngineConfig(use_mtp=runtime.mtp, compile_decode=runtime.compile_decode, compile_cache_dir=compile_cache))
    return ModelHandle(engine, loaded.tokenizer, path, loaded.config.max_position_embeddings, weights_identity(Path(path)))


def load_text(path: str, runtime: RuntimeOptions) -> TextModel | None:
    """The tokenizer and positions of the in-process checkpoint at `path`, read from its
    tokenizer.json and config.json without torch; None for a remote engine (its tokenizer
    comes with the connection)."""
    if runtime.remote is not None:
        return None
    from model_runtime.config import ModelConfig

    config = ModelConfig.from_file(Path(path) / "config.json")
    return TextModel(SafeTokenizer(GlmTokenizer.from_dir(path)), config.max_position_embeddings, True, weights_identity(Path(path)))


def no_text(path: str, runtime: RuntimeOptions) -> None:
    """A `TextLoader` for loaders whose tokenizer only comes with the model."""
    return None


def load_remote(path: str, config: RemoteConfig) -> ModelHandle:
    """Connect to an OpenAI-compatible engine; the tokenizer from `path` if given, else its /tokenize."""
    from model_runtime.remote.connect import connect
    from model_runtime.remote.tokenizer import RemoteTokenizer

    from .remote_tokens import RemoteTokens

    remote = connect(config, path or None)
    tokenizer = remote.tokenizer
    if isinstance(tokenizer, RemoteTokenizer):  # HTTP per new text: its failures are the engine's
        tokenizer = RemoteTokens(tokenizer, remote.engine.note_failure)
    return ModelHandle(remote.engine, tokenizer, config.base_url, remote.context_length, remote_identity(config))


def remote_identity(config: RemoteConfig) -> str:
    """A remote engine's model, as far as this side can name it: weights fitted for it name this."""
    return f"remote:{config.base_url}/{config.model or ''}"


def embedded_model_path() -> str | None:
    """The default model shipped inside the package, when this installation has one."""
    try:
        from model_runtime import default_model_path

        return str(default_model_path())
    except (ImportError, AttributeError, OSError) as exc:
        log.info("no embedded default model: %s", exc)
        return None


class ModelState(str, enum.Enum):
    UNLOADED = "unloaded"
    LOADING = "loading"
    READY = "ready"
    FAILED = "failed"


class EngineClient:
    """Async façade over one engine. Create it on the event loop that will await it."""

    def __init__(
        self, loader: ModelLoader = load_runtime, health: EngineHealth | None = None, text_loader: TextLoader = no_text
    ) -> None:
        self._loader, self._text_loader = loader, text_loader
        self._text: asyncio.Future[TextModel] | None = None  # resolved by the loading thread, see `text_ready`
        self.health = health or EngineHealth()
        self._handle: ModelHandle | None = None
        self._loading: asyncio.Future[ModelHandle] | None = None
        self._unsubmitted: set[str] = set()  # ids in `generate` that the engine has not seen yet
        self._aborted_early: set[str] = set()  # of those, the ones aborted meanwhile
        self._store: asyncio.Event | None = None  # set when the announced KV store is bound (or failed)
        self.store_wait_s = STORE_WAIT_S
        self._closed = False
        self._scores = True
        self.state = ModelState.UNLOADED
        self.error: str | None = None

    @property
    def handle(self) -> ModelHandle | None:
        return self._handle

    def start_loading(self, locate: Callable[[], str | None], runtime: RuntimeOptions = RuntimeOptions()) -> asyncio.Future[ModelHandle]:
        """Begin loading (once) the model whose path `locate()` returns on the worker thread.

        From this call on, `ready()` waits for the load instead of failing.
        """
        if self._loading is None:
            self._loading = asyncio.ensure_future(self._load(locate, runtime))
        return self._loading

    async def load(self, path: str, runtime: RuntimeOptions = RuntimeOptions()) -> ModelHandle:
        """Load the model at `path` once; later calls return the same handle."""
        return await asyncio.shield(self.start_loading(lambda: path, runtime))

    async def _load(self, locate: Callable[[], str | None], runtime: RuntimeOptions) -> ModelHandle:
        self.state = ModelState.LOADING
        loop = asyncio.get_running_loop()
        text = self._text = loop.create_future()

        def publish(model: TextModel) -> None:
            _call_soon(loop, _resolve, text, model)

        try:
            handle = await asyncio.to_thread(self._locate_and_load, locate, runtime, publish)
        except ModelUnavailable as exc:
            self.state, self.error = ModelState.FAILED, exc.message
            log.error("%s", exc.message)
            raise
        if self._closed:  # shut down while loading: do not leave an engine thread behind
            handle.engine.shutdown()
            raise ModelUnavailable("the server is shutting down")
        self._handle, self.state = handle, ModelState.READY
        self._watch_tokenizer(handle, loop)
        log.info("model ready: %s", handle.path)
        return handle

    def _watch_tokenizer(self, handle: ModelHandle, loop: asyncio.AbstractEventLoop) -> None:
        """A remote tokenizer's failures (the engine is down while a prompt is built) count
        towards the engine's health like failed generations."""
        tokens = getattr(handle.tokenizer, "inner", None)
        if hasattr(tokens, "report"):
            tokens.report = lambda error: _call_soon(loop, self._tokenizer_failed, handle, error)

    def _tokenizer_failed(self, handle: ModelHandle, error: str) -> None:
        self.health.failed(handle.engine.stats().engine_restarts, error)

    def _locate_and_load(self, locate: Callable[[], str | None], runtime: RuntimeOptions, publish: Callable[[TextModel], None]) -> ModelHandle:
        path = locate()
        if path is None:
            raise ModelUnavailable("no model: start the server with --model DIR or set initializationOptions.model")
        try:
            text = self._text_loader(path, runtime)
        except Exception as exc:  # the full load below reports what is wrong with the checkpoint
            log.debug("no tokenizer before the weights (%s): prompts wait for the model", exc)
        else:
            if text is not None:
                publish(text)
        try:
            return self._loader(path, runtime).safe()
        except Exception as exc:
            log.exception("model load failed: %s", path)
            raise ModelUnavailable(f"cannot load model from {path or 'the remote engine'}: {exc}") from exc

    async def ready(self) -> ModelHandle:
        """The loaded model; waits for a load in progress. Raises ModelUnavailable otherwise."""
        if self._handle is not None:
            return self._handle
        if self._loading is not None:
            return await asyncio.shield(self._loading)
        raise ModelUnavailable(self.error or "no model is loaded (give --model or initializationOptions.model)")

    async def text_ready(self) -> TextModel:
        """The tokenizer and positions, as soon as they are known: before the weights have loaded
        where the checkpoint's files give them (see `load_text`), else once the model is ready
        (raising as `ready` does). Scoring is assumed where the engine is not loaded yet; an
        engine that cannot score says so when asked (`score`)."""
        text, loading = self._text, self._loading
        if self._handle is None and text is not None and loading is not None and not text.done():
            await asyncio.wait([text, loading], return_when=asyncio.FIRST_COMPLETED)
        if self._handle is None and text is not None and text.done():
            return text.result()
        handle = await self.ready()
        return TextModel(handle.tokenizer, handle.context_length, self.can_score, handle.identity)

    async def generate(
        self, request: GenerationRequest, on_text: Callable[[str], None] | None = None
    ) -> GenerationResult:
        """Run `request`; `on_text(text_so_far)` is called on the loop after each step.

        Cancelling the caller aborts the request in the engine. An engine error becomes
        `GenerationFailed`; an abort from elsewhere returns the result with reason ABORT.
        """
        rid = request.request_id
        self._unsubmitted.add(rid)
        try:
            handle = await self.ready()
            await self._store_bound()
        finally:
            self._unsubmitted.discard(rid)
        if rid in self._aborted_early:
            self._aborted_early.discard(rid)
            return GenerationResult(rid, (), "", FinishReason.ABORT, len(request.prompt_ids))
        loop = asyncio.get_running_loop()
        done: asyncio.Future[GenerationResult] = loop.create_future()

        def deliver(event: StreamEvent) -> None:
            if on_text is not None and not done.done():
                on_text(event.text)

        def on_event(event: StreamEvent) -> None:
            _call_soon(loop, deliver, event)

        def on_done(result: GenerationResult) -> None:
            _call_soon(loop, _resolve, done, result)

        try:
            handle.engine.submit(request, on_event if on_text is not None else None, on_done)
        except Exception as exc:
            raise GenerationFailed(f"engine rejected request {request.request_id}: {exc}") from exc
        try:
            result = await asyncio.wait_for(asyncio.shield(done), WAIT_S)
        except asyncio.CancelledError:
            handle.engine.abort(request.request_id)
            raise
        except TimeoutError as exc:
            handle.engine.abort(request.request_id)
            raise GenerationFailed(f"no result for {request.request_id} within {WAIT_S:g} s") from exc
        if result.finish_reason is FinishReason.ERROR:
            error = result.error or "unknown engine error"
            self.health.failed(handle.engine.stats().engine_restarts, error)
            raise GenerationFailed(f"generation failed: {error}")
        self.health.succeeded()
        return result

    async def score(self, request: ScoreRequest, timeout: float = 30.0) -> list[ContinuationScore]:
        """Score continuations of one prompt (off the loop), once the KV store is bound as for
        `generate` (else a prompt cached on disk would be prefilled again). An engine failure or
        timeout becomes `GenerationFailed`; an engine without scoring raises NotImplementedError."""
        handle = await self.ready()
        await self._store_bound()
        score = getattr(handle.engine, "score", None)
        if score is None or not self._scores:
            raise NotImplementedError(f"this engine ({type(handle.engine).__name__}) does not score continuations")
        try:
            return await asyncio.to_thread(score, request, timeout)
        except NotImplementedError:
            self._scores = False  # say so once; later plans skip what needs scores
            raise
        except (RuntimeError, TimeoutError, ValueError) as exc:
            raise GenerationFailed(f"scoring {request.request_id} failed: {exc}") from exc

    def abort(self, request_id: str) -> None:
        """Stop a request early (its `generate` returns the text so far, reason ABORT), also one
        that is still waiting for the model."""
        if request_id in self._unsubmitted:
            self._aborted_early.add(request_id)
        elif self._handle is not None:
            self._handle.engine.abort(request_id)

    async def warmup(
        self, texts: list[str], progress: Callable[[float, str], None] | None = None, hold: Callable[[], bool] | None = None
    ) -> WarmupReport:
        """Run the engine's warm-up off the loop; `progress` is called on the loop.

        Its forwards are low-priority engine requests: completions made meanwhile run first, and
        it starts no new one while a completion waits or runs in the engine, or while `hold()`
        (called from a worker thread) is true.
        """
        handle = await self.ready()
        loop = asyncio.get_running_loop()

        def on_progress(fraction: float, message: str) -> None:
            if progress is not None:
                _call_soon(loop, progress, fraction, message)

        return await asyncio.to_thread(handle.engine.warmup, texts, on_progress, hold)

    def stats(self) -> EngineStats | None:
        return self._handle.engine.stats() if self._handle is not None else None

    async def cache_stats(self) -> dict[str, int]:
        """The engine's KV cache counters (off the loop: the engine answers between steps)."""
        return await asyncio.to_thread(self._handle.engine.cache_stats) if self._handle is not None else {}

    def expect_store(self) -> None:
        """From now on `generate` and `score` wait (bounded) for the next `open_workspace` to finish."""
        if self._store is None or self._store.is_set():
            self._store = asyncio.Event()

    async def _store_bound(self) -> None:
        if self._store is None or self._store.is_set():
            return
        try:
            await asyncio.wait_for(asyncio.shield(self._store.wait()), self.store_wait_s)
        except TimeoutError:
            log.warning("the KV store was not bound within %.1f s; completing without it", self.store_wait_s)

    async def open_workspace(self, roots: list[str]) -> str | None:
        """Bind the engine's persistent KV store to these roots (off the loop); None without a model.
        Ends the wait of `expect_store`, whether or not binding succeeded."""
        try:
            if self._handle is None:
                return None
            return await asyncio.to_thread(self._handle.engine.open_workspace, roots)
        finally:
            if self._store is not None:
                self._store.set()

    async def prefill(self, prompt_ids: list[int]) -> GenerationResult | None:
        """Fill the KV cache with a stable prompt prefix, without generating (off the loop)."""
        if self._handle is None or not prompt_ids:
            return None
        return await asyncio.to_thread(self._handle.engine.prefill, prompt_ids)

    @property
    def scores_beside_steps(self) -> bool:
        """Whether a score started during a decode runs beside its steps, on another core, and
        pays off; such an engine leaves a prompt that is not cached alone (`ScoreRequest.max_prefill`).
        The in-process engine, for a model over `engine.BESIDE_MIN_BYTES`."""
        return self.can_score and bool(getattr(self._handle.engine, "scores_beside_steps", False))

    @property
    def can_score(self) -> bool:
        """Whether the engine scores continuations (False once it said it cannot)."""
        return self._scores and self._handle is not None and getattr(self._handle.engine, "score", None) is not None

    async def clear_cache(self, workspace: bool = True) -> int:
        """Forget the engine's cached prefixes and persisted blocks; returns bytes freed."""
        if self._handle is None:
            return 0
        return await asyncio.to_thread(self._handle.engine.clear_cache, workspace)

    def shutdown(self) -> None:
        self._closed = True
        if self._handle is not None:
            self._handle.engine.shutdown()
            self._handle = None
            self.state = ModelState.UNLOADED


def _resolve(future: asyncio.Future[Any], result: Any) -> None:
    if not future.done():
        future.set_result(result)


def _call_soon(loop: asyncio.AbstractEventLoop, fn: Callable[..., None], *args: object) -> None:
    try:
        loop.call_soon_threadsafe(fn, *args)
    except RuntimeError:  # the loop closed while the engine was still finishing a request
        log.debug("event loop closed; dropped engine callback %s", getattr(fn, "__name__", fn))

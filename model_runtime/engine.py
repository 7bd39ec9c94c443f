"""The generation engine: Sequence -> Scheduler -> ModelRunner -> Sampler, on its own thread.

Role: implements `model_runtime.api.EngineProtocol`. Callers `submit` requests with callbacks
and may `abort` them; the engine thread runs steps, checks aborts between steps, streams
`StreamEvent`s and ends every request with exactly one `GenerationResult`.

Invariants:
- Only the engine thread touches the scheduler and the block tables, and runs the model's steps.
  Other threads talk to it through `self._commands`; callbacks run on the engine thread. The one
  forward elsewhere is a score's (`score`): it runs on the caller's thread, over blocks the
  engine thread reserved for it and gets back afterwards (`scoring.Reservation`).
- An abort takes effect before the next step: an aborted request never decodes again and its
  cache blocks are released at once.
- A request with a decode budget (`SamplingParams.max_decode_ms`) starts no step that would end
  past it, as long as its last decode step took (`latency`); one with `min_confidence` stops
  where the model's confidence collapses.
- With `use_mtp`, greedy output is identical to plain greedy decoding, constrained or not:
  drafts from the MTP layer are only kept when the main model's own pick agrees, and the token
  after an accepted draft only where decoding on would have produced it (no stop string, stop
  token, length limit or confidence cut at the draft).
- The thread is supervised: an exception while scheduling or in one request's bookkeeping
  fails the requests it touched (reason ERROR, with the exception) and the loop goes on
  (`EngineStats.engine_restarts` counts it).
- On stop, every sequence finishes as aborted and every queued call fails with
  `EngineStopped`; later submits finish at once as aborted and later calls raise. Every wait
  for the engine thread is bounded (`WAIT_S`), so no caller blocks forever.
- KV blocks evicted from the device pool go to host RAM, then to the workspace's disk store
  once `open_workspace` bound one (`model_runtime.kvstore`); after `IDLE_PERSIST_S` without work
  the engine thread writes unsaved blocks to disk in small batches, and `shutdown` writes the rest.
- Token picks, their log-probabilities and each request's final result go through
  `model_runtime.steering` (constraint monitors, n-best branches); a plain request picks exactly
  as the sampler does, and n-best requests get no MTP drafts.
"""

from __future__ import annotations

import copy
import itertools
import logging
import queue
import threading
import time
import weakref
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

import torch

from model_runtime.api import (
    ContinuationScore, DoneCallback, EngineStats, EventCallback, FinishReason, GenerationRequest, GenerationResult,
    ProgressCallback, SamplingParams, ScoreRequest, StreamEvent, WarmupReport,
)
from model_runtime.attention_record import RequestRecord, StepRecorder
from model_runtime.cache import BlockManager, KVCache
from model_runtime.config import EngineConfig
from model_runtime.kvstore.paths import store_dir
from model_runtime.kvstore.tiers import CacheTiers
from model_runtime.latency import budget_spent, confidence_collapsed
from model_runtime.model_runner import Feed, ModelRunner, StepOutput
from model_runtime.scheduler import Scheduler, Step
from model_runtime.scoring import Reservation, score_continuations
from model_runtime.sequence import Sequence, SequenceStatus
from model_runtime.steering import Steering
from model_runtime.text import TextState

if TYPE_CHECKING:
    from model_runtime.runtime import LoadedModel

log = logging.getLogger(__name__)

IDLE_PERSIST_S = 1.0  # idle time before unsaved KV blocks are written to the workspace's disk store
IDLE_PERSIST_BLOCKS = 16  # blocks written per idle batch (the command queue is checked between)
WAIT_S = 600.0  # the longest any caller waits for the engine thread (a call, a prefill, a warm-up forward)
# A model whose weights take more than this gets its candidates scored beside the decode steps
# (`scores_beside_steps`): its forwards are matrix work that a second core takes on. A smaller
# one's steps are mostly the interpreter's, which a second thread's forward only contends for
# (the embedded model's typing with every request scored: p95 up 5-76 ms in five runs).
BESIDE_MIN_BYTES = 128 << 20


class EngineStopped(RuntimeError):
    """The engine thread has stopped: nothing more runs on it."""


class Engine:
    def __init__(self, loaded: LoadedModel, config: EngineConfig | None = None) -> None:
        self.loaded, self.config = loaded, config or EngineConfig()
        cfg = loaded.config
        if self.config.use_mtp and not cfg.num_nextn_predict_layers:
            raise ValueError("use_mtp: this model has no MTP layer (num_nextn_predict_layers = 0)")
        num_blocks, spill = (t // self.config.block_size for t in (self.config.max_cache_tokens, self.config.latent_spill_tokens))
        self.cache = KVCache(cfg, num_blocks, self.config.block_size, loaded.dtype, loaded.device, spill)
        self.blocks = BlockManager(num_blocks, self.config.block_size, self.cache, spill)
        self.tiers = CacheTiers(self.cache, self.blocks, self.config.host_cache_bytes, self.config.disk_cache_bytes)
        self.blocks.cold = self.tiers
        self.scheduler = Scheduler(self.config, self.blocks)
        self.runner = ModelRunner(loaded.model, self.cache, self.config, loaded.device)
        self.scores_beside_steps = loaded.model.weight_bytes() > BESIDE_MIN_BYTES  # a score started during a decode pays off
        if self.config.compile_decode:
            self.runner.compiled = loaded.compiled_decode(self.config.block_size, self.config.compile_cache_dir or None)
            alive = weakref.ref(self)  # the compile (one per model) must not keep this engine alive
            self.runner.compiled.give_way.add(lambda: (engine := alive()) is not None and engine.serving_users())
        self.eos_ids = frozenset(cfg.eos_token_id) | frozenset(loaded.tokenizer.special.eos_ids if loaded.tokenizer else ())
        self._commands: queue.Queue[tuple[str, object]] = queue.Queue()
        self._thread: threading.Thread | None = None
        self._stopping = False
        self._stopped = False  # set (under `_gate`) once the thread has finished everything
        self._gate = threading.Lock()
        self._counters = EngineStats.zero_counters()
        self._texts: dict[str, TextState] = {}
        self._prefill_only: set[str] = set()
        self._records: dict[str, RequestRecord] = {}  # requests with `record_attention`
        self._prefill_ids = itertools.count()
        self._busy_at = 0.0
        self.clock: Callable[[], float] = time.perf_counter  # decode budgets and first-token times
        self._steer = Steering(self)

    # ---- thread-safe API ------------------------------------------------------------------
    def start(self) -> Engine:
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="glm5-engine", daemon=True)
            self._thread.start()
        return self

    def submit(self, request: GenerationRequest, on_event: EventCallback | None = None, on_done: DoneCallback | None = None) -> None:
        self._counters["requests_submitted"] += 1
        if not self._enqueue(("submit", (request, on_event, on_done))):
            self._refuse(request, on_done)

    def abort(self, request_id: str) -> None:
        self._enqueue(("abort", request_id))

    def _enqueue(self, command: tuple[str, object]) -> bool:
        """Queue a command for the thread; False once it has stopped."""
        with self._gate:
            if self._stopped:
                return False
            self._commands.put(command)
            return True

    def serving_users(self) -> bool:
        """Whether a user's request (priority >= 0) is queued or running; any thread may ask (it
        reads a snapshot of the scheduler's queues)."""
        return any(s.request.priority >= 0 for s in (*self.scheduler.waiting, *self.scheduler.running))

    def stats(self) -> EngineStats:
        compiled = self.runner.compiled
        if compiled is None:
            return EngineStats(**self._counters)
        status = compiled.status
        return EngineStats(**self._counters, **self.runner.compiled_counts, compiled_decode=status.state,
                           compile_seconds=round(status.seconds, 2))

    def shutdown(self) -> None:
        """Stop the engine thread, then write unsaved KV blocks to the workspace's disk store."""
        self._stopping = True
        self._commands.put(("wake", None))
        if self._thread is not None:
            self._thread.join(timeout=10)
            stuck, self._thread = self._thread.is_alive(), None
            if stuck:
                log.warning("engine thread did not stop within 10 s; the KV cache is not persisted")
                return
        try:
            self.tiers.persist()
        except Exception:  # persisting is an optimisation: never fail a shutdown over it
            log.exception("persisting the KV cache at shutdown failed")

    def call(self, fn: Callable[[], object], timeout: float = WAIT_S) -> object:
        """Run `fn` on the engine thread (or inline before the thread starts) and return its
        result. Raises EngineStopped once the engine stopped, TimeoutError after `timeout` s."""
        if self._stopped:
            raise EngineStopped("the engine has stopped")
        if self._thread is None or threading.current_thread() is self._thread:
            return fn()
        done, box = threading.Event(), {}
        if not self._enqueue(("call", (fn, done, box))):
            raise EngineStopped("the engine has stopped")
        if not done.wait(timeout):
            raise TimeoutError(f"the engine thread did not run a call within {timeout:g} s")
        if "error" in box:
            raise box["error"]
        return box["value"]

    def warmup(
        self, texts: list[str], progress: ProgressCallback | None = None, hold: Callable[[], bool] | None = None
    ) -> WarmupReport:
        from model_runtime.warmup import run_warmup

        return run_warmup(self, texts, progress, hold)

    # ---- KV cache tiers (thread-safe) ----------------------------------------------------
    def open_workspace(self, roots: Iterable[str], cache_dir: str | None = None) -> str:
        """Bind the disk tier to this workspace's store (`kvstore.paths`) and return its directory.
        Safe to call again; another set of roots persists the previous workspace first."""
        directory = store_dir(list(roots), self.loaded.fingerprint, cache_dir)
        self.call(lambda: self.tiers.bind(directory, self.loaded.fingerprint))
        return str(directory)

    def persist(self) -> int:
        """Write every unsaved full block of this workspace to disk now; returns how many."""
        return self.call(self.tiers.persist)

    def clear_cache(self, workspace: bool = True) -> int:
        """Forget all cached prefixes and delete persisted blocks: this workspace's, or with
        `workspace=False` every workspace's; returns the bytes freed (host RAM and disk)."""
        return self.call(lambda: self.tiers.clear(every_workspace=not workspace))

    def cache_stats(self) -> dict[str, int]:
        return self.call(self.tiers.stats)

    def score(self, request: ScoreRequest, timeout: float = 30.0) -> list[ContinuationScore]:
        """Log-probabilities of each continuation after the prompt, in one batched forward over
        the prompt's shared KV blocks (`model_runtime.scoring`); same order as the request.

        The engine thread takes the blocks (and prefills what the prefix cache lacks, at most
        `max_prefill` tokens); the forward then runs on the calling thread, beside the engine
        thread's steps (on another core), and the blocks go back through the command queue, after
        the take in its order (also when the take timed out: it releases whatever the take holds
        by then). `scores_beside_steps` says whether starting a score during a decode pays off."""
        if self._thread is not None and threading.current_thread() is self._thread:
            raise RuntimeError("score waits for the engine thread, so it cannot run on it")
        if self._thread is None:
            return score_continuations(self, request)
        held = Reservation(request)
        try:
            self.call(lambda: held.take(self), timeout)
            return held.run(self)
        finally:
            self._enqueue(("call", (lambda: held.release(self), threading.Event(), {})))

    def prefill(self, prompt_ids: Iterable[int], timeout: float = WAIT_S) -> GenerationResult:
        """Only fill the KV cache with `prompt_ids` (nothing is sampled), at low priority, and wait
        for it: warms the stable shared context of a workspace so the first completion reuses it."""
        request = GenerationRequest(f"prefill-{next(self._prefill_ids)}", tuple(prompt_ids), SamplingParams(max_tokens=1), priority=-1)
        self._prefill_only.add(request.request_id)
        return self.run(request, timeout)

    def run(self, request: GenerationRequest, timeout: float = WAIT_S) -> GenerationResult:
        """Submit `request` and wait for its result (never on the engine thread). After `timeout`
        seconds it is aborted and TimeoutError raised."""
        if self._thread is not None and threading.current_thread() is self._thread:
            raise RuntimeError("run waits for the engine thread, so it cannot run on it")
        done, box = threading.Event(), []

        def finished(result: GenerationResult) -> None:
            box.append(result)
            done.set()

        if self._thread is None:
            self.add(request, None, finished)
            self.run_until_idle()
        else:
            self.submit(request, None, finished)
            if not done.wait(timeout):
                self.abort(request.request_id)
                raise TimeoutError(f"{request.request_id}: no result from the engine within {timeout:g} s")
        return box[0]

    # ---- engine thread ----------------------------------------------------------------------
    def _loop(self) -> None:
        while not self._stopping:
            try:
                self._tick()
            except Exception as exc:
                self._recover(exc)
        self._stop_all()

    def _tick(self) -> None:
        persist = not self.scheduler.has_work and self._persist_due()
        self._drain(block=not self.scheduler.has_work and not persist)
        if self.scheduler.has_work and not self._stopping:
            self.step()
        elif persist and not self._stopping:
            self.tiers.persist(IDLE_PERSIST_BLOCKS)

    def _recover(self, exc: Exception) -> None:
        """Supervision: fail every request in flight with the exception and go on."""
        log.exception("engine thread: %s; failing the requests in flight and carrying on", exc)
        self._counters["engine_restarts"] += 1
        for seq in [*self.scheduler.waiting, *self.scheduler.running]:
            self._fail_safely(seq, f"engine error: {type(exc).__name__}: {exc}")

    def _stop_all(self) -> None:
        """The thread's last act: abort every sequence, fail every queued command."""
        with self._gate:
            self._stopped = True
        for seq in [*self.scheduler.waiting, *self.scheduler.running]:
            seq.error = "the engine has stopped"
            try:
                self._finish(seq, FinishReason.ABORT)
            except Exception:
                log.exception("aborting %s at stop failed", seq.request_id)
        while True:
            try:
                kind, payload = self._commands.get_nowait()
            except queue.Empty:
                return
            if kind == "submit":
                self._refuse(payload[0], payload[2])
            elif kind == "call":
                _fn, done, box = payload
                box["error"] = EngineStopped("the engine has stopped")
                done.set()

    def _refuse(self, request: GenerationRequest, on_done: DoneCallback | None) -> None:
        """Finish a request that arrived after the engine stopped."""
        self._counters["requests_aborted"] += 1
        if on_done is not None:
            on_done(GenerationResult(request.request_id, (), "", FinishReason.ABORT, len(request.prompt_ids), error="the engine has stopped"))

    def _persist_due(self) -> bool:
        return self.tiers.disk is not None and time.monotonic() - self._busy_at >= IDLE_PERSIST_S and self.tiers.unsaved()

    def _drain(self, block: bool) -> None:
        try:
            command = self._commands.get(timeout=0.5) if block else self._commands.get_nowait()
        except queue.Empty:
            return
        while True:
            self._handle(*command)
            try:
                command = self._commands.get_nowait()
            except queue.Empty:
                return

    def _handle(self, kind: str, payload) -> None:
        if kind == "submit":
            try:
                self.add(*payload)
            except Exception as exc:  # a request the engine cannot even hold: fail it alone
                log.exception("submit of %s failed", payload[0].request_id)
                self._refuse_error(payload[0], payload[2], f"{type(exc).__name__}: {exc}")
        elif kind == "abort":
            self._abort(payload)
        elif kind == "call":
            fn, done, box = payload
            try:
                box["value"] = fn()
            except Exception as exc:  # handed back to the calling thread
                box["error"] = exc
            done.set()

    # ---- synchronous core (also used without a thread) --------------------------------------
    def add(self, request: GenerationRequest, on_event: EventCallback | None = None, on_done: DoneCallback | None = None) -> Sequence:
        seq = Sequence(request, on_event, on_done, self.eos_ids | frozenset(request.sampling.stop_token_ids))
        if not request.prompt_ids:
            self._fail(seq, "empty prompt")
            return seq
        limit = self.loaded.config.max_position_embeddings
        if len(request.prompt_ids) + request.sampling.max_tokens > limit:
            self._fail(seq, f"prompt ({len(request.prompt_ids)}) + max_tokens exceeds the model's {limit} positions")
            return seq
        if not self.blocks.blocks_needed(len(request.prompt_ids) + request.sampling.max_tokens) <= len(self.blocks.blocks):
            self._fail(seq, "prompt + max_tokens does not fit in the KV cache (raise max_cache_tokens)")
            return seq
        if request.sampling.max_tokens == 0:
            self._finish(seq, FinishReason.LENGTH)
            return seq
        error = self._steer.prepare(seq)
        if error is not None:
            self._fail(seq, error)
            return seq
        self._texts[seq.request_id] = self._steer.text_state(request)
        if request.record_attention:
            self._records[seq.request_id] = RequestRecord(self.loaded.config, seq.prompt_len)
        self.scheduler.add(seq)
        return seq

    def step(self) -> Step | None:
        step = self.scheduler.schedule()
        if step is None:
            return None
        self._busy_at = time.monotonic()
        started = self.clock()
        feeds = [self._feed(s, n, step.is_prefill) for s, n in zip(step.seqs, step.num_tokens)]
        try:
            out = self.runner.run(feeds, self._recorder(step.seqs, feeds))
            accepted = [self._accept(seq, feed, logits) for seq, feed, logits in zip(step.seqs, feeds, out.logits)]
            if self.config.use_mtp:
                self._draft(step.seqs, feeds, out, accepted)
        except Exception as exc:
            log.exception("engine step failed")
            for seq in step.seqs:
                self._fail(seq, f"{type(exc).__name__}: {exc}")
            return step
        self._counters["decode_steps"] += not step.is_prefill
        now = self.clock()
        next_step_s = 0.0 if step.is_prefill else now - started  # a prefill says nothing of a decode step
        for seq in step.seqs:
            seq.last_step_at = time.perf_counter()
            seq.decode_steps += not step.is_prefill
            if seq.finish_reason is None and budget_spent(seq.sampling, seq.first_token_at, now, next_step_s):
                seq.finish_reason = FinishReason.LENGTH
            try:
                self._after_tokens(seq)
            except Exception as exc:  # one request's bookkeeping failed: fail it, not the others
                log.exception("finishing the step of %s failed", seq.request_id)
                self._fail_safely(seq, f"engine error: {type(exc).__name__}: {exc}")
        return step

    def run_until_idle(self) -> None:
        while self.scheduler.has_work:
            self.step()

    # ---- step helpers -------------------------------------------------------------------------
    def _recorder(self, seqs: list[Sequence], feeds: list[Feed]) -> StepRecorder | None:
        slots = [
            (b, self._records[seq.request_id], feed.logits_from)
            for b, (seq, feed) in enumerate(zip(seqs, feeds))
            if seq.request_id in self._records
        ]
        return StepRecorder(slots) if slots else None

    def _feed(self, seq: Sequence, n: int, is_prefill: bool) -> Feed:
        tokens = seq.token_ids[seq.num_computed : seq.num_computed + (n if is_prefill else 1)]
        if not is_prefill and seq.draft is not None:
            tokens = tokens + [seq.draft]
        completes = seq.num_computed + len(tokens) >= len(seq.token_ids)
        logits_from = 0 if not is_prefill else (len(tokens) - 1 if completes else len(tokens))
        if seq.request_id in self._prefill_only:
            logits_from = len(tokens)
        prompt_fed = max(0, min(seq.prompt_len, seq.num_computed + len(tokens)) - seq.num_computed)
        seq.prefilled_tokens += prompt_fed
        self._counters["prefill_tokens"] += prompt_fed
        return Feed(seq.num_computed, tokens, seq.block_table, logits_from)

    def _accept(self, seq: Sequence, feed: Feed, logits: torch.Tensor) -> list[int]:
        """Apply a step's outcome to `seq`; returns the newly accepted tokens."""
        if feed.logits_from == len(feed.tokens):  # a prefill chunk without logits
            seq.num_computed += len(feed.tokens)
            self._seal(seq)
            if seq.num_computed >= len(seq.token_ids):  # the end of a prefill-only request
                seq.finish_reason = FinishReason.LENGTH
            return []
        picks = self._steer.pick(seq, logits)  # one row, or two where a draft was fed
        drafted = seq.draft is not None and len(feed.tokens) == 2
        accept = drafted and picks[0] == seq.draft
        if drafted:
            self._counters["spec_drafted"] += 1
            self._counters["spec_accepted"] += accept
        new = picks[:2] if accept else picks[:1]
        if confidence_collapsed(seq.sampling, seq.text, logits[0], new[0]):
            seq.finish_reason, new, accept = FinishReason.STOP, [], False
        elif accept and self._ends_at(seq, new[0], logits[1], new[1]):
            new = new[:1]
        seq.num_computed += (1 + accept) if drafted else len(feed.tokens)
        if drafted and not accept:  # the draft's KV is not part of the sequence
            self.blocks.truncate(seq.block_table, seq.block_hashes, len(seq.token_ids) + 1)
        seq.draft = None
        accepted = self._append(seq, new)
        self._seal(seq)
        self._steer.accepted(seq, logits, accepted)
        return accepted

    def _ends_at(self, seq: Sequence, draft: int, row: torch.Tensor, token: int) -> bool:
        """Whether decoding one token a step would have stopped at the accepted `draft`, before
        `token` (picked from `row`): a stop string or a confidence cut. Stop tokens and the length
        limit end it in `_append`. A confidence cut finishes `seq` here."""
        state = self._texts.get(seq.request_id)
        if state is None or not (state.stop_strings or seq.sampling.min_confidence):
            return False  # nothing but a stop token or the length limit can end it
        probe = copy.copy(state)
        if probe.update([*seq.output_ids, draft]):
            return True
        if confidence_collapsed(seq.sampling, probe.text, row, token):
            seq.finish_reason = FinishReason.STOP
            return True
        return False

    def _append(self, seq: Sequence, new: list[int]) -> list[int]:
        taken = []
        for token in new:
            seq.token_ids.append(token)
            taken.append(token)
            self._counters["generated_tokens"] += 1
            if seq.first_token_at is None:
                seq.first_token_at = self.clock()
            if token in seq.stop_ids:
                seq.finish_reason = FinishReason.STOP
            elif len(seq.output_ids) >= seq.sampling.max_tokens:
                seq.finish_reason = FinishReason.LENGTH
            if seq.finish_reason is not None:
                break
        return taken

    def _seal(self, seq: Sequence) -> None:
        self.blocks.seal_full_blocks(seq.block_table, seq.token_ids[: seq.num_computed], seq.block_hashes, seq.prompt_len)

    def _draft(self, seqs: list[Sequence], feeds: list[Feed], out: StepOutput, accepted: list[list[int]]) -> None:
        """Run the MTP layer over every position that became final this step; greedy
        sequences that go on get its argmax as the next draft."""
        mtp_feeds, hidden, owners = [], [], []
        for seq, feed, offset, new in zip(seqs, feeds, out.offsets, accepted):
            n_final = seq.num_computed - feed.start
            if n_final <= 0:
                continue
            nxt = seq.token_ids[feed.start + 1 : feed.start + 1 + n_final]
            if len(nxt) < n_final:  # the prompt chunk's last position has no next token yet
                n_final = len(nxt)
            if n_final == 0:
                continue
            mtp_feeds.append(Feed(feed.start, nxt, seq.block_table, n_final - 1))
            hidden.append(out.hidden[offset : offset + n_final])
            owners.append(seq)
        if not mtp_feeds:
            return
        for seq, logits in zip(owners, self.runner.run_mtp(mtp_feeds, hidden)):
            greedy = seq.sampling.temperature == 0
            if greedy and seq.finish_reason is None and not seq.in_prefill and self._steer.may_draft(seq):
                seq.draft = int(logits.argmax())

    def _after_tokens(self, seq: Sequence) -> None:
        """Update the text, emit a StreamEvent if this step produced tokens, finish if done."""
        state = self._texts.get(seq.request_id)
        produced = len(seq.output_ids) - seq.emitted
        if state is not None and produced:
            if state.update(seq.output_ids) and seq.finish_reason is None:
                seq.finish_reason = FinishReason.STOP
            seq.text = state.text
            if seq.on_event is not None and seq.finish_reason is None:
                new = tuple(seq.output_ids[seq.emitted :])
                seq.emitted = len(seq.output_ids)
                self._emit(seq, StreamEvent(seq.request_id, new, state.streamable))
        if seq.finish_reason is not None:
            self._finish(seq, seq.finish_reason)

    def _abort(self, request_id: str) -> None:
        seq = self.scheduler.find(request_id)
        if seq is not None:
            self._finish(seq, FinishReason.ABORT)
        for child in self._steer.live_children(request_id):
            self._finish(child, FinishReason.ABORT)

    def _fail(self, seq: Sequence, message: str) -> None:
        seq.error = message
        self._finish(seq, FinishReason.ERROR)

    def _fail_safely(self, seq: Sequence, message: str) -> None:
        """`_fail`, or when the engine's own state cannot finish it, drop it and still answer."""
        if seq.is_finished:
            return  # already answered
        try:
            self._fail(seq, message)
        except Exception:
            log.exception("failing %s cleanly failed; dropping it", seq.request_id)
            for queue_ in (self.scheduler.waiting, self.scheduler.running):
                if seq in queue_:
                    queue_.remove(seq)
            self._texts.pop(seq.request_id, None)
            self._refuse_error(seq.request, seq.on_done, message)

    def _refuse_error(self, request: GenerationRequest, on_done: DoneCallback | None, message: str) -> None:
        self._counters["requests_finished"] += 1
        if on_done is not None:
            on_done(GenerationResult(request.request_id, (), "", FinishReason.ERROR, len(request.prompt_ids), error=message))

    def _finish(self, seq: Sequence, reason: FinishReason) -> None:
        self.scheduler.remove(seq)
        seq.status = SequenceStatus.ABORTED if reason is FinishReason.ABORT else SequenceStatus.FINISHED
        seq.finish_reason = reason
        self._texts.pop(seq.request_id, None)
        self._prefill_only.discard(seq.request_id)
        record = self._records.pop(seq.request_id, None)
        if not self._steer.is_child(seq):
            key = "requests_aborted" if reason is FinishReason.ABORT else "requests_finished"
            self._counters[key] += 1
            self._counters["cached_prompt_tokens"] += seq.cached_tokens
        now = time.perf_counter()
        result = GenerationResult(
            seq.request_id, tuple(seq.output_ids), seq.text, reason, seq.prompt_len, seq.cached_tokens,
            seq.prefilled_tokens, seq.decode_steps,
            None if seq.first_token_at is None else seq.first_token_at - seq.arrival, now - seq.arrival, seq.error,
            attention=record.result() if record is not None else None,
        )
        if seq.on_event is not None:
            self._emit(seq, StreamEvent(seq.request_id, tuple(seq.output_ids[seq.emitted :]), seq.text, True, reason))
        self._steer.deliver(seq, result)

    def _emit(self, seq: Sequence, event: StreamEvent) -> None:
        try:
            seq.on_event(event)
        except Exception:
            log.exception("on_event callback of %s failed", seq.request_id)


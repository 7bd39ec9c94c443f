"""Test doubles: a byte-level GLM tokenizer and a scripted engine implementing `EngineProtocol`.

The fake engine runs on its own thread like the real one: one decode step per loop iteration
for every running request, abort honoured between steps, `on_done` exactly once per request.
Tests script what each request "generates" (and may slow each step down with `step_s`, and
binding the workspace's KV store with `store_s`); `decode_steps` counts what really ran. Like a
persisted KV store after a restart, a request submitted once a workspace is bound reports its
whole prompt as cached, one submitted before reports it all as prefilled.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from tokenizers.pre_tokenizers import ByteLevel

from model_runtime.api import (
    EngineStats,
    FinishReason,
    GenerationRequest,
    GenerationResult,
    StreamEvent,
    WarmupReport,
)
from model_runtime.tokenizer import SPECIAL_NAMES, GlmTokenizer, SpecialTokens


def byte_tokenizer() -> GlmTokenizer:
    """A GLM tokenizer over single bytes (no merges) with every GLM special token."""
    vocab = {c: i for i, c in enumerate(sorted(ByteLevel.alphabet()))}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(list(SPECIAL_NAMES.values()))
    ids = {name: tok.token_to_id(text) for name, text in SPECIAL_NAMES.items()}
    return GlmTokenizer(tok, SpecialTokens(**ids, eos_ids=(ids["endoftext"],)), source="bytes")


log = logging.getLogger(__name__)
Script = Callable[[GenerationRequest], str]


@dataclass
class _Running:
    request: GenerationRequest
    target: list[int]
    on_event: Callable[[StreamEvent], None] | None
    on_done: Callable[[GenerationResult], None]
    submitted: float
    cached: int = 0
    produced: list[int] = field(default_factory=list)
    steps: int = 0
    first_token_s: float | None = None


class FakeEngine:
    """Scripted engine: request -> text (via `script`), emitted one token per decode step."""

    def __init__(self, tokenizer: GlmTokenizer, script: Script, step_s: float = 0.0, store_s: float = 0.0) -> None:
        self.tokenizer = tokenizer
        self.script = script
        self.step_s = step_s
        self.store_s = store_s
        self._inbox: queue.Queue[tuple[str, object]] = queue.Queue()
        self._running: dict[str, _Running] = {}
        self._stats = EngineStats.zero_counters()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self.prefilled: list[list[int]] = []  # prompts given to `prefill`
        self.workspaces: list[list[str]] = []  # roots given to `open_workspace`
        self.cleared: list[bool] = []  # `clear_cache(workspace)` calls
        self._thread = threading.Thread(target=self._loop, name="fake-engine", daemon=True)
        self._thread.start()

    def submit(self, request, on_event, on_done) -> None:
        if not request.prompt_ids:
            raise ValueError("empty prompt")
        with self._lock:
            self._stats["requests_submitted"] += 1
        self._inbox.put(("submit", (request, on_event, on_done)))

    def abort(self, request_id: str) -> None:
        self._inbox.put(("abort", request_id))

    def stats(self) -> EngineStats:
        with self._lock:
            return EngineStats(**self._stats)

    def warmup(self, texts, progress=None, hold=None) -> WarmupReport:
        """One step per text, each after `hold()` lets go; logs how many requests were in flight
        when each began (a test checks the warm-up never ran beside a completion)."""
        for i, _ in enumerate(texts):
            while hold is not None and hold():
                time.sleep(0.005)
            log.info("fake warm-up forward %d with %d requests in flight", i, len(self._running) + self._inbox.qsize())
            time.sleep(self.step_s)
            if progress is not None:
                progress((i + 1) / len(texts), f"warm-up {i + 1}/{len(texts)}")
        tokens = sum(len(self.tokenizer.encode(t)) for t in texts)
        return WarmupReport(forwards=len(texts), tokens=tokens, experts_hit=4, experts_total=4, seconds=0.0)

    def prefill(self, prompt_ids) -> GenerationResult:
        self.prefilled.append(list(prompt_ids))
        return GenerationResult(f"prefill-{len(self.prefilled)}", (), "", FinishReason.LENGTH, len(prompt_ids))

    def open_workspace(self, roots) -> str:
        time.sleep(self.store_s)
        self.workspaces.append(list(roots))
        return f"/fake-kv-store/{len(self.workspaces)}"

    def persist(self) -> int:
        return 0

    def clear_cache(self, workspace: bool = True) -> int:
        self.cleared.append(workspace)
        return 1024

    def cache_stats(self) -> dict[str, int]:
        suffix = self.tokenizer.special.code_suffix
        return {
            "workspaces_opened": len(self.workspaces),
            "prefills": len(self.prefilled),
            "prefills_ending_at_code_suffix": sum(p[-1:] == [suffix] for p in self.prefilled),
            "clears": len(self.cleared),
        }

    def shutdown(self) -> None:
        self._stop.set()
        self._inbox.put(("stop", None))
        self._thread.join(timeout=5)

    def _loop(self) -> None:
        while not self._stop.is_set():
            block = not self._running
            try:
                while True:
                    kind, payload = self._inbox.get(block=block, timeout=None if block else 0)
                    block = False
                    self._handle(kind, payload)
            except queue.Empty:
                pass
            if self._running:
                self._step()

    def _handle(self, kind: str, payload: object) -> None:
        if kind == "submit":
            request, on_event, on_done = payload  # type: ignore[misc]
            target = self.tokenizer.encode(self.script(request))[: request.sampling.max_tokens]
            with self._lock:
                self._stats["prefill_tokens"] += len(request.prompt_ids)
            cached = len(request.prompt_ids) if self.workspaces else 0
            self._running[request.request_id] = _Running(request, target, on_event, on_done, time.monotonic(), cached)
        elif kind == "abort" and payload in self._running:
            self._finish(self._running[payload], FinishReason.ABORT)  # type: ignore[index]

    def _step(self) -> None:
        if self.step_s:
            time.sleep(self.step_s)
        with self._lock:
            self._stats["decode_steps"] += 1
        for run in list(self._running.values()):
            run.steps += 1
            if len(run.produced) >= len(run.target):
                self._finish(run, FinishReason.STOP)  # the step that produced eos
                continue
            run.produced.append(run.target[len(run.produced)])
            run.first_token_s = run.first_token_s or time.monotonic() - run.submitted
            with self._lock:
                self._stats["generated_tokens"] += 1
            if run.on_event is not None:
                run.on_event(StreamEvent(run.request.request_id, (run.produced[-1],), self._text(run)))
            if len(run.produced) >= run.request.sampling.max_tokens:
                self._finish(run, FinishReason.LENGTH)

    def _text(self, run: _Running) -> str:
        return self.tokenizer.decode(run.produced)

    def _finish(self, run: _Running, reason: FinishReason) -> None:
        del self._running[run.request.request_id]
        with self._lock:
            self._stats["requests_aborted" if reason is FinishReason.ABORT else "requests_finished"] += 1
        text = self._text(run)
        if run.on_event is not None:
            run.on_event(StreamEvent(run.request.request_id, (), text, finished=True, finish_reason=reason))
        run.on_done(
            GenerationResult(
                request_id=run.request.request_id,
                token_ids=tuple(run.produced),
                text=text,
                finish_reason=reason,
                prompt_tokens=len(run.request.prompt_ids),
                cached_tokens=run.cached,
                prefilled_tokens=len(run.request.prompt_ids) - run.cached,
                decode_steps=run.steps,
                first_token_s=run.first_token_s,
                total_s=time.monotonic() - run.submitted,
            )
        )

"""`EngineService`: one in-process engine shared by every HTTP client of the daemon.

Role: the asyncio side of `glm5-serve`. It submits requests to the one `Engine` (whose
scheduler batches them, whatever client they came from), turns the engine thread's callbacks
into an async stream of `StreamEvent`s, aborts a request when its client goes away, tokenizes
prompts the way vLLM does (special-token strings become their ids), and computes logprobs.

Invariants:
- Engine callbacks only hop to the loop (`call_soon_threadsafe`); nothing else crosses threads.
- Leaving `generate()` before its end (a client disconnect cancels the handler) aborts the
  request in the engine, which stops it before its next decode step and frees its blocks.
- Logprobs are computed by one full forward over prompt + output on the engine thread
  (`LoadedModel.logits`): exact for the served weights, at the cost of that forward.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections import Counter
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass

import torch

from model_runtime.api import GenerationRequest, GenerationResult, StreamEvent
from model_runtime.engine import Engine
from model_runtime.runtime import LoadedModel
from model_runtime.tokenizer import SPECIAL_NAMES, GlmTokenizer

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class TokenLogprobs:
    """Per token of a span: its text, its logprob (None for a first prompt token) and the top ones."""

    tokens: list[str]
    token_logprobs: list[float | None]
    top_logprobs: list[dict[str, float] | None]


class EngineService:
    def __init__(self, loaded: LoadedModel, engine: Engine, name: str) -> None:
        if loaded.tokenizer is None:
            raise ValueError(f"{loaded.path}: the daemon needs the checkpoint's tokenizer.json")
        self.loaded, self.engine, self.name = loaded, engine, name
        self.tokenizer: GlmTokenizer = loaded.tokenizer
        self.created = int(time.time())
        self.max_model_len = loaded.config.max_position_embeddings
        self.http = Counter[str]()  # requests served, by endpoint and status, for /metrics
        self.running = 0
        self.workspace_lease: str | None = None  # given to the client that bound the KV store (`app`)
        self._ids = itertools.count()
        self._specials = sorted(
            ((text, i) for text in SPECIAL_NAMES.values() if (i := self.tokenizer.token_to_id(text)) is not None),
            key=lambda item: -len(item[0]),
        )

    def request_id(self) -> str:
        return f"cmpl-{next(self._ids)}-{int(time.time() * 1000)}"

    # ---- tokens ----------------------------------------------------------------------------
    def encode(self, text: str) -> list[int]:
        """Token ids of `text` with special-token strings as their ids (as vLLM's /tokenize does)."""
        ids: list[int] = []
        start = 0
        while start < len(text):
            hit = min(
                ((pos, special, i) for special, i in self._specials if (pos := text.find(special, start)) >= 0),
                default=None,
            )
            end = hit[0] if hit else len(text)
            ids += self.tokenizer.encode(text[start:end])
            if hit is None:
                break
            ids.append(hit[2])
            start = end + len(hit[1])
        return ids

    def decode(self, ids: Sequence[int]) -> str:
        return self.tokenizer.decode(list(ids), skip_special=False)

    def check_ids(self, ids: Sequence[int]) -> None:
        vocab = self.loaded.config.vocab_size
        bad = [i for i in ids if not 0 <= i < vocab]
        if bad:
            raise ValueError(f"prompt token ids must lie in [0, {vocab}), got {bad[:5]}")

    # ---- generation ------------------------------------------------------------------------
    async def generate(self, request: GenerationRequest) -> AsyncIterator[StreamEvent | GenerationResult]:
        """The request's stream events, then its result. Abandoning the iterator aborts it."""
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[StreamEvent | GenerationResult] = asyncio.Queue()

        def put(item: StreamEvent | GenerationResult) -> None:
            try:
                loop.call_soon_threadsafe(queue.put_nowait, item)
            except RuntimeError:  # the loop closed while the engine finished the request
                pass

        finished = False
        self.running += 1
        self.engine.submit(request, put, put)
        try:
            while True:
                item = await queue.get()
                if isinstance(item, GenerationResult):
                    finished = True
                    yield item
                    return
                if not item.finished:
                    yield item
        finally:
            self.running -= 1
            if not finished:
                self.engine.abort(request.request_id)
                log.info("request %s abandoned by its client: aborted", request.request_id)

    async def prefill(self, ids: list[int]) -> GenerationResult:
        return await asyncio.to_thread(self.engine.prefill, ids)

    # ---- logprobs --------------------------------------------------------------------------
    async def logprobs(self, ids: list[int], first: int, top: int) -> TokenLogprobs:
        """Logprobs of `ids[first:]`, each given the ids before it (one forward, engine thread)."""
        table = await asyncio.to_thread(self.engine.call, lambda: torch.log_softmax(self.loaded.logits(ids).float(), dim=-1))
        tokens, values, tops = [], [], []
        for pos in range(first, len(ids)):
            tokens.append(self.decode([ids[pos]]))
            if pos == 0:
                values.append(None)
                tops.append(None)
                continue
            row = table[pos - 1]
            values.append(float(row[ids[pos]]))
            if top > 0:
                best = torch.topk(row, min(top, row.numel()))
                top_row: dict[str, float] = {}
                for v, i in zip(best.values.tolist(), best.indices.tolist(), strict=True):
                    top_row.setdefault(self.decode([i]), v)  # tokens that read alike keep the best
                tops.append(top_row)
            else:
                tops.append(None)
        return TokenLogprobs(tokens, values, tops)

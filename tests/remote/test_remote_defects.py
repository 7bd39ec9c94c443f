"""Defects found against a real vLLM, reproduced on scripted endpoints over real HTTP: the decode
budget (`maxDecodeMs`) cuts a remote stream, a stream that goes silent is dropped after the idle
bound (not the whole `timeoutMs`), the endpoint's failures count towards the server's health,
`--engine-url` keeps the other keys of `initializationOptions.engine`, and a failing `/tokenize`
is a typed error that reaches the health too."""

from __future__ import annotations

import threading
from dataclasses import replace

import pytest

from lsp_server.errors import GenerationFailed
from lsp_server.remote_tokens import RemoteTokens
from lsp_server.server import Glm5Server
from model_runtime.api import FinishReason, GenerationRequest, GenerationResult, SamplingParams
from model_runtime.remote.config import RemoteConfig
from model_runtime.remote.engine import RemoteEngine
from model_runtime.remote.errors import EndpointUnavailable
from scripted import Scripted, chunk, good, paced, sse, status

CHUNKS = 40


def run(engine: RemoteEngine, request: GenerationRequest) -> GenerationResult:
    done, box = threading.Event(), []
    engine.submit(request, None, lambda r: (box.append(r), done.set()))
    assert done.wait(30), "the remote engine never finished the request"
    return box[0]


@pytest.fixture
def connect():
    engines: list[RemoteEngine] = []

    def make(url: str, **options) -> RemoteEngine:
        engines.append(RemoteEngine(RemoteConfig(url, **options)).start())
        return engines[-1]

    yield make
    for engine in engines:
        engine.shutdown()


def test_the_decode_budget_cuts_a_remote_stream(connect):
    """40 chunks 50 ms apart; a 200 ms budget from the first text ends the request early with
    the text so far (LENGTH), as the in-process engine's budget does."""
    parts = [chunk("x") for _ in range(CHUNKS - 1)] + [chunk("x", "length")]
    with Scripted([paced(parts, 0.05)]) as server:
        engine = connect(server.url)
        budgeted = run(engine, GenerationRequest("b", (1, 2), SamplingParams(max_tokens=CHUNKS, max_decode_ms=200)))
    assert budgeted.finish_reason is FinishReason.LENGTH and budgeted.error is None
    assert 0 < len(budgeted.text) < CHUNKS and set(budgeted.text) == {"x"}


def test_without_a_budget_the_whole_stream_is_read(connect):
    parts = [chunk("x") for _ in range(9)] + [chunk("x", "length")]
    with Scripted([paced(parts, 0.01)]) as server:
        result = run(connect(server.url), GenerationRequest("n", (1, 2), SamplingParams(max_tokens=10)))
    assert result.finish_reason is FinishReason.LENGTH and result.text == "x" * 10


def test_a_silent_stream_is_dropped_after_the_idle_bound_not_the_request_bound(connect):
    """A stopped vLLM keeps the connection open and sends nothing: the request ends on the
    idle bound with a message saying so, and the engine then serves the next request."""
    with Scripted([sse(chunk("partial"), stall=True), good("after")]) as server:
        engine = connect(server.url, timeout_ms=60_000, idle_timeout_ms=300)
        stalled = run(engine, GenerationRequest("s", (1,), SamplingParams(max_tokens=8)))
        after = run(engine, GenerationRequest("a", (2,), SamplingParams(max_tokens=8)))
    assert stalled.finish_reason is FinishReason.ERROR and stalled.text == "partial"
    assert "sent nothing for 300 ms" in stalled.error and "still running" in stalled.error
    assert after.finish_reason is FinishReason.LENGTH and after.text == "after"


def test_the_idle_bound_is_checked():
    assert RemoteConfig.from_options({"url": "http://h:1", "idleTimeoutMs": 2500}).idle_s == 2.5
    assert RemoteConfig("http://h:1", timeout_ms=1000, idle_timeout_ms=5000).idle_s == 1.0
    with pytest.raises(ValueError, match="idleTimeoutMs"):
        RemoteConfig.from_options({"url": "http://h:1", "idleTimeoutMs": 10})


def test_endpoint_failures_count_towards_health_but_a_refused_request_does_not(connect):
    with Scripted([status(404, message="no such model"), sse(chunk("a"), stall=True)]) as server:
        engine = connect(server.url, idle_timeout_ms=200)
        refused = run(engine, GenerationRequest("r", (1,), SamplingParams(max_tokens=4)))
        assert refused.finish_reason is FinishReason.ERROR and engine.stats().engine_restarts == 0
        dropped = run(engine, GenerationRequest("d", (1,), SamplingParams(max_tokens=4)))
    assert dropped.finish_reason is FinishReason.ERROR and engine.stats().engine_restarts == 1


def test_engine_url_on_the_command_line_keeps_the_other_engine_settings():
    options = {"url": "http://settings:1", "apiKeyEnv": "TEAM_KEY", "model": "glm-5-fp8", "timeoutMs": 30_000, "fimTemplate": "glm"}
    server = Glm5Server(engine_url=RemoteConfig("http://cli:2"))
    server.settings = replace(server.settings, engine=RemoteConfig.from_options(options))
    assert server.runtime_options.remote == RemoteConfig(
        "http://cli:2", model="glm-5-fp8", api_key_env="TEAM_KEY", timeout_ms=30_000, fim_template="glm",
    )
    both = Glm5Server(engine_url=RemoteConfig("http://cli:2", api_key_env="MY_KEY"))
    both.settings = replace(both.settings, engine=RemoteConfig.from_options(options))
    assert both.runtime_options.remote.api_key_env == "MY_KEY" and both.runtime_options.remote.model == "glm-5-fp8"
    alone = Glm5Server(engine_url=RemoteConfig("http://cli:2"))
    assert alone.runtime_options.remote == RemoteConfig("http://cli:2")


class _DownTokenizer:
    special = object()

    def encode(self, text: str) -> list[int]:
        raise EndpointUnavailable("cannot reach the engine at http://127.0.0.1:9 (for /tokenize): connection failed; is the engine running?")


def test_a_failing_remote_tokenizer_is_a_request_failure_told_to_health():
    noted, reported = [], []
    tokens = RemoteTokens(_DownTokenizer(), lambda: noted.append(1))
    tokens.report = reported.append
    with pytest.raises(GenerationFailed, match=r"cannot reach the engine at http://127.0.0.1:9.*is the engine running"):
        tokens.count("def f():")
    assert noted == [1] and len(reported) == 1 and "cannot reach" in reported[0]


def test_an_abort_the_engine_decided_is_an_error_not_a_cancellation(connect):
    """vLLM stopped with SIGTERM ends its streams with finish_reason "abort": the user must be
    told the engine gave up, not shown a cut completion as if they had cancelled it."""
    with Scripted([sse(chunk("par"), chunk("tial", "abort"), "data: [DONE]\n\n")]) as server:
        engine = connect(server.url)
        result = run(engine, GenerationRequest("t", (1,), SamplingParams(max_tokens=8)))
    assert result.finish_reason is FinishReason.ERROR and "aborted the request" in result.error
    assert engine.stats().engine_restarts == 1


def test_an_abort_mid_stream_always_ends_the_request(connect):
    """A fast stream (a chunk every millisecond, as vLLM sends tokens): every abort ends its
    request at once with the text so far, never after the stream's end (an abort arriving while a
    line was being read must not be lost)."""
    parts = [chunk("x") for _ in range(1999)] + [chunk("x", "length")]
    with Scripted([paced(parts, 0.001)]) as server:
        engine = connect(server.url, timeout_ms=60_000)
        for n in range(5):
            done, box, seen = threading.Event(), [], threading.Event()
            engine.submit(GenerationRequest(f"a{n}", (1,), SamplingParams(max_tokens=2000)),
                          lambda event: seen.set(), lambda r: (box.append(r), done.set()))
            assert seen.wait(30)
            engine.abort(f"a{n}")
            assert done.wait(30)
            assert box[0].finish_reason is FinishReason.ABORT and len(box[0].text) < 2000

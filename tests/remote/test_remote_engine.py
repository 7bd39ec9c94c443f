"""`RemoteEngine` over real HTTP against scripted endpoints: retries on 429 honouring Retry-After,
auth failures naming the key's variable, malformed and stalled streams ending in errors (never
a hang), cancellation closing the stream, and the config's validation."""

from __future__ import annotations

import subprocess
import sys
import threading

import pytest

from model_runtime.api import ConstraintSpec, FinishReason, GenerationRequest, GenerationResult, SamplingParams, ScoreRequest, StreamEvent
from model_runtime.remote.config import RemoteConfig
from model_runtime.remote.engine import RemoteEngine
from model_runtime.remote.errors import EndpointUnavailable
from model_runtime.remote.transport import retry_delay
from scripted import Scripted, chunk, good, plain, sse, status

REQUEST = GenerationRequest("r1", (1, 2, 3), SamplingParams(max_tokens=8, stop_strings=("\n",)))


def run(engine: RemoteEngine, request: GenerationRequest = REQUEST, abort_after_first: bool = False) -> tuple[GenerationResult, list[StreamEvent]]:
    done, box, events = threading.Event(), [], []

    def on_event(event: StreamEvent) -> None:
        events.append(event)
        if abort_after_first:
            engine.abort(request.request_id)

    engine.submit(request, on_event, lambda r: (box.append(r), done.set()))
    assert done.wait(30), "the remote engine never finished the request"
    return box[0], events


@pytest.fixture
def connect():
    engines: list[RemoteEngine] = []

    def make(url: str, **options) -> RemoteEngine:
        engine = RemoteEngine(RemoteConfig(url, **options)).start()
        engines.append(engine)
        return engine

    yield make
    for engine in engines:
        engine.shutdown()


def test_streams_text_and_sends_a_token_id_prompt_without_suffix(connect):
    with Scripted([good("return a + b")]) as server:
        result, events = run(connect(server.url))
    assert result.finish_reason is FinishReason.LENGTH and result.text == "return a + b"
    assert [e.text for e in events] == ["return", "return a + b"]
    body = server.requests[0]["body"]
    assert body["prompt"] == [1, 2, 3] and body["stream"] is True and body["max_tokens"] == 8
    assert body["stop"] == ["\n"] and body["model"] == "scripted" and "suffix" not in body


def test_429_is_retried_after_the_servers_retry_after(connect):
    with Scripted([status(429, {"Retry-After": "0.4"}), status(503), good()]) as server:
        engine = connect(server.url)
        result, _ = run(engine)
    assert result.finish_reason is FinishReason.LENGTH and result.text == "return a + b"
    times = [r["at"] for r in server.requests]
    assert len(times) == 3 and times[1] - times[0] >= 0.4  # Retry-After honoured
    assert engine.cache_stats()["remote_retries"] == 2


def test_a_retry_after_past_the_time_bound_fails_at_once(connect):
    with Scripted([status(429, {"Retry-After": "60"})]) as server:
        result, _ = run(connect(server.url, timeout_ms=2000))
    assert result.finish_reason is FinishReason.ERROR
    assert "busy (HTTP 429)" in result.error and "60.0 s" in result.error
    assert len(server.requests) == 1


@pytest.mark.parametrize("configured", [False, True])
def test_bad_auth_names_the_variable_and_never_the_key(connect, monkeypatch, configured):
    monkeypatch.setenv("GLM5_TEST_KEY", "sk-secret-value")
    options = {"api_key_env": "GLM5_TEST_KEY"} if configured else {}
    with Scripted([status(401, message="Unauthorized")]) as server:
        result, _ = run(connect(server.url, **options))
    assert result.finish_reason is FinishReason.ERROR and "HTTP 401" in result.error
    assert ("GLM5_TEST_KEY" in result.error) if configured else ("apiKeyEnv" in result.error)
    assert "sk-secret-value" not in result.error
    sent = server.requests[0]["headers"].get("authorization")
    assert sent == ("Bearer sk-secret-value" if configured else None)


def test_an_unset_key_variable_is_named(connect, monkeypatch):
    monkeypatch.delenv("GLM5_UNSET_KEY", raising=False)
    with Scripted([status(403)]) as server:
        result, _ = run(connect(server.url, api_key_env="GLM5_UNSET_KEY"))
    assert "GLM5_UNSET_KEY is not set" in result.error


@pytest.mark.parametrize("stream, expected", [
    ((chunk("ok"), "data: {not json\n\n"), "not JSON"),
    ((chunk("ok"), "<html>502 Bad Gateway</html>\n\n"), "unexpected line"),
    (("data: [1, 2]\n\n",), "expected a JSON object"),
    ((chunk("ok"),), "ended the stream before the completion finished"),
    (('data: {"error": {"message": "engine died"}}\n\n',), "engine died"),
])
def test_malformed_streams_end_in_an_error(connect, stream, expected):
    with Scripted([sse(*stream)]) as server:
        result, _ = run(connect(server.url))
    assert result.finish_reason is FinishReason.ERROR and expected in result.error


def test_a_stalled_stream_times_out_and_the_engine_keeps_serving(connect):
    with Scripted([sse(chunk("partial"), stall=True), good("after")]) as server:
        engine = connect(server.url, timeout_ms=800)
        stalled, _ = run(engine)
        after, _ = run(engine, GenerationRequest("r2", (4,), SamplingParams(max_tokens=4)))
    assert stalled.finish_reason is FinishReason.ERROR and "800 ms" in stalled.error and stalled.text == "partial"
    assert after.finish_reason is FinishReason.LENGTH and after.text == "after"


def test_abort_closes_the_stream_and_returns_the_text_so_far(connect):
    with Scripted([sse(chunk("first"), stall=True)]) as server:
        engine = connect(server.url)
        result, _ = run(engine, abort_after_first=True)
    assert result.finish_reason is FinishReason.ABORT and result.text == "first"
    assert engine.stats().requests_aborted == 1


@pytest.mark.parametrize("stream, text", [((chunk("ret"), chunk("urn a"), chunk(" + b", "stop"), "data: [DONE]\n\n"), "urn a + b"),
                                          ((chunk("re"), chunk("sult = 1"), chunk("\n", "stop"), "data: [DONE]\n\n"), "")])
def test_a_healed_prefix_is_stripped_or_the_output_dropped(connect, stream, text):
    request = GenerationRequest("h", (1, 2), SamplingParams(max_tokens=8), constraint=ConstraintSpec(heal_prefix="ret"))
    with Scripted([sse(*stream)]) as server:
        result, events = run(connect(server.url), request)
    assert result.finish_reason is FinishReason.STOP and result.text == text
    assert all(text.startswith(e.text) for e in events)


def test_token_ids_refused_falls_back_to_text(connect):
    with Scripted([status(400, message="prompt must be a string"), good("x")]) as server:
        engine = RemoteEngine(RemoteConfig(server.url), lambda ids: "".join(f"<{i}>" for i in ids)).start()
        try:
            result, _ = run(engine)
        finally:
            engine.shutdown()
    assert result.text == "x" and engine.prompt_format == "text"
    assert server.requests[1]["body"]["prompt"] == "<1><2><3>" and server.requests[1]["body"]["add_special_tokens"] is False


@pytest.mark.parametrize("answer", [status(400, message="echo is not supported"), plain("x", "y")])
def test_scoring_without_prompt_logprobs_is_not_implemented(connect, answer):
    with Scripted([answer]) as server:
        engine = connect(server.url)
        with pytest.raises(NotImplementedError, match="cannot be scored remotely"):
            engine.score(ScoreRequest("s", (1, 2), ((3,), (4, 5))))
    body = server.requests[0]["body"]
    assert body["prompt"] == [[1, 2, 3], [1, 2, 4, 5]] and body["echo"] is True and body["logprobs"] == 0


def test_unreachable_endpoint_fails_start_with_the_url():
    engine = RemoteEngine(RemoteConfig("http://127.0.0.1:9", timeout_ms=2000))
    with pytest.raises(EndpointUnavailable, match=r"cannot reach the engine at http://127.0.0.1:9"):
        engine.start()


def test_retry_after_accepts_seconds_and_http_dates():
    assert retry_delay("2", 0) == 2.0
    assert retry_delay(None, 3) == pytest.approx(0.8)
    assert retry_delay("Wed, 21 Oct 2015 07:28:00 GMT", 0) == 0.0  # a date in the past: at once
    assert retry_delay("soon", 1) == pytest.approx(0.2)


def test_config_rejects_keys_in_settings_and_bad_values():
    assert RemoteConfig.from_options("http://h:1/v1").base_url == "http://h:1"
    config = RemoteConfig.from_options({"url": "https://h", "apiKeyEnv": "K", "timeoutMs": 500, "maxConcurrency": 2})
    assert (config.api_key_env, config.timeout_ms, config.max_concurrency) == ("K", 500, 2)
    for bad, message in [
        ({"url": "https://h", "apiKey": "sk-1"}, "never come from settings"),
        ({"url": "ftp://h"}, "http"),
        ({"url": "http://h", "timeoutMs": "5"}, "timeoutMs"),
        ({"url": "http://h", "maxConcurrency": 0}, "maxConcurrency"),
        ({"url": "http://h", "bogus": 1}, "unknown keys"),
    ]:
        with pytest.raises(ValueError, match=message):
            RemoteConfig.from_options(bad)


def test_importing_the_remote_backend_does_not_import_torch():
    program = (
        "import sys, model_runtime.remote.connect, model_runtime.remote.engine, model_runtime.remote.tokenizer\n"
        "sys.exit(1 if any(m == 'torch' or m.startswith('torch.') for m in sys.modules) else 0)\n"
    )
    assert subprocess.run([sys.executable, "-c", program], capture_output=True, timeout=60).returncode == 0

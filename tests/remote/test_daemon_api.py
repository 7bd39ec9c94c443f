"""`glm5-serve` over real HTTP on 127.0.0.1: the `openai` client's completions (plain, streamed,
token-id prompts, logprobs, echo), /tokenize and /detokenize, /v1/models, /health, /metrics,
Bearer auth, vLLM-shaped errors, and a disconnect aborting the request between decode steps.
One daemon (a tiny random checkpoint) serves the module."""

from __future__ import annotations

import json
import math
import socket
import time

import httpx
import openai
import pytest

from daemon import Daemon
from model_runtime.tokenizer import GlmTokenizer

KEY = "test-serve-key"


@pytest.fixture(scope="module")
def daemon(tiny_checkpoint, tmp_path_factory):
    d = Daemon.start(tiny_checkpoint, tmp_path_factory.mktemp("daemon") / "serve.log", api_key=KEY)
    yield d
    assert d.stop() == 0


@pytest.fixture(scope="module")
def client(daemon):
    with openai.OpenAI(base_url=daemon.url + "/v1", api_key=KEY, max_retries=0, timeout=60) as c:
        yield c


@pytest.fixture(scope="module")
def tokenizer(tiny_checkpoint):
    return GlmTokenizer.from_dir(tiny_checkpoint)


def test_models_lists_the_served_checkpoint(client, tiny_checkpoint):
    models = client.models.list().data
    assert [m.id for m in models] == [tiny_checkpoint.name]
    assert models[0].owned_by == "glm5-lsp" and models[0].model_extra["max_model_len"] == 4096


def test_completion_with_text_and_token_id_prompts_agree(client, tiny_checkpoint, tokenizer):
    prompt = "def add(a, b):\n    return"
    text = client.completions.create(model=tiny_checkpoint.name, prompt=prompt, max_tokens=6, temperature=0)
    ids = client.completions.create(model=tiny_checkpoint.name, prompt=tokenizer.encode(prompt), max_tokens=6, temperature=0)
    assert text.object == "text_completion" and text.choices[0].finish_reason in ("length", "stop")
    assert text.choices[0].text == ids.choices[0].text
    assert text.usage.prompt_tokens == len(tokenizer.encode(prompt))
    assert 1 <= text.usage.completion_tokens <= 6
    assert ids.usage.prompt_tokens_details.cached_tokens >= 0


def test_streaming_chunks_concatenate_to_the_plain_answer(client, tiny_checkpoint):
    args = {"model": tiny_checkpoint.name, "prompt": "import os\n", "max_tokens": 10, "temperature": 0}
    plain = client.completions.create(**args).choices[0].text
    chunks = list(client.completions.create(**args, stream=True, stream_options={"include_usage": True}))
    assert "".join(c.choices[0].text for c in chunks if c.choices) == plain
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] in ("length", "stop")
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens >= 1


def test_stop_strings_end_the_completion_before_them(client, tiny_checkpoint):
    args = {"model": tiny_checkpoint.name, "prompt": "class Config:\n", "max_tokens": 24, "temperature": 0}
    full = client.completions.create(**args).choices[0].text
    stop = full[len(full) // 2 :][:2]
    assert stop, full
    cut = client.completions.create(**args, stop=[stop]).choices[0]
    assert cut.text == full[: full.index(stop)] and cut.finish_reason == "stop"


def test_logprobs_and_echo_score_the_prompt(client, tiny_checkpoint, tokenizer):
    prompt = tokenizer.encode("def main():\n    return 0\n")
    answer = client.completions.create(model=tiny_checkpoint.name, prompt=prompt, max_tokens=3, temperature=0, logprobs=2, echo=True)
    logprobs = answer.choices[0].logprobs
    assert len(logprobs.token_logprobs) == len(prompt) + answer.usage.completion_tokens
    assert logprobs.token_logprobs[0] is None and all(v <= 0 for v in logprobs.token_logprobs[1:])
    assert all(1 <= len(top) <= 2 and max(top.values()) >= v - 1e-4 for top, v in zip(logprobs.top_logprobs[1:], logprobs.token_logprobs[1:]))
    greedy = logprobs.token_logprobs[len(prompt)]  # greedy: the chosen token is the most likely
    assert math.isclose(greedy, max(logprobs.top_logprobs[len(prompt)].values()), abs_tol=1e-4)


def test_tokenize_and_detokenize_round_trip_with_special_tokens(daemon, tokenizer):
    headers = {"Authorization": f"Bearer {KEY}"}
    text = "[gMASK]<sop><|code_suffix|>x = 1<|code_prefix|>def f():<|code_middle|>"
    body = httpx.post(daemon.url + "/tokenize", json={"prompt": text}, headers=headers).json()
    assert body["count"] == len(body["tokens"]) and body["max_model_len"] == 4096
    special = tokenizer.special
    assert body["tokens"][:3] == [special.gmask, special.sop, special.code_suffix]
    assert body["tokens"][-1] == special.code_middle
    back = httpx.post(daemon.url + "/detokenize", json={"tokens": body["tokens"]}, headers=headers).json()
    assert back == {"prompt": text}


def test_bad_requests_get_vllm_shaped_errors(daemon, client, tiny_checkpoint):
    with pytest.raises(openai.NotFoundError, match="does not exist"):
        client.completions.create(model="gpt-4", prompt="x", max_tokens=1)
    with pytest.raises(openai.BadRequestError) as suffix:
        client.completions.create(model=tiny_checkpoint.name, prompt="x", suffix="y", max_tokens=1)
    assert suffix.value.body["param"] == "suffix"
    with pytest.raises(openai.BadRequestError, match="maximum context length"):
        client.completions.create(model=tiny_checkpoint.name, prompt="x", max_tokens=5000)
    with pytest.raises(openai.BadRequestError, match=r"must lie in \[0, "):
        client.completions.create(model=tiny_checkpoint.name, prompt=[10**6], max_tokens=1)
    response = httpx.post(daemon.url + "/v1/completions", content=b"{nope", headers={"Authorization": f"Bearer {KEY}"})
    assert response.status_code == 400 and response.json()["error"]["type"] == "BadRequestError"


def test_glm5_score_checks_its_input(daemon):
    headers = {"Authorization": f"Bearer {KEY}"}
    for body, param in [({"prompt": [1, 2], "continuations": "x"}, "continuations"), ({"prompt": [], "continuations": [[1]]}, "prompt"),
                        ({"prompt": [1], "continuations": [[10**6]]}, "continuations")]:
        response = httpx.post(daemon.url + "/glm5/score", json=body, headers=headers)
        assert response.status_code == 400 and response.json()["error"]["param"] == param
    ok = httpx.post(daemon.url + "/glm5/score", json={"prompt": [1, 2], "continuations": [[3], []]}, headers=headers).json()
    assert [s["num_tokens"] for s in ok["scores"]] == [1, 0] and ok["scores"][0]["logprob"] <= 0


def test_bearer_auth_guards_everything_but_health(daemon, tiny_checkpoint):
    with openai.OpenAI(base_url=daemon.url + "/v1", api_key="wrong", max_retries=0) as bad:
        with pytest.raises(openai.AuthenticationError):
            bad.completions.create(model=tiny_checkpoint.name, prompt="x", max_tokens=1)
    assert httpx.get(daemon.url + "/metrics").status_code == 401
    assert httpx.get(daemon.url + "/health").status_code == 200


def test_metrics_are_prometheus_text(daemon):
    text = daemon.get("/metrics")
    samples = dict(line.rsplit(" ", 1) for line in text.splitlines() if line and not line.startswith("#"))
    assert float(samples["glm5_requests_finished_total"]) >= 1
    assert float(samples["glm5_decode_steps_total"]) >= 1
    assert any(k.startswith('glm5_http_requests_total{endpoint="/v1/completions",status="200"}') for k in samples)
    assert "# TYPE glm5_requests_running gauge" in text


def _stream_then_disconnect(daemon, body: dict) -> None:
    """Read the first SSE event of a streamed completion, then drop the connection."""
    host, port = daemon.url.removeprefix("http://").split(":")
    payload = json.dumps(body).encode()
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Authorization: Bearer " + KEY.encode() + b"\r\nContent-Length: %d\r\n\r\n%s" % (len(payload), payload))
        received = b""
        while b"data: " not in received:
            received += sock.recv(4096)


@pytest.mark.parametrize("stream", [True, False])
def test_a_disconnect_aborts_the_request_between_decode_steps(daemon, tiny_checkpoint, stream):
    before = daemon.stats()
    body = {"model": tiny_checkpoint.name, "prompt": "def main():", "max_tokens": 3000, "temperature": 0, "stream": stream}
    if stream:
        _stream_then_disconnect(daemon, body)
    else:
        with pytest.raises(httpx.ReadTimeout):
            httpx.post(daemon.url + "/v1/completions", json=body, headers={"Authorization": f"Bearer {KEY}"}, timeout=1.0)
    deadline = time.monotonic() + 30
    while daemon.stats()["requests_aborted"] == before["requests_aborted"]:
        assert time.monotonic() < deadline, "the daemon never aborted the abandoned request"
        time.sleep(0.05)
    after = daemon.stats()
    time.sleep(0.5)
    assert daemon.stats()["decode_steps"] == after["decode_steps"]  # nothing decodes any more
    assert after["decode_steps"] - before["decode_steps"] < 3000

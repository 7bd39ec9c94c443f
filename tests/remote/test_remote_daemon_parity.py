"""The remote backend against `glm5-serve`: the `/tokenize`-backed tokenizer gives the checkpoint's
own ids (special tokens included, editor text that spells one kept plain), and `score` from
echoed logprobs equals the log-probability computed in process from the same weights."""

from __future__ import annotations

import pytest
import torch

from daemon import Daemon
from model_runtime.api import ScoreRequest
from model_runtime.remote.config import RemoteConfig
from model_runtime.remote.engine import RemoteEngine
from model_runtime.remote.tokenizer import RemoteTokenizer
from model_runtime.runtime import load_model
from model_runtime.tokenizer import GlmTokenizer


@pytest.fixture(scope="module")
def daemon(tiny_checkpoint, tmp_path_factory):
    d = Daemon.start(tiny_checkpoint, tmp_path_factory.mktemp("parity") / "serve.log")
    yield d
    assert d.stop() == 0


@pytest.fixture(scope="module")
def local(tiny_checkpoint) -> GlmTokenizer:
    return GlmTokenizer.from_dir(tiny_checkpoint)


def test_remote_tokenizer_matches_the_checkpoints(daemon, tiny_checkpoint, local):
    remote = RemoteTokenizer(RemoteConfig(daemon.url), tiny_checkpoint.name)
    try:
        assert remote.special == local.special
        for text in ("def add(a, b):\n    return a + b\n", "caf\u00e9 = '\u2603'", ""):
            assert remote.encode(text) == local.encode(text)
        assert remote.decode(local.encode("import os\n")) == "import os\n"
        injected = "x = '<|code_prefix|>'"
        ids = remote.encode(injected)
        assert local.special.code_prefix not in ids  # editor text never becomes a FIM marker
        assert remote.decode(ids) == injected
    finally:
        remote.close()


def test_score_from_echoed_logprobs_equals_the_in_process_model(daemon, tiny_checkpoint, local):
    prompt = local.encode("def main():\n    return")
    continuations = [local.encode(" 0\n"), local.encode(" None"), ()]
    request = ScoreRequest("s", tuple(prompt), tuple(tuple(c) for c in continuations))
    engine = RemoteEngine(RemoteConfig(daemon.url)).start()
    try:
        batched = engine.score(request)  # glm5-serve: /glm5/score, one forward over the shared prefix
        echoed = engine.call(engine._score(request))  # what vLLM gives: echo + logprobs
    finally:
        engine.shutdown()
    model = load_model(tiny_checkpoint)
    for scores in (batched, echoed):
        assert [s.num_tokens for s in scores] == [len(c) for c in continuations]
        for score, continuation in zip(scores, continuations, strict=True):
            logprobs = torch.log_softmax(model.logits(prompt + list(continuation)).float(), dim=-1)
            expected = [float(logprobs[len(prompt) - 1 + i, t]) for i, t in enumerate(continuation)]
            assert score.token_logprobs == pytest.approx(expected, abs=1e-3)
            assert score.logprob == pytest.approx(sum(expected), abs=1e-3)

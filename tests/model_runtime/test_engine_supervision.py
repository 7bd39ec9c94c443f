"""The engine thread under faults: warm-up through the scheduler, stop, and supervision.

A tiny random GLM-5 checkpoint (built once for the module); every wait here is bounded, so a
hang shows up as a failed assertion, not a stuck suite.
"""

from __future__ import annotations

import threading

import pytest

from model_runtime.api import FinishReason, GenerationRequest, GenerationResult, SamplingParams

WAIT = 30.0


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from model_runtime import load_model
    from model_runtime.testing import make_tiny_checkpoint

    return load_model(make_tiny_checkpoint(tmp_path_factory.mktemp("supervision-tiny")))


@pytest.fixture
def engine(tiny):
    engine = tiny.engine()
    yield engine
    engine.shutdown()


class Outcome:
    """Collects one request's `on_done` and lets a test wait for it (bounded)."""

    def __init__(self) -> None:
        self.results: list[GenerationResult] = []
        self.done = threading.Event()

    def __call__(self, result: GenerationResult) -> None:
        self.results.append(result)
        self.done.set()

    def wait(self) -> GenerationResult:
        assert self.done.wait(WAIT), "on_done was never called"
        assert len(self.results) == 1
        return self.results[0]


def request(rid: str, max_tokens: int = 4, n: int = 12) -> GenerationRequest:
    return GenerationRequest(rid, tuple(range(20, 20 + n)), SamplingParams(max_tokens=max_tokens))


def test_warm_up_runs_as_low_priority_requests_and_a_user_request_goes_first(engine):
    texts = [f"def f{i}(x):\n    return x + {i}\n" for i in range(40)]
    user = Outcome()
    warmed: list[float] = []
    user_done_after: list[int] = []  # warm-up prompts finished when the user request ended

    def on_user_done(result: GenerationResult) -> None:
        user_done_after.append(len(warmed))
        user(result)

    def progress(fraction: float, _message: str) -> None:
        if not warmed:
            engine.submit(request("user"), None, on_user_done)
        warmed.append(fraction)

    report = engine.warmup(texts, progress)
    assert report.forwards >= len(texts) and report.experts_hit > 0
    assert user.wait().finish_reason in (FinishReason.LENGTH, FinishReason.STOP)
    assert user_done_after[0] <= 3 < len(warmed)  # it did not wait for the rest of the warm-up
    assert engine.stats().requests_finished == len(warmed) + 1 and not engine.scheduler.has_work

"""`model_runtime.give_way`: a background thread's Python pauses while an engine serves a user.

The pause logic runs on a fake clock (its sleep advances the time), so the tests decide exactly
when the engines are busy; one test runs a real thread to show the trace function is installed
and removed around the work.
"""

from __future__ import annotations

import sys
import threading

from model_runtime import give_way
from model_runtime.api import GenerationRequest, SamplingParams
from model_runtime.config import EngineConfig
from model_runtime.engine import Engine
from model_runtime.give_way import GiveWay


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps = 0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds
        self.sleeps += 1


def calls(way: GiveWay, n: int) -> None:
    for _ in range(n):
        way.on_call(None, "call", None)


def test_pauses_while_busy_and_for_the_quiet_time_after(monkeypatch):
    monkeypatch.setattr(give_way, "PAUSE_MAX_S", 10.0)  # no bound here: see the next tests
    clock, busy_until = FakeClock(), 0.1
    way = GiveWay(clock, clock.sleep)
    way.add(lambda: clock.now < busy_until)
    calls(way, give_way.CHECK_EVERY - 1)
    assert clock.sleeps == 0  # the engines are only looked at every CHECK_EVERY calls
    calls(way, 1)
    assert way.pauses == 1
    resumed = busy_until + give_way.QUIET_S
    assert resumed - give_way.SLEEP_S <= clock.now < resumed + give_way.SLEEP_S  # looked at every SLEEP_S
    assert abs(way.paused_s - clock.now) < 1e-9
    calls(way, give_way.CHECK_EVERY)  # quiet since: no pause
    assert way.pauses == 1


def test_an_idle_engine_costs_no_pause():
    clock = FakeClock()
    way = GiveWay(clock, clock.sleep)
    way.add(lambda: False)
    calls(way, 10 * give_way.CHECK_EVERY)
    assert way.pauses == 0 and clock.sleeps == 0 and clock.now == 0.0


def test_a_pause_is_bounded_then_the_thread_runs_before_pausing_again():
    """An engine that stays busy (it may wait on a lock the paused thread holds) never stops
    the thread for longer than PAUSE_MAX_S at a time."""
    clock = FakeClock()
    way = GiveWay(clock, clock.sleep)
    way.add(lambda: True)
    calls(way, give_way.CHECK_EVERY)
    first = clock.now
    assert give_way.PAUSE_MAX_S <= first < give_way.PAUSE_MAX_S + 2 * give_way.SLEEP_S
    calls(way, give_way.CHECK_EVERY)  # within RUN_S of the timeout: no pause
    assert clock.now == first and way.pauses == 1
    clock.now += give_way.RUN_S
    calls(way, give_way.CHECK_EVERY)
    assert way.pauses == 2 and clock.now - first >= give_way.PAUSE_MAX_S + give_way.RUN_S


def test_installed_traces_only_the_calling_thread_and_restores_its_tracer():
    way, seen, other = GiveWay(), [], []
    way.add(lambda: False)

    def work() -> None:
        seen.append(sys.gettrace())

    def elsewhere() -> None:
        other.append(sys.gettrace())

    before = sys.gettrace()
    with way.installed():
        work()
        thread = threading.Thread(target=elsewhere)
        thread.start()
        thread.join()
    assert seen == [way.on_call] and other == [None] and sys.gettrace() is before


def test_engines_report_serving_users_but_not_background_work(tiny):
    engine = Engine(tiny, EngineConfig(max_cache_tokens=1024))
    assert not engine.serving_users()
    engine.add(GenerationRequest("warm", (5, 6, 7), SamplingParams(max_tokens=2), priority=-1))
    assert not engine.serving_users()
    engine.add(GenerationRequest("user", (5, 6, 7), SamplingParams(max_tokens=2)))
    assert engine.serving_users()
    engine.run_until_idle()
    assert not engine.serving_users()

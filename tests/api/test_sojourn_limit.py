"""The in-flight limit moved by the sojourn (``api.overload.SojournLimit``, ADR 0035).

A state machine over arrivals and answers at moving times checks the bounds and the refusal
rule; two properties check the direction the limit moves; a closed-loop simulation of many
callers in front of a server of fixed throughput checks that the limit holds the sojourn near
its target without losing throughput, which a fixed count that is never reached does not.
"""

from __future__ import annotations

import heapq
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from api.overload import INTERVAL_S, MAX_RETRY_AFTER_S, MIN_LIMIT, SojournLimit

TARGET_S = 0.25


class Gateway(RuleBasedStateMachine):
    """Requests arrive and are answered at moving times; the limit stays in bounds."""

    def __init__(self) -> None:
        super().__init__()
        self.rule = SojournLimit(ceiling=64, target_s=TARGET_S)
        self.now = 0.0
        self.arrivals: list[float] = []

    @rule(after=st.floats(0, 0.3), count=st.integers(1, 40))
    def arrive(self, after: float, count: int) -> None:
        self.now += after
        for _ in range(count):
            before = self.rule.in_flight
            admitted = self.rule.admit(self.now)
            assert admitted == (before < self.rule.limit)
            if admitted:
                self.arrivals.append(self.now)

    @precondition(lambda self: self.arrivals)
    @rule(after=st.floats(0, 2.0), pick=st.integers(0, 10**6), count=st.integers(1, 40))
    def answer(self, after: float, pick: int, count: int) -> None:
        self.now += after
        for _ in range(min(count, len(self.arrivals))):
            arrived = self.arrivals.pop(pick % len(self.arrivals))
            self.rule.answered(arrived, self.now)

    @invariant()
    def bounds(self) -> None:
        assert MIN_LIMIT <= self.rule.limit <= 64
        assert self.rule.in_flight == len(self.arrivals)
        assert 1 <= self.rule.retry_after_s <= MAX_RETRY_AFTER_S


TestGateway = Gateway.TestCase


steps = st.lists(
    st.tuples(st.integers(0, 60), st.floats(0.01, 0.5), st.integers(0, 60)), min_size=1, max_size=40
)


def _drive(rule: SojournLimit, script: list[tuple[int, float, int]], sojourn_s: float) -> list[int]:
    """Each step: requests arrive, ``answer`` of them are answered ``sojourn_s`` later (the others
    stay in flight, as long calls do), then a pause; the limit after each step.
    """
    now, limits = 0.0, []
    for arrive, pause, answer in script:
        admitted = sum(rule.admit(now) for _ in range(arrive))
        arrived, now = now, now + sojourn_s
        for _ in range(min(answer, admitted)):
            rule.answered(arrived, now)
        now += pause
        limits.append(rule.limit)
    return limits


@given(script=steps, sojourn_s=st.floats(0.0, TARGET_S * 0.99))
def test_sojourns_within_the_target_never_lower_the_limit(
    script: list[tuple[int, float, int]], sojourn_s: float
) -> None:
    rule = SojournLimit(ceiling=256, target_s=TARGET_S)
    rule.limit = MIN_LIMIT  # as after an overload: room to grow

    limits = _drive(rule, script, sojourn_s)

    assert limits == sorted(limits)


@given(script=steps, sojourn_s=st.floats(TARGET_S * 1.01, 10.0))
def test_sojourns_past_the_target_never_raise_the_limit(
    script: list[tuple[int, float, int]], sojourn_s: float
) -> None:
    rule = SojournLimit(ceiling=256, target_s=TARGET_S)

    limits = _drive(rule, script, sojourn_s)

    assert limits == sorted(limits, reverse=True)


@given(script=steps, sojourn_s=st.floats(0.0, 10.0))
def test_a_target_of_zero_keeps_the_fixed_limit(
    script: list[tuple[int, float, int]], sojourn_s: float
) -> None:
    rule = SojournLimit(ceiling=48, target_s=0)

    assert set(_drive(rule, script, sojourn_s)) == {48}


def test_retry_after_is_the_shortest_sojourn_rounded_up() -> None:
    rule = SojournLimit(ceiling=64, target_s=TARGET_S)
    assert rule.admit(0.0)
    rule.answered(0.0, 2.2)  # the interval that started at 0.0 is over: a new one, with this sojourn
    assert rule.admit(2.2 + INTERVAL_S)  # closes it

    assert rule.last_shortest_s == pytest.approx(2.2)
    assert rule.retry_after_s == 3


@pytest.mark.parametrize(("ceiling", "target_s"), [(0, TARGET_S), (8, -0.1)])
def test_bad_settings_are_refused(ceiling: int, target_s: float) -> None:
    with pytest.raises(ValueError, match=r"at least 1|0 \(off\)"):
        SojournLimit(ceiling=ceiling, target_s=target_s)


def _p99(values: list[float]) -> float:
    return sorted(values)[math.ceil(0.99 * len(values)) - 1] if values else math.nan


def _closed_loop(
    rule: SojournLimit, *, callers: int, per_s: float, seconds: float
) -> tuple[float, float, int]:
    """``callers`` that send again as soon as answered (after ``Retry-After`` when refused), in front
    of a FIFO server of ``per_s`` requests/s; after a warm-up third: answers/s, p99 sojourn, refusals.
    """
    service, warm = 1 / per_s, seconds / 3
    events: list[tuple[float, int, float]] = [(0.0, n, -1.0) for n in range(callers)]  # a send: -1
    busy_until, sojourns, refusals = 0.0, [], 0
    while events:
        now, caller, arrived = heapq.heappop(events)
        if now > seconds:
            break
        if arrived >= 0:  # an answer; its caller sends again at once
            rule.answered(arrived, now)
            if now > warm:
                sojourns.append(now - arrived)
            heapq.heappush(events, (now, caller, -1.0))
        elif rule.admit(now):
            busy_until = max(busy_until, now) + service
            heapq.heappush(events, (busy_until, caller, now))
        else:
            refusals += now > warm
            heapq.heappush(events, (now + rule.retry_after_s, caller, -1.0))
    return len(sojourns) / (seconds - warm), _p99(sojourns), refusals


def test_a_closed_loop_of_128_callers_is_held_near_the_target() -> None:
    fixed = _closed_loop(SojournLimit(ceiling=512, target_s=0), callers=128, per_s=90, seconds=30)
    moved = _closed_loop(SojournLimit(ceiling=512, target_s=TARGET_S), callers=128, per_s=90, seconds=30)

    assert fixed[1] == pytest.approx(128 / 90, rel=0.05)  # every caller queues: Little's law
    assert fixed[2] == 0
    assert moved[0] >= 0.95 * 90  # the server stays busy
    assert moved[1] < 4 * TARGET_S  # ...and the callers it takes wait about the target, not 1.4 s
    assert moved[2] > 0  # the rest are told to come back
    assert not math.isnan(moved[1])

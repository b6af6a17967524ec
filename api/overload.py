"""Overload gets an answer, not a queue: a bound on the requests one gateway has in flight.

``LimitInFlight`` counts the requests that were accepted and have not started their answer.
Past its limit a new one is answered at once with HTTP 429, ``Retry-After`` and an error body in
its binding's shape (``api.early_answers``), before its body is read: a refused request has
appended nothing and will append nothing, so the caller may simply send it again. A request
leaves the count when its response starts (a stream's long life after its first bytes costs no
slot) or when it ends without one. Routes whose handler has ``opt={"unlimited": True}`` (the
agent card, ``/metrics``) are not counted: a gateway under load must still be observable.

The limit moves with the time requests wait (``SojournLimit``, ADR 0035): a fixed count large
enough for long blocking calls is never reached by short ones, which then queue (128 callers at
90 requests/s wait 1.4 s each). Every ``INTERVAL_S`` the shortest sojourn (arrival to the start
of the answer) of the requests answered in that interval is read: when even the shortest waited
longer than the target, requests are queueing, and the limit shrinks in proportion (at most by
half, never below ``MIN_LIMIT``); when the shortest was within the target and the limit was
reached, it grows by a tenth, up to ``LONGHAUL_MAX_IN_FLIGHT``. The shortest, not a mean or a
percentile: a standing queue delays every request, a few long blocking calls do not.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

from litestar.middleware import ASGIMiddleware
from litestar.types import ASGIApp, Message, Receive, Scope, Send

from api.early_answers import send_refusal
from api.errors import ResourceExhaustedError

UNLIMITED = "unlimited"
"""The route handler ``opt`` key of routes the limit does not count."""

DEFAULT_LIMIT = 512
"""The default of ``LONGHAUL_MAX_IN_FLIGHT``: the ceiling of the limit."""

DEFAULT_TARGET_S = 0.25
"""The default of ``LONGHAUL_OVERLOAD_TARGET_SECONDS``: the sojourn past which requests queue."""

MIN_LIMIT = 16
"""The limit never shrinks below this many requests in flight (nor below the ceiling, if lower)."""

INTERVAL_S = 0.1
"""How often the limit moves: the window whose shortest sojourn is read."""

MAX_SHRINK = 0.5
"""One interval shrinks the limit at most by half."""

GROWTH = 0.1
"""One interval grows a limit that was reached by a tenth (at least one request)."""

MAX_RETRY_AFTER_S = 30
"""The ``Retry-After`` of a refusal is the last interval's shortest sojourn, 1 s to this."""


@dataclass
class SojournLimit:
    """The in-flight limit, moved every ``interval_s`` by the shortest sojourn of that interval.

    ``target_s`` 0 keeps the limit at ``ceiling``: a fixed count. Times are the caller's
    monotonic seconds, passed in: the rule reads no clock.
    """

    ceiling: int
    target_s: float = DEFAULT_TARGET_S
    floor: int = MIN_LIMIT
    interval_s: float = INTERVAL_S
    limit: int = field(init=False)
    in_flight: int = field(default=0, init=False)
    last_shortest_s: float = field(default=0.0, init=False)
    _window_end: float | None = field(default=None, init=False)
    _shortest_s: float = field(default=math.inf, init=False)
    _reached: bool = field(default=False, init=False)

    def __post_init__(self) -> None:
        if self.ceiling < 1:
            raise ValueError("the in-flight limit is at least 1")
        if self.target_s < 0:
            raise ValueError("the overload target is 0 (off) or more seconds")
        self.floor = min(self.floor, self.ceiling)
        self.limit = self.ceiling

    def admit(self, now: float) -> bool:
        """Count a request in if the limit allows it (True), else refuse it (False)."""
        self._tick(now)
        if self.in_flight >= self.limit:
            self._reached = True
            return False
        self.in_flight += 1
        self._reached = self._reached or self.in_flight >= self.limit
        return True

    def answered(self, arrived: float, now: float) -> None:
        """A counted request, in since ``arrived``, started its answer (or ended without one)."""
        self.in_flight -= 1
        self._tick(now)
        self._shortest_s = min(self._shortest_s, now - arrived)

    @property
    def retry_after_s(self) -> int:
        """An honest ``Retry-After``: about how long the requests in flight have been taking."""
        return max(1, min(MAX_RETRY_AFTER_S, math.ceil(self.last_shortest_s)))

    def _tick(self, now: float) -> None:
        if self._window_end is None:
            self._window_end = now + self.interval_s
        if now < self._window_end:
            return
        if self.target_s > 0 and self._shortest_s < math.inf:
            shortest = self._shortest_s
            self.last_shortest_s = shortest
            if shortest > self.target_s:
                shrunk = math.floor(
                    min(self.limit, max(self.in_flight, 1)) * max(MAX_SHRINK, self.target_s / shortest)
                )
                self.limit = max(self.floor, shrunk)
            elif self._reached:
                self.limit = min(self.ceiling, self.limit + max(1, math.floor(self.limit * GROWTH)))
        self._window_end = now + self.interval_s
        self._shortest_s = math.inf
        self._reached = self.in_flight >= self.limit


class LimitInFlight(ASGIMiddleware):
    """Answer 429 to any request past the limit in flight; let the others through.

    One instance serves every request of an app (one event loop): its ``SojournLimit`` is shared
    on purpose, and changed only between awaits.
    """

    exclude_opt_key = UNLIMITED

    def __init__(self, limit: int, target_s: float = DEFAULT_TARGET_S) -> None:
        self.rule = SojournLimit(ceiling=limit, target_s=target_s)
        self.refused = 0

    @property
    def in_flight(self) -> int:
        """Requests counted in whose answer has not started."""
        return self.rule.in_flight

    @property
    def limit(self) -> int:
        """The limit now: a new request past it is refused."""
        return self.rule.limit

    async def handle(self, scope: Scope, receive: Receive, send: Send, next_app: ASGIApp) -> None:
        """Count the request in and pass it on, or refuse it with 429."""
        arrived = time.monotonic()
        if not self.rule.admit(arrived):
            self.refused += 1
            retry_after = self.rule.retry_after_s
            error = ResourceExhaustedError(
                f"this gateway has {self.rule.in_flight} requests in flight, its limit now (at most"
                f" LONGHAUL_MAX_IN_FLIGHT, less while requests wait longer than"
                f" LONGHAUL_OVERLOAD_TARGET_SECONDS); nothing of this request was accepted: send it"
                f" again in {retry_after} s"
            )
            await send_refusal(scope, send, error, {"Retry-After": str(retry_after)})
            return
        counted = True

        async def answering(message: Message) -> None:
            nonlocal counted
            if counted and message["type"] == "http.response.start":
                counted = False
                self.rule.answered(arrived, time.monotonic())
            await send(message)

        try:
            await next_app(scope, receive, answering)
        finally:
            if counted:
                self.rule.answered(arrived, time.monotonic())

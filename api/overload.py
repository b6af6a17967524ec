"""Overload gets an answer, not a hang: a bound on the requests one gateway has in flight.

``LimitInFlight`` counts the requests that were accepted and have not started their answer.
Past ``limit`` a new one is answered at once with HTTP 429, ``Retry-After`` and an error body in
its binding's shape (``api.early_answers``), before its body is read: a refused request has
appended nothing and will append nothing, so the caller may simply send it again. A request
leaves the count when its response starts (a stream's long life after its first bytes costs no
slot) or when it ends without one. Routes whose handler has ``opt={"unlimited": True}`` (the
agent card, ``/metrics``) are not counted: a gateway under load must still be observable.
"""

from __future__ import annotations

from litestar.middleware import ASGIMiddleware
from litestar.types import ASGIApp, Message, Receive, Scope, Send

from api.early_answers import send_refusal
from api.errors import ResourceExhaustedError

UNLIMITED = "unlimited"
"""The route handler ``opt`` key of routes the limit does not count."""

DEFAULT_LIMIT = 512
"""The default of ``LONGHAUL_MAX_IN_FLIGHT``."""

RETRY_AFTER_S = 1
"""The ``Retry-After`` of a refusal, in seconds: in-flight requests are short, so is the wait."""


class LimitInFlight(ASGIMiddleware):
    """Answer 429 to any request past ``limit`` in flight; let the others through.

    One instance serves every request of an app (one event loop): ``in_flight`` is shared on
    purpose, and changed only between awaits.
    """

    exclude_opt_key = UNLIMITED

    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ValueError("the in-flight limit is at least 1")
        self.limit = limit
        self.in_flight = 0
        self.refused = 0

    async def handle(self, scope: Scope, receive: Receive, send: Send, next_app: ASGIApp) -> None:
        """Count the request in and pass it on, or refuse it with 429."""
        if self.in_flight >= self.limit:
            self.refused += 1
            error = ResourceExhaustedError(
                f"this gateway has {self.limit} requests in flight (LONGHAUL_MAX_IN_FLIGHT); nothing of "
                f"this request was accepted: send it again in {RETRY_AFTER_S} s"
            )
            await send_refusal(scope, send, error, {"Retry-After": str(RETRY_AFTER_S)})
            return
        self.in_flight += 1
        counted = True

        async def answering(message: Message) -> None:
            nonlocal counted
            if counted and message["type"] == "http.response.start":
                counted = False
                self.in_flight -= 1
            await send(message)

        try:
            await next_app(scope, receive, answering)
        finally:
            if counted:
                self.in_flight -= 1

"""How a step runner waits: until a moment of the worker's clock, or until a step ends first.

The runner's deadlines (a lease renewal, a step's timeout, a retry's backoff) are moments of the
worker's ``Clock``. ``ClockPacing`` waits for them in real time, as the worker runs in production.
The test kit (``longhaul.testing``) has its own pacing that moves its clock instead of waiting.
"""

from __future__ import annotations

import asyncio
from datetime import datetime
from typing import Any, Protocol

from domain.clock import Clock


class Pacing(Protocol):
    """Waits measured on the worker's clock."""

    def now(self) -> datetime:
        """The clock's time."""
        ...

    async def sleep_until(self, moment: datetime, interrupt: asyncio.Future[Any] | None = None) -> None:
        """Return at ``moment`` (at once if it has passed), or sooner when ``interrupt`` is done."""
        ...

    async def wait(self, future: asyncio.Future[Any], until: datetime) -> None:
        """Return when ``future`` is done or at ``until``, whichever comes first."""
        ...


class ClockPacing:
    """Real waits, as long as the clock says."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock

    def now(self) -> datetime:
        """The clock's time."""
        return self.clock()

    async def sleep_until(self, moment: datetime, interrupt: asyncio.Future[Any] | None = None) -> None:
        """Sleep until ``moment``, or until ``interrupt`` is done."""
        seconds = max(0.0, (moment - self.clock()).total_seconds())
        if interrupt is None:
            await asyncio.sleep(seconds)
        else:
            await asyncio.wait({interrupt}, timeout=seconds)

    async def wait(self, future: asyncio.Future[Any], until: datetime) -> None:
        """Wait for ``future``, at most until ``until``: one done-callback and one timer.

        What ``asyncio.wait`` does for one future, without its set and checks: this runs once per
        step, on the path of every step commit.
        """
        if future.done():
            return
        loop = asyncio.get_running_loop()
        woken = loop.create_future()

        def wake(_: object = None) -> None:
            if not woken.done():
                woken.set_result(None)

        future.add_done_callback(wake)
        timer = loop.call_later(max(0.0, (until - self.clock()).total_seconds()), wake)
        try:
            await woken
        finally:
            timer.cancel()
            future.remove_done_callback(wake)

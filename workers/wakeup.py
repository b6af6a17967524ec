"""Wake idle workers when anything is appended, instead of polling per task; not for their own appends.

The store's recorder says when something was appended (``RunQueue.follow_appends``): on
PostgreSQL a ``LISTEN`` on the channel every append NOTIFYs (delivered at commit), in memory a
callback of the append itself. This turns that into an asyncio event.

A worker's own appends (its claims, its runners' step commits, the submissions handed to its
slots) never leave a task it could claim: each leaves the task leased by this worker, or paused,
or ended (ADR 0036). So the worker announces each of them (``expect``) before it is made: the
wake-up it causes is then matched against that announcement and wakes nobody. The
announcement is made before the append and settled after it (``Expectation.settle``), so that
whichever comes first, the append's NOTIFY or the append's return, the match is made:

- a NOTIFY takes the oldest announcement not matched yet; with none, it wakes the worker;
- an append that wrote nothing (a lost race, an error) withdraws its announcement; a NOTIFY
  already matched to it passes to another own append under way (it may have been that one's),
  and with none, it was someone else's: the worker is woken then;
- an append that wrote keeps its announcement until its NOTIFY comes; one that has not come
  ``match_within_s`` after the append returned is dropped, and the worker woken (a NOTIFY lost,
  while the listener reconnected say, must not stay matched against another's).

Only a wake-up can be late, never lost for good: a NOTIFY matched by mistake (another's that
came while an own append was under way whose own NOTIFY was then lost) wakes nobody, and the
worker's poll (``WorkerConfig.poll_seconds``) finds the task.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from collections.abc import Callable

from store.log import RunQueue

MATCH_WITHIN_S = 1.0
"""How long after an own append returned its NOTIFY may come and still be matched to it."""


class Expectation:
    """An own append announced to the ``Wakeup``: matched against its NOTIFY, then settled."""

    __slots__ = ("_wakeup", "deadline", "matched", "settled")

    def __init__(self, wakeup: Wakeup) -> None:
        self._wakeup = wakeup
        self.matched = False
        """A NOTIFY was matched to it."""
        self.settled = False
        """The append returned."""
        self.deadline: float | None = None
        """When an append that wrote stops waiting for its NOTIFY."""

    def settle(self, *, appended: bool) -> None:
        """The append returned: it wrote (and NOTIFYs, or did), or wrote nothing."""
        self._wakeup._settle(self, appended=appended)


class _Announcements(asyncio.Event):
    """The event the store's recorder sets on every append: sets the ``Wakeup``'s only for others'."""

    def __init__(self, wakeup: Wakeup) -> None:
        super().__init__()
        self._wakeup = wakeup

    def set(self) -> None:
        if not self._wakeup._matched():
            self._wakeup.event.set()


class Wakeup:
    """An ``asyncio.Event`` set whenever the store appends, except for the appends announced to it."""

    def __init__(
        self,
        source: RunQueue,
        *,
        match_within_s: float = MATCH_WITHIN_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.source = source
        self.event = asyncio.Event()
        self.matched = 0
        """NOTIFYs matched to own appends (woke nobody)."""
        self._match_within_s = match_within_s
        self._clock = clock
        self._expected: deque[Expectation] = deque()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Start following appends in the background."""
        self._task = asyncio.ensure_future(self.source.follow_appends(_Announcements(self)))

    async def stop(self) -> None:
        """Stop following."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    def expect(self) -> Expectation:
        """Announce an own append about to be made; settle the result when it returns."""
        expectation = Expectation(self)
        self._expected.append(expectation)
        return expectation

    def take(self) -> bool:
        """Whether an append (not an own one) happened since the last ``take``; clears it.

        Checked and cleared in one step of the event loop: a waiter cancelled while the event
        was being set cannot clear a wake-up nobody saw.
        """
        self._drop_overdue()
        if not self.event.is_set():
            return False
        self.event.clear()
        return True

    # ------------------------------------------------------------------ matching

    def _matched(self) -> bool:
        """Match one NOTIFY to the oldest own append not matched yet; False if there is none."""
        self._drop_overdue()
        expectation = next((e for e in self._expected if not e.matched), None)
        if expectation is None:
            return False
        self._match(expectation)
        self.matched += 1
        return True

    def _match(self, expectation: Expectation) -> None:
        expectation.matched = True
        if expectation.settled:
            self._discard(expectation)

    def _settle(self, expectation: Expectation, *, appended: bool) -> None:
        if expectation.settled:
            return
        expectation.settled = True
        if not appended:
            self._discard(expectation)
            if expectation.matched:  # the NOTIFY matched to it was another own append's, or not ours
                other = next((e for e in self._expected if not e.matched), None)
                if other is None:
                    self.matched -= 1
                    self.event.set()
                else:
                    self._match(other)
        elif expectation.matched:
            self._discard(expectation)
        else:
            expectation.deadline = self._clock() + self._match_within_s

    def _drop_overdue(self) -> None:
        now = self._clock()
        overdue = [e for e in self._expected if e.deadline is not None and e.deadline <= now]
        for expectation in overdue:
            self._discard(expectation)
            self.event.set()  # its NOTIFY never came: look, in case one was matched in its place

    def _discard(self, expectation: Expectation) -> None:
        with contextlib.suppress(ValueError):
            self._expected.remove(expectation)

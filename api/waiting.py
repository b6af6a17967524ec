"""How a blocking SendMessage waits for its task to move on.

The gateway never runs steps; it waits until the log holds a newer version of the task and then
reloads it. ``TaskWaiter`` is the port; ``PollingWaiter`` asks the log itself (one primary-key
lookup per poll, with backoff) and needs nothing else. A NATS-backed waiter that wakes on the
relay's messages can be passed to ``create_app`` instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Protocol
from uuid import UUID

from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg

from projections.subjects import NatsNames
from store.application import TaskApplication


class TaskWaiter(Protocol):
    """Waits for a task to (possibly) change.

    ``timeout`` is an argument (not ``asyncio.timeout``) because it is part of the contract: a
    waiter returns normally at the timeout and the caller decides what to answer.
    """

    async def wait_for_change(self, task_id: UUID, seen_version: int, timeout: float) -> None:  # noqa: ASYNC109
        """Return once the task may have a version above ``seen_version``, or after ``timeout`` s.

        Returning early is allowed (callers reload and check); returning late is not.
        """
        ...


class PollingWaiter:
    """Polls the task's newest version in the log: first at once, then with doubling delays."""

    def __init__(self, store: TaskApplication, *, first_delay: float = 0.005, max_delay: float = 0.2) -> None:
        self._store = store
        self._first_delay = first_delay
        self._max_delay = max_delay

    async def wait_for_change(self, task_id: UUID, seen_version: int, timeout: float) -> None:  # noqa: ASYNC109
        """Poll until a version above ``seen_version`` is committed or ``timeout`` passes."""
        deadline = time.monotonic() + timeout
        delay = self._first_delay
        while not await asyncio.to_thread(self.changed, task_id, seen_version):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            await asyncio.sleep(min(delay, remaining))
            delay = min(delay * 2, self._max_delay)

    def changed(self, task_id: UUID, seen_version: int) -> bool:
        """Whether the log holds an event of the task above ``seen_version``."""
        return bool(self._store.recorder.select_events(task_id, gt=seen_version, limit=1))


class NatsWaiter:
    """Wakes on the relay's NATS messages for the task (commit, then notify).

    It subscribes to the task's subjects first and then checks the log, so an event committed
    between the caller's read and the subscription is not missed. While waiting it still looks
    at the log every ``fallback_poll`` seconds, so a stalled relay delays an answer but never
    loses it.
    """

    def __init__(
        self, client: NatsClient, names: NatsNames, store: TaskApplication, *, fallback_poll: float = 1.0
    ) -> None:
        self._client = client
        self._names = names
        self._polling = PollingWaiter(store)
        self._fallback_poll = fallback_poll

    async def wait_for_change(self, task_id: UUID, seen_version: int, timeout: float) -> None:  # noqa: ASYNC109
        """Return when a message about the task arrives, the log moved on, or ``timeout`` passes."""
        woken = asyncio.Event()

        async def wake(_: Msg) -> None:
            woken.set()

        subscription = await self._client.subscribe(self._names.task_subjects(task_id), cb=wake)
        try:
            deadline = time.monotonic() + timeout
            while not await asyncio.to_thread(self._polling.changed, task_id, seen_version):
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(woken.wait(), min(remaining, self._fallback_poll))
                woken.clear()
        finally:
            await subscription.unsubscribe()

"""How a blocking SendMessage waits for its task to move on.

The gateway never runs steps; it waits until the task may have settled and then reloads it.
``TaskWaiter`` is the port. ``PollingWaiter`` asks the log itself (one primary-key lookup per
poll, with backoff) and needs nothing else: the in-memory store uses it. ``FeedWaiter`` reads
the relay's NATS messages through the task feed and wakes only on an event that changes the
task's state; ``longhaul gateway`` passes it to ``create_app`` when NATS is configured.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Protocol
from uuid import UUID

from api.task_feed import TaskFeed
from domain.task import Task
from store.log import TaskApplication

STATE_EVENTS = frozenset(Task.states_entered())
"""The event types that set a task's state (the domain's ``Task.states_entered``)."""


class TaskWaiter(Protocol):
    """Waits for a task to (possibly) settle.

    ``timeout`` is an argument (not ``asyncio.timeout``) because it is part of the contract: a
    waiter returns normally at the timeout and the caller decides what to answer.
    """

    async def wait_for_change(self, task: Task, timeout: float) -> None:  # noqa: ASYNC109
        """Return once the log may hold a version of ``task`` that settles it, or after ``timeout`` s.

        Returning early is allowed (callers reload and check); returning late is not.
        """
        ...


class PollingWaiter:
    """Polls the task's newest version in the log: first at once, then with doubling delays."""

    def __init__(self, store: TaskApplication, *, first_delay: float = 0.005, max_delay: float = 0.2) -> None:
        self._store = store
        self._first_delay = first_delay
        self._max_delay = max_delay

    async def wait_for_change(self, task: Task, timeout: float) -> None:  # noqa: ASYNC109
        """Poll until a version above ``task.version`` is committed or ``timeout`` passes."""
        task_id, seen_version = task.id, task.version
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


class FeedWaiter:
    """Waits on the task's live feed (``api.task_feed``) for an event that changes the task's state.

    It returns only on an event whose type sets the state (``STATE_EVENTS``, from the domain's
    ``Task.states_entered``): the caller reloads the task on those, never on a checkpoint,
    progress or artifact. Waking on the grant too, not only on the event that settles the task,
    lets a short task answer as soon as its end is in the log, without waiting for the relay to
    publish it (``docs/benchmarks.md``). The feed itself reads the log on a gap, after a NATS
    reconnect and every ``fallback_poll`` seconds without a message, so a stalled relay delays
    an answer but never loses it.
    """

    def __init__(self, feed: TaskFeed) -> None:
        self._feed = feed

    async def wait_for_change(self, task: Task, timeout: float) -> None:  # noqa: ASYNC109
        """Return when an event that changes ``task``'s state arrives, or after ``timeout`` seconds."""
        events = self._feed.follow(task.id, task.tenant, task.version, timeout=timeout)
        async with contextlib.aclosing(events):
            async for message in events:
                if message["type"] in STATE_EVENTS:
                    return

"""How a blocking SendMessage waits for its task to move on.

The gateway never runs steps; it waits until the log holds a newer version of the task and then
reloads it. ``TaskWaiter`` is the port; ``PollingWaiter`` asks the log itself (one primary-key
lookup per poll, with backoff) and needs nothing else. A NATS-backed waiter that wakes on the
relay's messages can be passed to ``create_app`` instead.
"""

from __future__ import annotations

import asyncio
import time
from typing import Protocol
from uuid import UUID

from projections.eventstore import TaskStore


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

    def __init__(self, store: TaskStore, *, first_delay: float = 0.005, max_delay: float = 0.2) -> None:
        self._store = store
        self._first_delay = first_delay
        self._max_delay = max_delay

    async def wait_for_change(self, task_id: UUID, seen_version: int, timeout: float) -> None:  # noqa: ASYNC109
        """Poll until a version above ``seen_version`` is committed or ``timeout`` passes."""
        deadline = time.monotonic() + timeout
        delay = self._first_delay
        while not await asyncio.to_thread(self._changed, task_id, seen_version):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            await asyncio.sleep(min(delay, remaining))
            delay = min(delay * 2, self._max_delay)

    def _changed(self, task_id: UUID, seen_version: int) -> bool:
        return bool(self._store.recorder.select_events(task_id, gt=seen_version, limit=1))

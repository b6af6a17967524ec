"""The sweeper: ends pauses past their deadline and expires terminal tasks past retention.

Both searches are index lookups on the run queue (partial indexes on the deadline and on the
end time), so their cost does not grow with the number of tasks waiting in time.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Callable
from datetime import timedelta
from uuid import UUID

from domain.clock import Clock
from domain.errors import DomainError
from domain.task import Task
from store.application import TaskApplication
from store.errors import ConflictError

log = logging.getLogger(__name__)

BATCH = 100


class Sweeper:
    """Runs ``sweep_once`` every ``interval`` seconds until stopped."""

    def __init__(
        self, *, store: TaskApplication, clock: Clock, retention: timedelta, interval: float
    ) -> None:
        self.store = store
        self.clock = clock
        self.retention = retention
        self.interval = interval

    async def run(self, stop: asyncio.Event) -> None:
        """Sweep until ``stop`` is set."""
        log.info("sweeper started (every %.1fs, retention %s)", self.interval, self.retention)
        while not stop.is_set():
            try:
                await asyncio.to_thread(self.sweep_once)
            except Exception as error:  # noqa: BLE001 - keep sweeping; the next round retries
                log.warning("sweep failed: %r", error)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), self.interval)
        log.info("sweeper stopped")

    def sweep_once(self) -> tuple[int, int]:
        """End every due pause and expire every due task; returns how many of each."""
        now = self.clock()
        end_pause = functools.partial(self.store.end_pause, clock=self.clock)
        expire = functools.partial(self.store.expire, retention=self.retention, clock=self.clock)
        ended = sum(_swept(end_pause, task_id) for task_id in self.store.run_queue.due_pauses(now, BATCH))
        expired = sum(
            _swept(expire, task_id)
            for task_id in self.store.run_queue.due_expiries(now - self.retention, BATCH)
        )
        return ended, expired


def _swept(use_case: Callable[[UUID], Task], task_id: UUID) -> bool:
    """Run the sweeper's ``use_case`` on one task; whether it changed the task."""
    try:
        task = use_case(task_id)
    except DomainError as error:  # someone answered or ended it meanwhile
        log.debug("task %s: nothing to sweep (%s)", task_id, error)
        return False
    except ConflictError as error:  # it kept changing: the next round tries again
        log.info("task %s: not swept this round (%s)", task_id, error)
        return False
    log.info("task %s: swept to %s", task_id, task.state)
    return True

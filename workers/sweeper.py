"""The sweeper: ends pauses past their deadline and expires terminal tasks past retention.

Both searches are index lookups on the run queue (partial indexes on the deadline and on the
end time), so their cost does not grow with the number of tasks waiting in time.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from datetime import datetime, timedelta
from uuid import UUID

from domain.clock import Clock
from domain.errors import DomainError
from domain.task import Task
from store.application import ConflictError, TaskStore
from workers.messages import agent_message

log = logging.getLogger(__name__)

BATCH = 100


class Sweeper:
    """Runs ``sweep_once`` every ``interval`` seconds until stopped."""

    def __init__(self, *, store: TaskStore, clock: Clock, retention: timedelta, interval: float) -> None:
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
        ended = sum(
            self._apply(task_id, _expire_pause) for task_id in self.store.run_queue.due_pauses(now, BATCH)
        )
        expired = sum(
            self._apply(task_id, _expire_retention(self.retention))
            for task_id in self.store.run_queue.due_expiries(now - self.retention, BATCH)
        )
        return ended, expired

    def _apply(self, task_id: UUID, command: Callable[[Task, datetime], None]) -> bool:
        for _ in range(5):
            task = self.store.get(task_id)
            try:
                command(task, self.clock())
            except DomainError as error:  # someone answered or ended it meanwhile
                log.debug("task %s: nothing to sweep (%s)", task_id, error)
                return False
            try:
                self.store.save_tasks(task)
            except ConflictError:
                continue
            log.info("task %s: swept to %s", task_id, task.state)
            return True
        return False


def _expire_pause(task: Task, now: datetime) -> None:
    deadline = task.pause_deadline if task.pause is not None else now
    kind = "input" if task.state == "TASK_STATE_INPUT_REQUIRED" else "authorization"
    text = f"No {kind} arrived before the deadline {deadline.isoformat()}; the task stopped waiting."
    task.expire_pause(now=now, message=agent_message(task, text))


def _expire_retention(retention: timedelta) -> Callable[[Task, datetime], None]:
    def expire(task: Task, now: datetime) -> None:
        task.expire(now=now, reason=f"retention of {retention} after the task ended")

    return expire

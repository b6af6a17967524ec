"""The sweeper: ends pauses past their deadline and expires terminal tasks past retention.

Both searches are index lookups on the run queue (partial indexes on the deadline and on the
end time), so their cost does not grow with the number of tasks waiting in time.

Retention may differ per tenant and skill (``store.retention.RetentionPolicy``). The expiry
search asks for tasks ended before ``now`` minus the *shortest* retention, oldest first, and
checks each candidate's own retention on its run-queue row (tenant, skill, end time) before the
use case, which checks it again on the task. A candidate not yet due is skipped, and the search
goes on after it (a keyset cursor on end time and id), at most ``EXPIRY_PAGES`` pages a round:
tasks with a long retention never hold up those behind them. The cost of a round is bounded;
what the candidates cost is the number of tasks ended between the shortest retention and their
own, read again in each round that reaches them.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Callable
from datetime import datetime, timedelta
from uuid import UUID

from domain.clock import Clock
from domain.errors import DomainError
from domain.task import Task
from store.application import TaskApplication
from store.errors import ConflictError, RetentionNotReachedError
from store.retention import RetentionPolicy

log = logging.getLogger(__name__)

BATCH = 100
EXPIRY_PAGES = 10
"""Pages of ``BATCH`` expiry candidates one round reads at most (candidates not due are skipped)."""


class Sweeper:
    """Runs ``sweep_once`` every ``interval`` seconds until stopped."""

    def __init__(
        self,
        *,
        store: TaskApplication,
        clock: Clock,
        retention: timedelta | RetentionPolicy,
        interval: float,
    ) -> None:
        self.store = store
        self.clock = clock
        self.retention = retention if isinstance(retention, RetentionPolicy) else RetentionPolicy(retention)
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
        expired = sum(_swept(expire, task_id) for task_id in self._due_expiries(now))
        return ended, expired

    def _due_expiries(self, now: datetime) -> list[UUID]:
        """Up to ``BATCH`` tasks past their own retention, from ``EXPIRY_PAGES`` pages at most."""
        queue = self.store.run_queue
        bound = now - self.retention.shortest
        due: list[UUID] = []
        after: tuple[datetime, UUID] | None = None
        for _ in range(EXPIRY_PAGES):
            page = queue.due_expiries(bound, BATCH, after=after)
            for task_id in page:
                row = queue.row(task_id)
                if row is None:
                    continue
                after = (row.updated_at, task_id)
                if row.updated_at <= now - self.retention.of(row.tenant, row.skill):
                    due.append(task_id)
            if len(page) < BATCH or len(due) >= BATCH:
                break
        return due[:BATCH]


def _swept(use_case: Callable[[UUID], Task], task_id: UUID) -> bool:
    """Run the sweeper's ``use_case`` on one task; whether it changed the task."""
    try:
        task = use_case(task_id)
    except (DomainError, RetentionNotReachedError) as error:  # answered or ended meanwhile; not due
        log.debug("task %s: nothing to sweep (%s)", task_id, error)
        return False
    except ConflictError as error:  # it kept changing: the next round tries again
        log.info("task %s: not swept this round (%s)", task_id, error)
        return False
    log.info("task %s: swept to %s", task_id, task.state)
    return True

"""The sweeper: ends pauses past their deadline and expires terminal tasks past retention.

Both searches are index lookups (partial indexes on the deadline and on the end time), so their
cost does not grow with the number of tasks waiting in time. Pauses come from the run queue;
expiry candidates from the retention index (``projections.retention_index``, kept by ``longhaul
projector``) on PostgreSQL, and from the run queue of a memory store, which has no projections.
The index trails the log by the projector's lag, so a task expires that much later, never
earlier: the use case checks the task itself.

Retention may differ per tenant and skill (``store.log.retention.RetentionPolicy``). The expiry
search asks for tasks ended before ``now`` minus the *shortest* retention, oldest first, and
checks each candidate's own retention on what the search returned (tenant, skill, end time)
before the use case, which checks it again on the task. A candidate not yet due is skipped, and the search
goes on after it (a keyset cursor on end time and id), at most ``EXPIRY_PAGES`` pages a round:
tasks with a long retention never hold up those behind them. The cost of a round is bounded;
what the candidates cost is the number of tasks ended between the shortest retention and their
own, read again in each round that reaches them.

When PostgreSQL's autovacuum is off, the sweeper also keeps the planner's statistics of the
store's tables, every ``REFRESH_EVERY_S`` seconds, by autovacuum's own rule
(``store.log.statistics``, ADR 0047): without them the plans made while the tables were small stay,
and claims, loads and appends cost more as the log grows.
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
from projections.retention_index import RetentionIndexRecorder, RetentionRow, open_index
from store.log import (
    REFRESH_EVERY_S,
    ConflictError,
    RetentionNotReachedError,
    RetentionPolicy,
    TaskApplication,
)

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
        self.index: RetentionIndexRecorder | None = open_index(store)

    async def run(self, stop: asyncio.Event) -> None:
        """Sweep until ``stop`` is set."""
        source = "the retention index (kept by the projector)" if self.index is not None else "the run queue"
        log.info(
            "sweeper started (every %.1fs, retention %s; expiry candidates from %s)",
            self.interval,
            self.retention,
            source,
        )
        every = max(1, round(REFRESH_EVERY_S / self.interval)) if self.interval > 0 else 1
        rounds = 0
        while not stop.is_set():
            try:
                await asyncio.to_thread(self.sweep_once)
            except Exception as error:  # noqa: BLE001 - keep sweeping; the next round retries
                log.warning("sweep failed: %r", error)
            if rounds % every == 0:
                try:
                    await asyncio.to_thread(self.refresh_statistics)
                except Exception as error:  # noqa: BLE001 - statistics are an aid: try again later
                    log.warning("analyzing the store's tables failed: %r", error)
            rounds += 1
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

    def refresh_statistics(self) -> list[str]:
        """Analyze the store's tables whose statistics are stale, if autovacuum is off (none in memory)."""
        statistics = self.store.statistics
        return statistics.refresh() if statistics is not None else []

    def _due_expiries(self, now: datetime) -> list[UUID]:
        """Up to ``BATCH`` tasks past their own retention, from ``EXPIRY_PAGES`` pages at most."""
        bound = now - self.retention.shortest
        due: list[UUID] = []
        after: tuple[datetime, UUID] | None = None
        for _ in range(EXPIRY_PAGES):
            page = self._candidates(bound, after)
            for row in page:
                assert row.ended_at is not None
                after = (row.ended_at, row.task_id)
                if row.ended_at <= now - self.retention.of(row.tenant, row.skill):
                    due.append(row.task_id)
            if len(page) < BATCH or len(due) >= BATCH:
                break
        return due[:BATCH]

    def _candidates(self, bound: datetime, after: tuple[datetime, UUID] | None) -> list[RetentionRow]:
        """One page of terminal tasks ended by ``bound``: from the index, or a memory run queue."""
        if self.index is not None:
            return self.index.due(bound, BATCH, after=after)
        queue = self.store.run_queue
        page = []
        for task_id in queue.due_expiries(bound, BATCH, after=after):
            row = queue.row(task_id)
            if row is not None:
                page.append(RetentionRow(task_id, row.tenant, row.skill, row.updated_at, row.expired, 0))
        return page


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

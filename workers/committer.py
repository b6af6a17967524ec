"""Group commits: many running tasks' step events saved in one transaction.

Appends to the event store serialise on one table lock, held by the server for the part of one
statement (ADR 0031), so each commit costs at least that. The throughput beyond it comes from
putting more work in each transaction: every runner of a worker hands its task to the ``Committer``,
which saves everything that is waiting in one ``save`` call. When the group fails, the store
saves each task alone, so only the tasks at fault see an error (``ConflictError`` for a race).
"""

from __future__ import annotations

import asyncio

from domain.task import Task
from store.log import GroupedCalls, TaskApplication
from workers.wakeup import Wakeup

MAX_GROUP = 128


class Committer:
    """Saves tasks for the runners of one worker, grouping those that wait at the same time."""

    def __init__(
        self, store: TaskApplication, max_group: int = MAX_GROUP, wakeup: Wakeup | None = None
    ) -> None:
        self.store = store
        self.wakeup = wakeup
        """The worker's wake-up, told of each commit so that its NOTIFY wakes nobody (ADR 0036)."""
        self.max_group = max_group
        self._groups: GroupedCalls[Task, None] = GroupedCalls(self._save_group, max_group)
        self.transactions = 0
        self.saved = 0

    async def save(self, task: Task) -> None:
        """Append ``task``'s pending events.

        Raises ``ConflictError`` if someone appended first, or the error that refused the save.
        """
        await self._groups.call(task)

    async def _save_group(self, tasks: list[Task]) -> list[BaseException | None]:
        appending = [bool(t.pending_events) for t in tasks]
        expectation = self.wakeup.expect() if self.wakeup is not None and any(appending) else None
        try:
            outcomes = await asyncio.to_thread(self.store.save_each, *tasks)
        except BaseException:
            if expectation is not None:
                expectation.settle(appended=False)
            raise
        if expectation is not None:  # one append at least NOTIFYs (a split group: more, waking it)
            expectation.settle(
                appended=any(a and o is None for a, o in zip(appending, outcomes, strict=True))
            )
        self.transactions += 1
        self.saved += sum(1 for outcome in outcomes if outcome is None)
        return list(outcomes)

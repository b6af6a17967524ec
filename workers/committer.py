"""Group commits: many running tasks' step events saved in one transaction.

Appends to the event store serialise on one table lock, so one commit at a time costs a full
transaction (about a thousand a second here). The throughput beyond that comes from putting
more work in each transaction: every runner of a worker hands its task to the ``Committer``,
which saves everything that is waiting in one ``save`` call. When the group fails, the store
saves each task alone, so only the tasks at fault see an error (``ConflictError`` for a race).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from domain.task import Task
from store.application import TaskApplication

MAX_GROUP = 128


@dataclass
class _Waiting:
    task: Task
    done: asyncio.Future[None] = field(default_factory=lambda: asyncio.get_running_loop().create_future())


class Committer:
    """Saves tasks for the runners of one worker, grouping those that wait at the same time."""

    def __init__(self, store: TaskApplication, max_group: int = MAX_GROUP) -> None:
        self.store = store
        self.max_group = max_group
        self._waiting: list[_Waiting] = []
        self._flusher: asyncio.Task[None] | None = None
        self.transactions = 0
        self.saved = 0

    async def save(self, task: Task) -> None:
        """Append ``task``'s pending events.

        Raises ``ConflictError`` if someone appended first, or the error that refused the save.
        """
        waiting = _Waiting(task)
        self._waiting.append(waiting)
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.ensure_future(self._flush())
        await waiting.done

    async def _flush(self) -> None:
        while self._waiting:
            group, self._waiting = self._waiting[: self.max_group], self._waiting[self.max_group :]
            try:
                outcomes = await asyncio.to_thread(self.store.save_each, *(w.task for w in group))
            except BaseException as error:  # the database failed: every waiter learns it
                for waiting in group:
                    if not waiting.done.done():
                        waiting.done.set_exception(error)
                if isinstance(error, asyncio.CancelledError):
                    raise
                continue
            self.transactions += 1
            for waiting, outcome in zip(group, outcomes, strict=True):
                if outcome is None:
                    self.saved += 1
                if waiting.done.done():  # the waiter was cancelled meanwhile; it reloads its copy
                    continue
                if outcome is None:
                    waiting.done.set_result(None)
                else:
                    waiting.done.set_exception(outcome)

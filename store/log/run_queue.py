"""The run queue: an inline view written in the same transaction as the events it derives from.

One row per task holds what workers and the sweeper search by: state, lease end, pause deadline,
skill version. Because the row is written by the same append that stores the task's events (and
only when that append succeeds), it can never disagree with the log. A row is replaced only by a
row of a newer task version, so a late writer never moves it back.

``RunQueue`` names what the store's recorder answers besides the library's own recorder
interface: the queries, the two-query load of several tasks, the group append that keeps the
tasks which did not lose a race (``insert_events_each``), and a wake-up on every append. Two
recorders implement it: ``store.log.postgres`` (the run queue is a table with partial indexes) and
``store.log.memory`` (dictionaries under the recorder's lock, for tests and single-process runs).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol
from uuid import UUID

from eventsourcing.persistence import StoredEvent

from domain.task import Task

RUN_QUEUE_TABLE = "longhaul_run_queue"


@dataclass(frozen=True)
class RunQueueRow:
    """The run-queue view of one task at one version."""

    task_id: UUID
    version: int
    tenant: str
    state: str
    skill: str
    skill_version: int
    next_step: int
    lease_owner: str | None
    lease_until: datetime | None
    deadline: datetime | None
    updated_at: datetime
    """The task's last change; once it is terminal, the time it ended (``Task.ended_at``): a push
    config set on an ended task moves no retention (ADR 0025)."""
    expired: bool

    @classmethod
    def of(cls, task: Task) -> RunQueueRow:
        """The row for ``task`` as it is in memory (after its pending events)."""
        return cls(
            task_id=task.id,
            version=task.version,
            tenant=task.tenant,
            state=str(task.state),
            skill=task.skill,
            skill_version=task.skill_version,
            next_step=task.next_step,
            lease_owner=task.lease_owner,
            lease_until=task.lease_until,
            deadline=task.pause_deadline if task.pause is not None else None,
            updated_at=task.ended_at or task.modified_on,
            expired=task.expired,
        )


@dataclass(frozen=True)
class EachAppended:
    """What a group append that keeps the tasks which did not lose a race wrote, and who lost."""

    ids: list[int]
    """The notification ids of the events stored, in the order they were given."""
    lost: frozenset[UUID]
    """The tasks someone appended to first (or gave a key first): nothing of theirs was written."""


@dataclass(frozen=True)
class StoredHistory:
    """What rebuilds one task: its latest snapshot (if any) and every event after it, in order."""

    snapshot: StoredEvent | None
    events: list[StoredEvent]


class RunQueue(Protocol):
    """The run-queue queries, the batch load, and the append wake-up, as every recorder has them.

    Orders are total where they matter to callers; rows that tie on the sort key come in any
    order.
    """

    def claimable(self, now: datetime, limit: int, skills: Sequence[tuple[str, int]]) -> list[UUID]:
        """Tasks a worker may claim at ``now``, longest-waiting first, at most ``limit``.

        Those are runnable, have no lease or an expired one (``lease_until <= now``), and are
        pinned to one of ``skills`` (the ``(name, version)`` pairs the worker can run). Order:
        no lease first, then by lease end, then by last change.
        """
        ...

    def next_lease_end(self, skills: Sequence[tuple[str, int]]) -> datetime | None:
        """The earliest lease end among runnable tasks of ``skills`` (when a claim may be next)."""
        ...

    def due_pauses(self, now: datetime, limit: int) -> list[UUID]:
        """Paused tasks whose deadline is at or before ``now``, earliest deadline first."""
        ...

    def due_expiries(
        self, ended_before: datetime, limit: int, *, after: tuple[datetime, UUID] | None = None
    ) -> list[UUID]:
        """Terminal, not yet expired tasks that ended at or before ``ended_before``, oldest first.

        Ordered by ``(end, task id)``; ``after`` continues behind that key (a page cursor).
        """
        ...

    def live_versions(self) -> list[tuple[str, int, int]]:
        """``(skill, version, live task count)`` for every version non-terminal tasks use, sorted."""
        ...

    def live_tasks_of(self, skill: str, version: int, limit: int = 20) -> list[UUID]:
        """Some non-terminal tasks pinned to ``skill`` at ``version``, least recently changed first."""
        ...

    def state_counts(self) -> dict[str, int]:
        """``state -> task count`` of the tasks not expired, for the states some task is in (metrics)."""
        ...

    def row(self, task_id: UUID) -> RunQueueRow | None:
        """The stored row of one task."""
        ...

    def owners(self, task_ids: Sequence[UUID]) -> dict[UUID, tuple[str, str | None]]:
        """``task_id -> (state, lease owner)`` for those of ``task_ids`` that exist."""
        ...

    def tenants(self, task_ids: Sequence[UUID]) -> dict[UUID, str]:
        """``task_id -> tenant`` for those of ``task_ids`` that exist (the relay's subjects)."""
        ...

    def select_histories(self, task_ids: Sequence[UUID]) -> dict[UUID, StoredHistory]:
        """The latest snapshot and the events after it, for those of ``task_ids`` that exist."""
        ...

    def insert_events_each(self, stored_events: Sequence[StoredEvent], **kwargs: object) -> EachAppended:
        """Append a group of tasks' events as ``insert_events`` does, leaving out the tasks that lost.

        A task lost when one of its new events' versions is stored already, or it is given a key
        and has one. Nothing of a lost task is written (events, chain hashes, run-queue row, keys);
        the others are appended in one transaction, in the order given. A race found only by the
        append itself raises the library's ``IntegrityError``, and then nothing was written.
        """
        ...

    async def follow_appends(self, event: asyncio.Event) -> None:
        """Set ``event`` after every committed append, until cancelled.

        It is also set once at the start and after any interruption (when appends may have been
        missed), so a waiter that clears it and looks again never sleeps through work.
        """
        ...

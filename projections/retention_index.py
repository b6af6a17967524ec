"""The retention index: per task, its tenant, skill and the time retention counts from.

``RetentionIndexRecorder`` is a ``FoldedView`` (``projections.folded_view``) kept by the
projector (``projections.projector``, in ``longhaul projector`` and ``up``) beside the
current-task view: each event applied exactly once, the rows and the index's position in one
transaction. A task's row comes with its ``Submitted`` event (the only
one that names tenant and skill); ``ended_at`` is set by the event that makes it terminal and
never moved after it: retention counts from the task's end (``Task.ended_at``, as
``TaskApplication.expire`` checks it), and a push config set on an ended task does not move it
(ADR 0025); ``Expired`` sets ``expired``.

The sweeper (``workers.sweeper``) asks ``due`` for terminal, unexpired tasks that ended before
``now`` minus the shortest retention, oldest first: one range of a partial index
(``store/log/migrations/0005_retention_index.sql``), whose rows carry what the sweeper needs to
check each candidate's own retention. The index trails the log by the projector's lag: a task
is expired that much later, never earlier (the use case checks the task itself).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime
from uuid import UUID

from psycopg.sql import SQL, Identifier
from typing_extensions import override

from domain.task import Task
from projections.folded_view import FoldedView
from store.log import PostgresRunQueueRecorder, StoreConfig, TaskApplication, read_transaction

INDEX_NAME = "longhaul_retention_index"
"""The projection's name: the index table, and ``<name>_tracking`` for its position."""
INDEX_TABLE = INDEX_NAME

_TERMINAL = (Task.Completed, Task.Failed, Task.Canceled, Task.Rejected)


@dataclass(frozen=True)
class RetentionRow:
    """One task as the retention index holds it."""

    task_id: UUID
    tenant: str
    skill: str
    ended_at: datetime | None
    """When the task ended (``None`` while it runs)."""
    expired: bool
    position: int
    """The log position of the event that last changed the row."""


def next_retention_row(row: RetentionRow | None, event: Task.Event, position: int) -> RetentionRow | None:
    """The row after ``event``, or ``None`` if it changes nothing (or names a task not seen)."""
    if isinstance(event, Task.Submitted):
        return RetentionRow(event.originator_id, event.tenant, event.skill, None, False, position)
    if row is None or row.expired:
        return None
    if isinstance(event, Task.Expired):
        return replace(row, expired=True, position=position)
    if isinstance(event, _TERMINAL):
        return replace(row, ended_at=event.timestamp, position=position)
    return None


class RetentionIndexRecorder(FoldedView[RetentionRow]):
    """The index's table and position (``<schema>.longhaul_retention_index``, ``..._tracking``)."""

    view_table = INDEX_TABLE
    row_type = RetentionRow
    columns = ("task_id", "tenant", "skill", "ended_at", "expired", "position")

    @override
    def next_row(self, row: RetentionRow | None, event: Task.Event, position: int) -> RetentionRow | None:
        """See ``next_retention_row``."""
        return next_retention_row(row, event, position)

    @override
    def reads_row(self, event: Task.Event) -> bool:
        """Only an end or an expiry reads the row (``next_retention_row`` ignores every other event)."""
        return isinstance(event, (Task.Expired, *_TERMINAL))

    def due(
        self, ended_before: datetime, limit: int, *, after: tuple[datetime, UUID] | None = None
    ) -> list[RetentionRow]:
        """Terminal, unexpired tasks that ended at or before ``ended_before``, oldest first.

        ``after`` is a keyset cursor: the ``(ended_at, task_id)`` of the last row of the page before.
        """
        since, after_id = after if after is not None else (None, None)
        statement = SQL(
            "SELECT * FROM {}.{} WHERE ended_at IS NOT NULL AND NOT expired AND ended_at <= %s"
            " AND (%s::timestamptz IS NULL OR (ended_at, task_id) > (%s::timestamptz, %s::uuid))"
            " ORDER BY ended_at, task_id LIMIT %s"
        ).format(Identifier(self.datastore.schema), Identifier(self.view_table_name))
        with read_transaction(self.datastore) as curs:
            curs.execute(statement, (ended_before, since, since, after_id, limit), prepare=True)
            return [self.row_of(found) for found in curs.fetchall()]


def open_index(app: TaskApplication) -> RetentionIndexRecorder | None:
    """The index over ``app``'s database and pool; ``None`` for a memory store."""
    if not isinstance(app.config, StoreConfig):
        return None
    recorder = app.recorder
    assert isinstance(recorder, PostgresRunQueueRecorder)
    return RetentionIndexRecorder(recorder.datastore)

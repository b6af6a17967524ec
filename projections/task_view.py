"""The current-task view: one row per task, kept by a projection that follows the log.

``TaskViewRecorder`` is a ``FoldedView`` (``projections.folded_view``: a
``PostgresTrackingRecorder`` whose rows and position in the log are written in one transaction,
so each event is applied exactly once however often the projector stops and starts).
``projections.projector`` keeps it following the log, beside the retention index, on one
subscription.

The row holds what ListTasks filters and sorts on: tenant, context, state, status timestamp
(with skill, skill version, expiry, version and log position). How each event changes state and
status timestamp mirrors the ``apply`` methods of ``domain.task.Task`` (``next_row``);
``tests/projections`` holds the view equal to the aggregates.

Both tables come from the schema migrations (``store/log/migrations/0003_task_view.sql``), not from
the library's ``create_table`` (ADR 0012, ``docs/adr/0012-the-current-task-view-as-a-projection.md``).
``rebuild`` recomputes every row from the log while the projector runs.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any
from uuid import UUID

from psycopg.sql import SQL, Composed, Identifier
from typing_extensions import override

from domain.states import TaskState
from domain.task import Task
from projections.folded_view import FoldedView
from store.log import PostgresRunQueueRecorder, StoreConfig, TaskApplication, read_transaction

VIEW_NAME = "longhaul_task_view"
"""The projection's name: the view table, and ``<name>_tracking`` for its position."""
VIEW_TABLE = VIEW_NAME

_COLUMNS = (
    "task_id",
    "tenant",
    "context_id",
    "state",
    "status_timestamp",
    "skill",
    "skill_version",
    "expired",
    "version",
    "position",
    "failed_attempts",
    "last_failure",
)


@dataclass(frozen=True)
class TaskViewRow:
    """One task as the view holds it."""

    task_id: UUID
    tenant: str
    context_id: str
    state: str
    status_timestamp: datetime
    skill: str
    skill_version: int
    expired: bool
    version: int
    """The version of the task's last event applied."""
    position: int
    """The log position (notification id) of that event."""
    failed_attempts: int = 0
    """Failed attempts at the task's current step (``StepAttemptFailed`` since its last outcome)."""
    last_failure: str | None = None
    """The last failed attempt at the current step: ``step N, cause: detail``."""


def next_row(row: TaskViewRow | None, event: Task.Event, position: int) -> TaskViewRow | None:
    """The row after ``event`` (at log ``position``); ``None`` for an event of no task seen yet.

    State and status timestamp change exactly where ``domain.task.Task``'s events change them.
    """
    at = event.timestamp
    if isinstance(event, Task.Submitted):
        return TaskViewRow(
            task_id=event.originator_id,
            tenant=event.tenant,
            context_id=event.context_id,
            state=str(TaskState.SUBMITTED),
            status_timestamp=at,
            skill=event.skill,
            skill_version=event.skill_version,
            expired=False,
            version=event.originator_version,
            position=position,
        )
    if row is None:
        return None
    row = replace(row, version=event.originator_version, position=position)
    if isinstance(event, Task.LeaseGranted):
        if row.state == TaskState.SUBMITTED:
            row = replace(row, state=str(TaskState.WORKING), status_timestamp=at)
    elif isinstance(event, Task.ProgressReported):
        row = replace(row, status_timestamp=at)
    elif isinstance(event, Task.StepAttemptFailed):
        failure = f"step {event.step}, {event.cause}: {event.detail}"
        row = replace(row, failed_attempts=event.attempt, last_failure=failure)
    elif isinstance(event, Task.StepCompleted):
        row = replace(row, failed_attempts=0, last_failure=None)
    elif isinstance(event, (Task.InputRequested, Task.AuthRequested)):
        row = replace(row, state=str(event.enters), status_timestamp=at, failed_attempts=0, last_failure=None)
    elif isinstance(event, Task.InputReceived):
        row = replace(row, state=str(TaskState.WORKING), status_timestamp=at)
    elif isinstance(event, (Task.Completed, Task.Failed, Task.Canceled, Task.Rejected)):
        row = replace(row, state=str(event.enters), status_timestamp=at)
    elif isinstance(event, Task.Expired):
        row = replace(row, expired=True)
    return row


# ---------------------------------------------------------------------- page cursor


@dataclass(frozen=True)
class PageCursor:
    """Where a page ends: the status timestamp and id of its last task."""

    status_timestamp: datetime
    task_id: UUID

    def token(self) -> str:
        """The opaque ``pageToken`` a client sends back for the next page."""
        raw = json.dumps([self.status_timestamp.isoformat(), str(self.task_id)]).encode()
        return base64.urlsafe_b64encode(raw).decode().rstrip("=")

    @classmethod
    def parse(cls, token: str) -> PageCursor:
        """The cursor of a ``pageToken``; ``ValueError`` if it is not one this view made."""
        try:
            raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
            moment, task_id = json.loads(raw)
            parsed = cls(datetime.fromisoformat(moment), UUID(task_id))
        except (binascii.Error, ValueError, TypeError, UnicodeDecodeError) as error:
            raise ValueError(f"pageToken {token!r} is not a token this agent issued") from error
        if parsed.status_timestamp.utcoffset() is None:
            raise ValueError(f"pageToken {token!r} is not a token this agent issued")
        return parsed


@dataclass(frozen=True)
class TaskQuery:
    """What ListTasks asks of the view (the tenant is always part of it)."""

    tenant: str
    context_id: str | None = None
    state: str | None = None
    status_after: datetime | None = None
    """Tasks whose status timestamp is at or after this."""


@dataclass(frozen=True)
class TaskPage:
    """One page of the view, newest status first."""

    rows: list[TaskViewRow]
    total: int
    """How many tasks match the query, on all pages."""
    next: PageCursor | None
    """Where the next page starts, or ``None`` on the last page."""


# ---------------------------------------------------------------------- the view


class TaskViewRecorder(FoldedView[TaskViewRow]):
    """The view's table and position (``<schema>.longhaul_task_view``, ``..._tracking``)."""

    view_table = VIEW_TABLE
    row_type = TaskViewRow
    columns = _COLUMNS

    @override
    def next_row(self, row: TaskViewRow | None, event: Task.Event, position: int) -> TaskViewRow | None:
        """The row after ``event``: see ``next_row`` (the module's function)."""
        return next_row(row, event, position)

    def page(self, query: TaskQuery, *, size: int, after: PageCursor | None = None) -> TaskPage:
        """One page of the tasks ``query`` matches, newest status first (then id), and their count.

        Expired tasks are left out: they answer TaskNotFound everywhere.
        """
        where = ["tenant = %s", "NOT expired"]
        params: list[Any] = [query.tenant]
        if query.context_id is not None:
            where.append("context_id = %s")
            params.append(query.context_id)
        if query.state is not None:
            where.append("state = %s")
            params.append(query.state)
        if query.status_after is not None:
            where.append("status_timestamp >= %s")
            params.append(query.status_after)
        with read_transaction(self.datastore) as curs:
            curs.execute(self._sql("SELECT count(*) AS n FROM {schema}.{table} WHERE {where}", where), params)
            counted = curs.fetchone()
            total = int(counted["n"]) if counted else 0
            if after is not None:
                where.append("(status_timestamp, task_id) < (%s, %s)")
                params += [after.status_timestamp, after.task_id]
            curs.execute(
                self._sql(
                    "SELECT * FROM {schema}.{table} WHERE {where}"
                    " ORDER BY status_timestamp DESC, task_id DESC LIMIT %s",
                    where,
                ),
                [*params, size + 1],
            )
            found = [self.row_of(r) for r in curs.fetchall()]
        rows = found[:size]
        more = len(found) > size
        next_cursor = PageCursor(rows[-1].status_timestamp, rows[-1].task_id) if more and rows else None
        return TaskPage(rows=rows, total=total, next=next_cursor)

    def retrying(self, limit: int) -> list[TaskViewRow]:
        """Working tasks whose current step has failed attempts, newest status first."""
        where = ["failed_attempts > 0", "state = %s", "NOT expired"]
        with read_transaction(self.datastore) as curs:
            curs.execute(
                self._sql(
                    "SELECT * FROM {schema}.{table} WHERE {where}"
                    " ORDER BY status_timestamp DESC, task_id DESC LIMIT %s",
                    where,
                ),
                [str(TaskState.WORKING), limit],
            )
            return [self.row_of(r) for r in curs.fetchall()]

    def _sql(self, template: str, where: Sequence[str] = ()) -> Composed:
        """``template`` on the view table; ``{where}`` joins the (constant) conditions with AND."""
        return SQL(template).format(
            schema=Identifier(self.datastore.schema),
            table=Identifier(self.view_table_name),
            where=SQL(" AND ").join(SQL(w) for w in where),
        )


def open_view(app: TaskApplication) -> TaskViewRecorder | None:
    """The view over ``app``'s database and pool (queries, rebuild); ``None`` for a memory store."""
    if not isinstance(app.config, StoreConfig):
        return None
    recorder = app.recorder
    assert isinstance(recorder, PostgresRunQueueRecorder)
    return TaskViewRecorder(recorder.datastore)

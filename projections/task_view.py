"""The current-task view: one row per task, kept by a projection that follows the log.

``TaskViewProjection`` is an ``eventsourcing`` ``Projection``; ``TaskViewRecorder`` is its
materialised view, a ``PostgresTrackingRecorder`` whose one command (``apply``) writes the task's
row **and** the view's position in the log in one transaction, so each event is applied exactly
once however often the projector stops and starts (a position already recorded is refused and
its transaction rolled back). ``run_projector`` runs it with the library's ``ProjectionRunner``.

The row holds what ListTasks filters and sorts on: tenant, context, state, status timestamp
(with skill, skill version, expiry, version and log position). How each event changes state and
status timestamp mirrors the ``apply`` methods of ``domain.task.Task`` (``next_row``);
``tests/projections`` holds the view equal to the aggregates.

Both tables come from the schema migrations (``store/migrations/0003_task_view.sql``), not from
the library's ``create_table`` (ADR 0012, ``docs/adr/0012-the-current-task-view-as-a-projection.md``).
``rebuild`` recomputes every row from the log while the projector runs.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import json
import logging
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, replace
from datetime import datetime
from typing import Any
from uuid import UUID

from eventsourcing.domain import DomainEventProtocol
from eventsourcing.persistence import StoredEvent, Tracking
from eventsourcing.postgres import PostgresDatastore, PostgresTrackingRecorder
from eventsourcing.projection import Projection, ProjectionRunner
from psycopg.rows import DictRow
from psycopg.sql import SQL, Composed, Identifier
from typing_extensions import override

from domain.states import TaskState
from domain.task import Task
from store.application import APP_NAME, TaskApplication
from store.config import StoreConfig, postgres_env
from store.postgres import PostgresRunQueueRecorder

log = logging.getLogger(__name__)

VIEW_NAME = "longhaul_task_view"
"""The projection's name: the view table, and ``<name>_tracking`` for its position."""
VIEW_TABLE = VIEW_NAME
TRACKING_TABLE = f"{VIEW_NAME}_tracking"
REBUILD_BATCH = 1000
LAG_LOG_S = 60.0
"""How often a running projector logs its lag."""

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

    def values(self) -> tuple[Any, ...]:
        """The row's column values, in ``_COLUMNS`` order."""
        return tuple(asdict(self)[c] for c in _COLUMNS)


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
    elif isinstance(event, (Task.InputRequested, Task.AuthRequested)):
        row = replace(row, state=str(event.enters), status_timestamp=at)
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


@dataclass(frozen=True)
class Lag:
    """How far the view trails the log."""

    position: int
    """The last log position the view applied (0 before the first)."""
    log_position: int
    """The highest position in the log (0 for an empty log)."""

    @property
    def behind(self) -> int:
        """Positions the view has not applied yet (an upper bound: positions can have gaps)."""
        return max(0, self.log_position - self.position)


@dataclass(frozen=True)
class Rebuilt:
    """What a rebuild did."""

    position: int
    """The log position the rows were rebuilt to (the projector resumes after it)."""
    tasks: int
    """The rows written."""


# ---------------------------------------------------------------------- the view


class TaskViewRecorder(PostgresTrackingRecorder):
    """The view's table and position (``<schema>.longhaul_task_view``, ``..._tracking``)."""

    def __init__(
        self, datastore: PostgresDatastore, *, tracking_table_name: str = TRACKING_TABLE, **kwargs: Any
    ) -> None:
        super().__init__(datastore, tracking_table_name=tracking_table_name, **kwargs)
        self.view_table_name = VIEW_TABLE
        schema, table = Identifier(datastore.schema), Identifier(self.view_table_name)
        self._select_row = SQL("SELECT * FROM {}.{} WHERE task_id = %s").format(schema, table)
        columns = SQL(", ").join(Identifier(c) for c in _COLUMNS)
        updates = SQL(", ").join(
            SQL("{0} = EXCLUDED.{0}").format(Identifier(c)) for c in _COLUMNS if c != "task_id"
        )
        self._upsert = SQL(
            "INSERT INTO {schema}.{table} ({columns}) VALUES ({values})"
            " ON CONFLICT (task_id) DO UPDATE SET {updates}"
        ).format(
            schema=schema,
            table=table,
            columns=columns,
            values=SQL(", ").join([SQL("%s")] * len(_COLUMNS)),
            updates=updates,
        )

    # ------------------------------------------------------------------ the command

    def apply(self, event: DomainEventProtocol[UUID], tracking: Tracking) -> None:
        """Apply one event to its task's row and record ``tracking``, in one transaction.

        The position is written first: a position already recorded raises ``IntegrityError``
        before any row is touched, and a running ``rebuild`` (which locks the position table
        first) is waited for rather than deadlocked with.
        """
        with self.datastore.transaction(commit=True) as curs:
            self._insert_tracking(curs, tracking)
            curs.execute(self._select_row, (event.originator_id,), prepare=True)
            found = curs.fetchone()
            row = None
            if isinstance(event, Task.Event):  # the log holds nothing else; anything else only moves on
                row = next_row(_row(found) if found else None, event, tracking.notification_id)
            if row is not None:
                curs.execute(self._upsert, row.values(), prepare=True)

    def rebuild(self, app: TaskApplication) -> Rebuilt:
        """Recompute every row from the log, in one transaction; returns what it rebuilt.

        The position table is locked first (``SHARE ROW EXCLUSIVE``): a running projector waits
        at its next event, reads go on seeing the old rows until the commit. The rows are rebuilt
        from the log up to the view's own position (or the log's end if it has none yet), so the
        projector resumes exactly after it.
        """
        recorder = app.recorder
        assert isinstance(recorder, PostgresRunQueueRecorder)
        schema = Identifier(self.datastore.schema)
        with self.datastore.transaction(commit=True) as curs:
            curs.execute(
                SQL("LOCK TABLE {}.{} IN SHARE ROW EXCLUSIVE MODE").format(
                    schema, Identifier(self.tracking_table_name)
                )
            )
            curs.execute(
                SQL("LOCK TABLE {}.{} IN SHARE ROW EXCLUSIVE MODE").format(
                    schema, Identifier(self.view_table_name)
                )
            )
            position = self._max_tracking_id(app.name, curs)
            tracked = position is not None
            if position is None:
                curs.execute(
                    SQL("SELECT coalesce(max(notification_id), 0) AS max FROM {}.{}").format(
                        schema, Identifier(recorder.events_table_name)
                    )
                )
                found = curs.fetchone()
                position = int(found["max"]) if found else 0
            rows: dict[UUID, TaskViewRow] = {}
            after = 0
            while after < position:
                curs.execute(
                    SQL(
                        "SELECT notification_id, originator_id, originator_version, topic, state"
                        " FROM {}.{} WHERE notification_id > %s AND notification_id <= %s"
                        " ORDER BY notification_id LIMIT %s"
                    ).format(schema, Identifier(recorder.events_table_name)),
                    (after, position, REBUILD_BATCH),
                )
                batch = curs.fetchall()
                if not batch:
                    break
                for record in batch:
                    event = app.mapper.to_domain_event(
                        StoredEvent(
                            originator_id=record["originator_id"],
                            originator_version=record["originator_version"],
                            topic=record["topic"],
                            state=bytes(record["state"]),
                        )
                    )
                    if not isinstance(event, Task.Event):
                        continue
                    row = next_row(rows.get(event.originator_id), event, record["notification_id"])
                    if row is not None:
                        rows[row.task_id] = row
                after = batch[-1]["notification_id"]
            curs.execute(SQL("DELETE FROM {}.{}").format(schema, Identifier(self.view_table_name)))
            if rows:
                curs.executemany(self._upsert, [row.values() for row in rows.values()])
            if not tracked and position > 0:
                self._insert_tracking(curs, Tracking(app.name, position))
        log.info("rebuilt %s: %d tasks up to log position %d", self.view_table_name, len(rows), position)
        return Rebuilt(position=position, tasks=len(rows))

    # ------------------------------------------------------------------ queries

    def rows(self) -> list[TaskViewRow]:
        """Every row, by task id (for comparisons and tools)."""
        with self.datastore.transaction(commit=False) as curs:
            curs.execute(self._sql("SELECT * FROM {schema}.{table} ORDER BY task_id"))
            return [_row(found) for found in curs.fetchall()]

    def row(self, task_id: UUID) -> TaskViewRow | None:
        """The row of one task."""
        with self.datastore.transaction(commit=False) as curs:
            curs.execute(self._select_row, (task_id,), prepare=True)
            found = curs.fetchone()
        return _row(found) if found else None

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
        with self.datastore.transaction(commit=False) as curs:
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
            found = [_row(r) for r in curs.fetchall()]
        rows = found[:size]
        more = len(found) > size
        next_cursor = PageCursor(rows[-1].status_timestamp, rows[-1].task_id) if more and rows else None
        return TaskPage(rows=rows, total=total, next=next_cursor)

    def lag(self, app: TaskApplication) -> Lag:
        """The view's position against the log's highest position."""
        return Lag(
            position=self.max_tracking_id(app.name) or 0,
            log_position=app.recorder.max_notification_id() or 0,
        )

    def _sql(self, template: str, where: Sequence[str] = ()) -> Composed:
        """``template`` on the view table; ``{where}`` joins the (constant) conditions with AND."""
        return SQL(template).format(
            schema=Identifier(self.datastore.schema),
            table=Identifier(self.view_table_name),
            where=SQL(" AND ").join(SQL(w) for w in where),
        )


def _row(found: DictRow) -> TaskViewRow:
    return TaskViewRow(**{c: found[c] for c in _COLUMNS})


class TaskViewProjection(Projection[TaskViewRecorder]):
    """Follows the task log into the current-task view."""

    name = VIEW_NAME
    topics: tuple[str, ...] = ()  # every event: each one moves the row's version and position

    @override
    def process_event(self, domain_event: Any, tracking: Tracking) -> None:
        """Apply ``domain_event`` to the view, with its position, exactly once."""
        self.view.apply(domain_event, tracking)


def open_view(app: TaskApplication) -> TaskViewRecorder | None:
    """The view over ``app``'s database and pool (queries, rebuild); ``None`` for a memory store."""
    if not isinstance(app.config, StoreConfig):
        return None
    recorder = app.recorder
    assert isinstance(recorder, PostgresRunQueueRecorder)
    return TaskViewRecorder(recorder.datastore)


def projector_env(config: StoreConfig, *, pool_size: int = 2) -> dict[str, str]:
    """The ``eventsourcing`` environment of the projector's view (migrations own its tables)."""
    env = postgres_env(config)
    env.update(
        {"CREATE_TABLE": "n", "POSTGRES_POOL_SIZE": str(pool_size), "POSTGRES_MAX_OVERFLOW": str(pool_size)}
    )
    return env


@contextlib.contextmanager
def projection_runner(config: StoreConfig) -> Iterator[ProjectionRunner[TaskApplication, TaskViewRecorder]]:
    """The library's runner of the view over the store at ``config``, following from the start.

    The runner opens its own ``TaskApplication`` (which migrates the schema) and resumes after
    the view's recorded position; ``run_forever`` re-raises a failure of its processing thread,
    ``wait(position)`` waits until the view applied ``position``. On leaving, the runner is
    stopped and the view's connection pool closed.
    """

    class _Application(TaskApplication):
        name = APP_NAME

        def __init__(self, env: Any = None) -> None:
            super().__init__(config)

    runner: ProjectionRunner[TaskApplication, TaskViewRecorder] = ProjectionRunner(
        application_class=_Application,
        projection_class=TaskViewProjection,
        view_class=TaskViewRecorder,
        env=projector_env(config),
    )
    try:
        with runner:
            yield runner
    finally:
        runner.view.datastore.close()


def run_projector(
    config: StoreConfig, stop: threading.Event, *, retry_s: float = 1.0, lag_every_s: float = LAG_LOG_S
) -> None:
    """Keep the view following the log until ``stop`` is set (blocking; run it in a thread).

    Logs the view's lag every ``lag_every_s`` seconds. A failure of the runner (the database
    gone, a position recorded by a rebuild the runner did not know of) is logged and the runner
    restarted from the view's recorded position.
    """
    while not stop.is_set():
        try:
            with projection_runner(config) as runner:
                app = runner.app
                log.info("projector: following the log after position %d", runner.view.lag(app).position)
                next_log = time.monotonic() + lag_every_s
                while not stop.is_set() and not runner.is_interrupted.is_set():
                    runner.run_forever(timeout=0.2)
                    if time.monotonic() >= next_log:
                        lag = runner.view.lag(app)
                        log.info(
                            "projector: at position %d of %d (%d behind)",
                            lag.position,
                            lag.log_position,
                            lag.behind,
                        )
                        next_log = time.monotonic() + lag_every_s
        except Exception as error:  # noqa: BLE001 - any failure: restart from the recorded position
            log.warning("projector stopped (%r); restarting in %.1fs", error, retry_s)
            stop.wait(retry_s)

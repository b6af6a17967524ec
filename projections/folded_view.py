"""A read model of one row per task, folded from the log by a projection, exactly once.

``FoldedView`` is a ``PostgresTrackingRecorder`` (the view of an ``eventsourcing``
``Projection``) whose rows are folded from each task's events by ``next_row``: its one command,
``apply``, writes the task's new row **and** the view's position in the log in one transaction,
so each event is applied exactly once however often the projector stops and starts (a position
already recorded is refused and its transaction rolled back). ``rebuild`` recomputes every row
from the log while the projector runs. The current-task view (``projections.task_view``) and the
retention index (``projections.retention_index``) are both one; their tables come from the
schema migrations, not from the library's ``create_table``.
"""

from __future__ import annotations

import contextlib
import functools
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, ClassVar, Generic, Protocol, TypeVar
from uuid import UUID

from eventsourcing.domain import DomainEventProtocol
from eventsourcing.persistence import IntegrityError, StoredEvent, Tracking
from eventsourcing.postgres import PostgresDatastore, PostgresTrackingRecorder
from eventsourcing.projection import Projection, ProjectionRunner
from psycopg import Cursor
from psycopg.rows import DictRow
from psycopg.sql import SQL, Identifier

from domain.task import Task
from store.application import APP_NAME, TaskApplication
from store.config import StoreConfig, postgres_env
from store.postgres import PostgresRunQueueRecorder
from store.reads import read_transaction
from store.retry import retry_lost_connection

log = logging.getLogger(__name__)

REBUILD_BATCH = 1000


class Row(Protocol):
    """A view row: a frozen dataclass whose first field is ``task_id``."""

    @property
    def task_id(self) -> UUID:
        """The task the row is of."""
        ...


R = TypeVar("R", bound=Row)
V = TypeVar("V", bound="FoldedView[Any]")


@dataclass(frozen=True)
class Lag:
    """How far a view trails the log."""

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


def tracking_params(tracking: Tracking) -> dict[str, Any]:
    """The parameters of the library's position write (``insert_tracking_statement``)."""
    return {"application_name": tracking.application_name, "notification_id": tracking.notification_id}


class FoldedView(PostgresTrackingRecorder, Generic[R]):
    """Rows of ``row_type`` in ``<schema>.<view_table>``, the position in ``<view_table>_tracking``."""

    view_table: ClassVar[str]
    row_type: ClassVar[type[Any]]
    columns: ClassVar[tuple[str, ...]]
    """The row's fields, in the dataclass's order (``task_id`` first)."""

    def __init__(self, datastore: PostgresDatastore, *, tracking_table_name: str = "", **kwargs: Any) -> None:
        super().__init__(
            datastore, tracking_table_name=tracking_table_name or f"{self.view_table}_tracking", **kwargs
        )
        self.view_table_name = self.view_table
        if not datastore.single_row_tracking:
            raise ValueError("a FoldedView's position table is the library's single-row tracking table")
        # Rendered once: psycopg renders a ``Composed`` again on every execute.
        schema, table = Identifier(datastore.schema), Identifier(self.view_table_name)
        self._select_row = SQL("SELECT * FROM {}.{} WHERE task_id = %s").format(schema, table).as_string()
        # The library's own single-row position write (named parameters, RETURNING the position):
        # no row returned when the position is recorded already.
        track = self.insert_tracking_statement
        self._track = track.as_string()
        self._track_and_select = (
            SQL(
                "WITH tracked AS ({track}) SELECT found.* FROM tracked LEFT JOIN {schema}.{table} AS found"
                " ON found.task_id = %(task_id)s"
            )
            .format(track=track, schema=schema, table=table)
            .as_string()
        )
        """The position written and the task's row read in one statement: no row returned when the
        position is recorded; one, its columns null when the task has no row, otherwise."""
        columns = SQL(", ").join(Identifier(c) for c in self.columns)
        updates = SQL(", ").join(
            SQL("{0} = EXCLUDED.{0}").format(Identifier(c)) for c in self.columns if c != "task_id"
        )
        self._upsert = (
            SQL(
                "INSERT INTO {schema}.{table} ({columns}) VALUES ({values})"
                " ON CONFLICT (task_id) DO UPDATE SET {updates}"
            )
            .format(
                schema=schema,
                table=table,
                columns=columns,
                values=SQL(", ").join([SQL("%s")] * len(self.columns)),
                updates=updates,
            )
            .as_string()
        )

    def next_row(self, row: R | None, event: Task.Event, position: int) -> R | None:
        """The row after ``event`` (at log ``position``); ``None`` leaves the task without a row."""
        raise NotImplementedError

    def reads_row(self, event: Task.Event) -> bool:
        """Whether ``next_row`` reads the task's row for ``event``.

        If not, ``apply`` does not read it: ``next_row(None, event, ...)`` is then what
        ``next_row(row, event, ...)`` is for any row.
        """
        return not isinstance(event, Task.Submitted)

    def row_of(self, found: DictRow) -> R:
        """The row a query found."""
        row: R = self.row_type(**{c: found[c] for c in self.columns})
        return row

    def _values(self, row: R) -> tuple[Any, ...]:
        return tuple(getattr(row, c) for c in self.columns)

    # ------------------------------------------------------------------ the command

    def apply(self, event: DomainEventProtocol[UUID], tracking: Tracking) -> None:
        """Apply one event to its task's row and record ``tracking``, in one transaction.

        The position is written first: a position already recorded raises ``IntegrityError``
        before any row is touched, and a running ``rebuild`` (which locks the position table
        first) is waited for rather than deadlocked with. A lost connection rolls the
        transaction back and it is tried again (``retry_lost_connection``).

        As few round trips as that allows (ADR 0044): an event that leaves the row as it is (by
        ``reads_row`` and ``next_row``) records only the position, one statement; one that needs
        the row writes the position and reads the row in one statement (the read takes no lock a
        rebuild waits for); the row is not read for an event whose new row does not depend on it.
        """
        retry_lost_connection(functools.partial(self._apply, event, tracking))

    def _apply(self, event: DomainEventProtocol[UUID], tracking: Tracking) -> None:
        position = tracking.notification_id
        if not isinstance(event, Task.Event):  # the log holds nothing else; anything else only moves on
            self._record_position(tracking)
        elif not self.reads_row(event):
            row = self.next_row(None, event, position)
            if row is None:
                self._record_position(tracking)
            else:
                with self.datastore.transaction(commit=True) as curs:
                    self._refuse_recorded(curs.execute(self._track, tracking_params(tracking), prepare=True))
                    curs.execute(self._upsert, self._values(row), prepare=True)
        else:
            with self.datastore.transaction(commit=True) as curs:
                params = {**tracking_params(tracking), "task_id": event.originator_id}
                found = self._refuse_recorded(curs.execute(self._track_and_select, params, prepare=True))
                row = self.next_row(None if found["task_id"] is None else self.row_of(found), event, position)
                if row is not None:
                    curs.execute(self._upsert, self._values(row), prepare=True)

    def _record_position(self, tracking: Tracking) -> None:
        """Only the position: one statement, its own transaction."""
        with self.datastore.get_connection() as conn:
            self._refuse_recorded(conn.execute(self._track, tracking_params(tracking), prepare=True))

    def _refuse_recorded(self, curs: Cursor[DictRow]) -> DictRow:
        """The position statement's one row.

        ``IntegrityError`` (the library's) when it returned none: the position was recorded
        already (and the transaction is rolled back).
        """
        found = curs.fetchone()
        if found is None:
            raise IntegrityError(f"position already recorded in {self.tracking_table_name}")
        return found

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
            for table in (self.tracking_table_name, self.view_table_name):
                curs.execute(
                    SQL("LOCK TABLE {}.{} IN SHARE ROW EXCLUSIVE MODE").format(schema, Identifier(table))
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
            rows: dict[UUID, R] = {}
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
                    row = self.next_row(rows.get(event.originator_id), event, record["notification_id"])
                    if row is not None:
                        rows[row.task_id] = row
                after = batch[-1]["notification_id"]
            curs.execute(SQL("DELETE FROM {}.{}").format(schema, Identifier(self.view_table_name)))
            if rows:
                curs.executemany(self._upsert, [self._values(row) for row in rows.values()])
            if not tracked and position > 0:
                self._insert_tracking(curs, Tracking(app.name, position))
        log.info("rebuilt %s: %d tasks up to log position %d", self.view_table_name, len(rows), position)
        return Rebuilt(position=position, tasks=len(rows))

    # ------------------------------------------------------------------ queries

    def rows(self) -> list[R]:
        """Every row, by task id (for comparisons and tools)."""
        return retry_lost_connection(self._rows)

    def _rows(self) -> list[R]:
        with read_transaction(self.datastore) as curs:
            curs.execute(
                SQL("SELECT * FROM {}.{} ORDER BY task_id").format(
                    Identifier(self.datastore.schema), Identifier(self.view_table_name)
                )
            )
            return [self.row_of(found) for found in curs.fetchall()]

    def row(self, task_id: UUID) -> R | None:
        """The row of one task."""
        return retry_lost_connection(functools.partial(self._row, task_id))

    def _row(self, task_id: UUID) -> R | None:
        with read_transaction(self.datastore) as curs:
            curs.execute(self._select_row, (task_id,), prepare=True)
            found = curs.fetchone()
        return self.row_of(found) if found else None

    def lag(self, app: TaskApplication) -> Lag:
        """The view's position against the log's highest position."""
        return Lag(
            position=self.max_tracking_id(app.name) or 0,
            log_position=app.recorder.max_notification_id() or 0,
        )


def projector_env(config: StoreConfig, *, pool_size: int = 2) -> dict[str, str]:
    """The ``eventsourcing`` environment of a projector's view (migrations own its tables)."""
    env = postgres_env(config)
    env.update(
        {"CREATE_TABLE": "n", "POSTGRES_POOL_SIZE": str(pool_size), "POSTGRES_MAX_OVERFLOW": str(pool_size)}
    )
    return env


@contextlib.contextmanager
def projection_runner_for(
    config: StoreConfig, projection_class: type[Projection[V]], view_class: type[V]
) -> Iterator[ProjectionRunner[TaskApplication, V]]:
    """The library's runner of one projection over the store at ``config``, following from the start.

    The runner opens its own ``TaskApplication`` (which migrates the schema) and resumes after
    the view's recorded position; ``run_forever`` re-raises a failure of its processing thread,
    ``wait(position)`` waits until the view applied ``position``. On leaving, the runner is
    stopped and the view's connection pool closed.
    """

    class _Application(TaskApplication):
        name = APP_NAME

        def __init__(self, env: Any = None) -> None:
            super().__init__(config)

    runner: ProjectionRunner[TaskApplication, V] = ProjectionRunner(
        application_class=_Application,
        projection_class=projection_class,
        view_class=view_class,
        env=projector_env(config),
    )
    try:
        with runner:
            yield runner
    finally:
        runner.view.datastore.close()

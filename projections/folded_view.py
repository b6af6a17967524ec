"""A read model of one row per task, folded from the log by a projection, exactly once.

``FoldedView`` is a ``PostgresTrackingRecorder`` (the library's recorder of a position in the
log, in its single-row tracking table) whose rows are folded from each task's events by
``next_row``. Its commands run in the projector's transaction (``projections.projector``), which
writes a batch's rows **and** the view's position together: ``move_position`` records the new
position only if the recorded one is still the one the projector read (a compare-and-set, so
each event is applied exactly once however often projectors stop, start or run side by side),
``fold`` folds the batch into the rows it changes. ``rebuild`` recomputes every row from the log
while the projector runs. The current-task view (``projections.task_view``) and the
retention index (``projections.retention_index``) are both one; their tables come from the
schema migrations, not from the library's ``create_table``.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Generic, Protocol, TypeVar
from uuid import UUID

from eventsourcing.persistence import StoredEvent, Tracking
from eventsourcing.postgres import PostgresDatastore, PostgresTrackingRecorder
from psycopg import Cursor
from psycopg.rows import DictRow
from psycopg.sql import SQL, Identifier

from domain.task import Task
from store.log import (
    PostgresRunQueueRecorder,
    TaskApplication,
    read_statement,
    read_transaction,
    retry_lost_connection,
)

log = logging.getLogger(__name__)

REBUILD_BATCH = 1000


class Row(Protocol):
    """A view row: a frozen dataclass whose first field is ``task_id``."""

    @property
    def task_id(self) -> UUID:
        """The task the row is of."""
        ...


R = TypeVar("R", bound=Row)


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
        self._select_rows = (
            SQL("SELECT * FROM {}.{} WHERE task_id = ANY(%s)").format(schema, table).as_string()
        )
        tracking = Identifier(self.tracking_table_name)
        self._move_position = (
            SQL(
                "UPDATE {schema}.{tracking} SET notification_id = %(to)s"
                " WHERE application_name = %(name)s AND notification_id = %(expected)s"
                " RETURNING notification_id"
            )
            .format(schema=schema, tracking=tracking)
            .as_string()
        )
        self._first_position = (
            SQL(
                "INSERT INTO {schema}.{tracking} (application_name, notification_id)"
                " VALUES (%(name)s, %(to)s) ON CONFLICT (application_name) DO NOTHING"
                " RETURNING notification_id"
            )
            .format(schema=schema, tracking=tracking)
            .as_string()
        )
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

        If not, ``fold`` reads no row for it: ``next_row(None, event, ...)`` is then what
        ``next_row(row, event, ...)`` is for any row.
        """
        return not isinstance(event, Task.Submitted)

    def row_of(self, found: DictRow) -> R:
        """The row a query found."""
        row: R = self.row_type(**{c: found[c] for c in self.columns})
        return row

    def _values(self, row: R) -> tuple[Any, ...]:
        return tuple(getattr(row, c) for c in self.columns)

    # ------------------------------------------------------------------ the commands

    def move_position(
        self, curs: Cursor[DictRow], application_name: str, expected: int | None, to: int
    ) -> bool:
        """Record position ``to`` if the recorded one is still ``expected`` (``None``: none recorded).

        A compare-and-set, the view's fence (ADR 0048): ``False``, and nothing written, when
        another writer (a second projector, a rebuild) moved the position since it was read. Run
        first in the transaction of the rows it records: its row lock holds a second projector
        back until the commit, and a running rebuild (which locks the position table first) is
        waited for before anything is read.
        """
        if expected is None:
            curs.execute(self._first_position, {"name": application_name, "to": to}, prepare=True)
        else:
            params = {"name": application_name, "expected": expected, "to": to}
            curs.execute(self._move_position, params, prepare=True)
        return curs.fetchone() is not None

    def fold(self, curs: Cursor[DictRow], events: Sequence[tuple[Task.Event, int]]) -> int:
        """Fold ``events`` (each with its log position, in log order) into their tasks' rows.

        One read of the rows the events need (by ``reads_row``; none if no event reads one), the
        fold in memory, one upsert of each row changed; returns the rows written. The caller
        records the position in the same transaction (``move_position``).
        """
        wanted = {event.originator_id for event, _ in events if self.reads_row(event)}
        rows: dict[UUID, R] = {}
        if wanted:
            curs.execute(self._select_rows, (list(wanted),), prepare=True)
            rows = {found["task_id"]: self.row_of(found) for found in curs.fetchall()}
        changed: dict[UUID, R] = {}
        for event, position in events:
            row = self.next_row(rows.get(event.originator_id), event, position)
            if row is not None:
                rows[row.task_id] = changed[row.task_id] = row
        if len(changed) == 1:  # psycopg's executemany (a pipeline) costs more Python than one execute
            curs.execute(self._upsert, self._values(next(iter(changed.values()))), prepare=True)
        elif changed:
            curs.executemany(self._upsert, [self._values(row) for row in changed.values()])
        return len(changed)

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
        found = read_statement(self.datastore, self._select_row, (task_id,))
        return self.row_of(found[0]) if found else None

    def lag(self, app: TaskApplication) -> Lag:
        """The view's position against the log's highest position."""
        return Lag(
            position=self.max_tracking_id(app.name) or 0,
            log_position=app.recorder.max_notification_id() or 0,
        )

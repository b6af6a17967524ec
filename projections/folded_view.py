"""A read model of one row per task, folded from the log, exactly once.

``FoldedView`` is a ``PostgresTrackingRecorder`` (the library's single-row position table) whose
rows are folded from each task's events by ``next_row``. Its command, ``fold``, applies a batch
of events inside the caller's transaction: each task's row folded in memory and upserted once,
the rows the fold needs read in one query, the view's position written with them, so each event
is applied exactly once however often the projector stops and starts (a batch any of which was
applied already is refused and its transaction rolled back). The projector
(``projections.projector``) folds each batch into both views in one transaction (ADR 0047);
``apply`` is one event in a transaction of its own. ``rebuild`` recomputes every row from the
log while the projector runs. The current-task view (``projections.task_view``) and the
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

from eventsourcing.domain import DomainEventProtocol
from eventsourcing.persistence import IntegrityError, StoredEvent, Tracking
from eventsourcing.postgres import PostgresDatastore, PostgresTrackingRecorder
from psycopg import Cursor
from psycopg.rows import DictRow
from psycopg.sql import SQL, Identifier

from domain.task import Task
from projections.log_follower import Followed
from store.application import TaskApplication
from store.postgres import PostgresRunQueueRecorder
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
        # The library's own single-row position write (named parameters, RETURNING the position):
        # no row returned when the position is recorded already.
        track = self.insert_tracking_statement
        self._track = track.as_string()
        self._track_and_select = (
            SQL(
                "WITH tracked AS ({track}) SELECT found.* FROM tracked LEFT JOIN {schema}.{table} AS found"
                " ON found.task_id = ANY(%(task_ids)s)"
            )
            .format(track=track, schema=schema, table=table)
            .as_string()
        )
        """The position written and the tasks' rows read in one statement: no row returned when the
        position is recorded; otherwise the rows found, or one with null columns if none was."""
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

    def fold(self, curs: Cursor[DictRow], followed: Sequence[Followed]) -> None:
        """Apply ``followed`` (events in log order, all after the view's position) in ``curs``'s transaction.

        The caller's transaction holds the rows and the position together (the projector applies
        a batch to both views in one, ADR 0047). Each task's row is folded in memory through the
        task's events of the batch and upserted once; the rows the fold needs are read in one
        query (``task_id = ANY(...)``), only for tasks whose first event that depends on the row
        (``reads_row``) is not preceded in the batch by one that makes the row on its own.

        The position of the first event is written first, by the library's own statement
        (``insert_tracking_statement``), and refused with ``IntegrityError`` if a position at or
        after it is recorded: as no position lies between the view's and the first event's,
        that refuses the whole batch if any of it was applied (exactly once). The write waits
        for a running ``rebuild`` (which locks the position table first); the read of the rows
        shares its statement and takes no lock a rebuild waits for (ADR 0044). The last event's
        position is written after the rows (a second statement only for a batch of more than
        one event).
        """
        if not followed:
            return
        name = followed[0][1].application_name
        first, last = followed[0][1].notification_id, followed[-1][1].notification_id
        events = [(e, t.notification_id) for e, t in followed if isinstance(e, Task.Event)]
        # (anything else in the log, there is nothing else, only moves the position)
        needed = self._rows_needed(events)
        rows: dict[UUID, R] = {}
        if needed:
            params = {"application_name": name, "notification_id": first, "task_ids": needed}
            found = curs.execute(self._track_and_select, params, prepare=True).fetchall()
            if not found:
                raise IntegrityError(f"position already recorded in {self.tracking_table_name}")
            rows = {f["task_id"]: self.row_of(f) for f in found if f["task_id"] is not None}
        else:
            self._refuse_recorded(curs.execute(self._track, self._tracked(name, first), prepare=True))
        changed: dict[UUID, R] = {}
        for event, position in events:
            row = self.next_row(rows.get(event.originator_id), event, position)
            if row is not None:
                rows[row.task_id] = changed[row.task_id] = row
        if len(changed) == 1:
            curs.execute(self._upsert, self._values(next(iter(changed.values()))), prepare=True)
        elif changed:
            curs.executemany(self._upsert, [self._values(row) for row in changed.values()])
        if last != first:
            self._refuse_recorded(curs.execute(self._track, self._tracked(name, last), prepare=True))

    def _rows_needed(self, events: Sequence[tuple[Task.Event, int]]) -> list[UUID]:
        """The tasks whose stored row the fold of ``events`` reads, in order of first need."""
        made: set[UUID] = set()
        needed: dict[UUID, None] = {}
        for event, position in events:
            task_id = event.originator_id
            if task_id in made or task_id in needed:
                continue
            if self.reads_row(event):
                needed[task_id] = None
            elif self.next_row(None, event, position) is not None:
                made.add(task_id)  # its row from here on depends on no stored one
        return list(needed)

    @staticmethod
    def _tracked(application_name: str, position: int) -> dict[str, Any]:
        return {"application_name": application_name, "notification_id": position}

    def apply(self, event: DomainEventProtocol[UUID], tracking: Tracking) -> None:
        """Apply one event and record ``tracking``, in a transaction of its own (``fold`` of one).

        For tools and tests; the projector folds whole batches (``projections.projector``). A
        lost connection rolls the transaction back and it is tried again (``retry_lost_connection``).
        """
        retry_lost_connection(functools.partial(self._apply, event, tracking))

    def _apply(self, event: DomainEventProtocol[UUID], tracking: Tracking) -> None:
        with self.datastore.transaction(commit=True) as curs:
            self.fold(curs, [(event, tracking)])

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
        with self.datastore.transaction(commit=False) as curs:
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
        with self.datastore.transaction(commit=False) as curs:
            curs.execute(self._select_row, (task_id,), prepare=True)
            found = curs.fetchone()
        return self.row_of(found) if found else None

    def lag(self, app: TaskApplication) -> Lag:
        """The view's position against the log's highest position."""
        return Lag(
            position=self.max_tracking_id(app.name) or 0,
            log_position=app.recorder.max_notification_id() or 0,
        )

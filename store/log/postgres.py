"""The PostgreSQL recorder: the library's application recorder plus the run-queue table.

The run-queue rows are upserted by the same transaction that appends the events, so they are
written only when the append commits. That transaction is one statement, a call of the
``longhaul_append`` function (migrations 0009 and 0010, ADR 0031) in autocommit: the library's table lock
is taken and released on the server, within one client round trip. Claims and deadline
sweeps are index lookups on partial indexes, so their cost does not grow with the number of
paused or finished tasks. The table and its indexes come from the schema migrations
(``store/log/migrations``), not from this class.

A group commit of the worker (``insert_events_each``, migration 0010, ADR 0037) locks its tasks'
run-queue rows first, then leaves out the tasks whose race was lost and appends the others: a
lost race costs its task only, not the group.

The same transaction writes each event's chain hash (``store/evidence/chain.py``) to
``longhaul_event_chain``, after the events themselves (so a lost race is the library's conflict on
the events' key). The hash before a task's first new event is known from this process's own last
commit of that task (a worker commits each step of the tasks it holds), else read before the
append, for all tasks of a group commit in one query.

Longer than 500 lines on purpose: the recorder's statements (the append, the run queue's searches,
the batch loads, the chain's reads) share its connection handling and its schema's composed SQL; the
pure parts are elsewhere (``store/log/run_queue.py``, ``store/evidence/chain.py``).
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from datetime import datetime
from typing import Any
from uuid import UUID

import psycopg
from eventsourcing.persistence import (
    InterfaceError,
    Notification,
    OperationalError,
    ProgrammingError,
    StoredEvent,
)
from eventsourcing.postgres import PostgresApplicationRecorder, PostgresDatastore
from eventsourcing.utils import retry
from psycopg import Cursor
from psycopg.conninfo import make_conninfo
from psycopg.rows import DictRow, dict_row
from psycopg.sql import SQL, Composed, Identifier

from domain.states import INTERRUPTED, RUNNABLE, TERMINAL
from store.evidence.chain import GENESIS, ChainRow, chain_hash, task_uuid
from store.evidence.merkle_log import PURGED_TABLE
from store.log.binary_arrays import bools, byteas, int4s, int8s, texts, timestamptzs, uuids
from store.log.reads import read_statement, read_transaction
from store.log.run_queue import RUN_QUEUE_TABLE, EachAppended, RunQueueRow, StoredHistory
from store.secrets.task_keys import KeyChanges, PostgresTaskKeys

log = logging.getLogger(__name__)

RUNNABLE_SQL = ", ".join(f"'{s}'" for s in sorted(RUNNABLE))
PAUSED_SQL = ", ".join(f"'{s}'" for s in sorted(INTERRUPTED))
TERMINAL_SQL = ", ".join(f"'{s}'" for s in sorted(TERMINAL))
CHAIN_TABLE = "longhaul_event_chain"
EVENTS_TABLE = "longhaul_events"
"""The library's events table under the application's name, which the migrations name too."""
CHAIN_HEADS_KEPT = 10_000
"""Tasks whose last chain hash a process remembers from its own commits (about 1 MB)."""

Link = tuple[UUID, int, bytes]
"""``(task id, version, chain hash)``: one row of the chain table."""


class PostgresRunQueueRecorder(PostgresApplicationRecorder):
    """The application recorder that also keeps the run queue, inside the append transaction."""

    def __init__(self, datastore: PostgresDatastore, *, events_table_name: str = EVENTS_TABLE) -> None:
        if events_table_name != EVENTS_TABLE:  # the migrations' tables, longhaul_append's among them
            raise ValueError(
                f"the events table is {EVENTS_TABLE!r} (the migrations'), not {events_table_name!r}"
            )
        super().__init__(datastore, events_table_name=events_table_name)
        # One NOTIFY channel per schema: idle workers of other deployments (or tests) sharing the
        # database are not woken by this one's appends.
        self.channel_name = f"{datastore.schema}.{self.channel_name}"[: self.MAX_IDENTIFIER_LEN]
        self.run_queue_table = RUN_QUEUE_TABLE
        self.task_keys = PostgresTaskKeys(datastore)
        """The tasks' secret keys (``store.secrets.task_keys``), written in the append transaction."""
        self.snapshots_table = events_table_name.removesuffix("_events") + "_snapshots"
        schema = Identifier(datastore.schema)
        self.chain_table = CHAIN_TABLE
        chain = Identifier(self.chain_table)
        self._select_links = (
            SQL(
                "SELECT c.task_id, c.hash FROM {}.{} c"
                " JOIN unnest(%b::uuid[], %b::bigint[]) AS k(id, version)"
                " ON c.task_id = k.id AND c.version = k.version"
            )
            .format(schema, chain)
            .as_string()
        )
        self._append = (
            SQL(
                "SELECT n, lost FROM {}.longhaul_append(%b, %b, %b, %b::uuid[], %b::bigint[], %b::text[],"
                " %b::bytea[], %b::uuid[], %b::bigint[], %b::bytea[], %b::uuid[], %b::bigint[], %b::text[],"
                " %b::text[], %b::text[], %b::int[], %b::int[], %b::text[], %b::timestamptz[],"
                " %b::timestamptz[], %b::timestamptz[], %b::boolean[], %b::uuid[], %b::text[], %b::text[],"
                " %b::bytea[], %b::uuid[])"
            )
            .format(schema)
            .as_string()
        )
        """The append (``%b``: every argument in binary, no text escaping of the events' bytes).

        Each statement is rendered to text once here: psycopg renders a ``Composed`` again on
        every execute."""
        self._task_notifications = (
            SQL(
                "SELECT notification_id, originator_id, originator_version, topic, state FROM {}.{}"
                " WHERE originator_id = %s AND originator_version > %s AND originator_version <= %s"
                " ORDER BY originator_version LIMIT %s"
            )
            .format(schema, Identifier(self.events_table_name))
            .as_string()
        )
        self._notifications_after = (
            SQL(
                "SELECT notification_id, originator_id, originator_version, topic, state FROM {}.{}"
                " WHERE notification_id > %s ORDER BY notification_id LIMIT %s"
            )
            .format(schema, Identifier(self.events_table_name))
            .as_string()
        )
        """The log after a position, as every follower reads it (``select_notifications``)."""
        self._rendered: dict[str, str] = {}
        """The run-queue reads' texts (``_query``), each rendered on its first use."""
        self._histories: str | None = None
        """The batch load's text (``select_histories``), rendered on its first use."""
        self._heads: OrderedDict[UUID, tuple[int, bytes]] = OrderedDict()
        self._heads_lock = threading.Lock()

    @retry((InterfaceError, OperationalError), max_attempts=10, wait=0.2)
    def insert_events(self, stored_events: Sequence[StoredEvent], **kwargs: Any) -> Sequence[int] | None:
        """Append the events, their chain hashes, run-queue rows and task keys: one statement.

        The statement is a call of ``longhaul_append`` (migration 0010) in autocommit: it takes
        the library's table lock, inserts, and commits on the server, so the lock is never held
        across a client round trip. A read before it, outside the lock, fetches the hashes the
        chain continues from when this process did not write them itself. The retry is the
        library's own (its ``insert_events`` has it too). A lost race raises the library's
        ``IntegrityError``; nothing was written then.
        """
        rows = _latest_rows(kwargs.get("run_queue", ()))
        keys = KeyChanges.of(kwargs)
        if not stored_events and not rows and not keys.new and not keys.destroyed:
            return None
        return self._call_append(stored_events, rows, keys, keep_others=False).ids

    @retry((InterfaceError, OperationalError), max_attempts=10, wait=0.2)
    def insert_events_each(self, stored_events: Sequence[StoredEvent], **kwargs: Any) -> EachAppended:
        """``insert_events`` for a group of tasks, keeping the tasks that did not lose a race.

        One statement as well (``longhaul_append`` with ``keep_others``): the tasks someone
        appended to first (or gave a key first) are left out, nothing of theirs is written, and
        the others are appended together. Returns their notification ids and the lost tasks. A
        race the statement cannot see before the lock (a new task submitted twice at once) still
        raises the library's ``IntegrityError``, and nothing was written.
        """
        rows = _latest_rows(kwargs.get("run_queue", ()))
        return self._call_append(stored_events, rows, KeyChanges.of(kwargs), keep_others=True)

    def _call_append(
        self,
        stored_events: Sequence[StoredEvent],
        rows: Sequence[RunQueueRow],
        keys: KeyChanges,
        *,
        keep_others: bool,
    ) -> EachAppended:
        with self.datastore.get_connection() as conn, conn.cursor() as curs:
            links = self._chain_links(curs, stored_events)
            params = (keep_others, *self._append_params(stored_events, links, rows, keys))
            curs.execute(self._append, params, prepare=True)
            found = curs.fetchall()
        lost = frozenset(row["lost"] for row in found if row["lost"] is not None)
        ids: list[int] = [row["n"] for row in found if row["n"] is not None]
        kept = [e for e in stored_events if task_uuid(e.originator_id) not in lost]
        if len(ids) != len(kept):
            raise ProgrammingError(f"got {len(ids)} notification ids for {len(kept)} events")
        with self._heads_lock:  # committed: the next commit of these tasks needs no read
            for task_id, version, digest in links:
                if task_id in lost:
                    continue
                self._heads[task_id] = (version, digest)
                self._heads.move_to_end(task_id)
            while len(self._heads) > CHAIN_HEADS_KEPT:
                self._heads.popitem(last=False)
        return EachAppended(ids=ids, lost=lost)

    def _append_params(
        self,
        stored_events: Sequence[StoredEvent],
        links: Sequence[Link],
        rows: Sequence[RunQueueRow],
        keys: KeyChanges,
    ) -> tuple[Any, ...]:
        """The arguments of ``longhaul_append``, in its order: one array per column."""
        return (
            f"{self.datastore.lock_timeout}s",
            self.channel_name,
            uuids([e.originator_id for e in stored_events]),
            int8s([e.originator_version for e in stored_events]),
            texts([e.topic for e in stored_events]),
            byteas([e.state for e in stored_events]),
            uuids([t for t, _, _ in links]),
            int8s([v for _, v, _ in links]),
            byteas([h for _, _, h in links]),
            uuids([r.task_id for r in rows]),
            int8s([r.version for r in rows]),
            texts([r.tenant for r in rows]),
            texts([r.state for r in rows]),
            texts([r.skill for r in rows]),
            int4s([r.skill_version for r in rows]),
            int4s([r.next_step for r in rows]),
            texts([r.lease_owner for r in rows]),
            timestamptzs([r.lease_until for r in rows]),
            timestamptzs([r.deadline for r in rows]),
            timestamptzs([r.updated_at for r in rows]),
            bools([r.expired for r in rows]),
            uuids([k.task_id for k in keys.new]),
            texts([k.tenant for k in keys.new]),
            texts([k.key_id for k in keys.new]),
            byteas([k.key for k in keys.new]),
            uuids(list(keys.destroyed)),
        )

    def _chain_links(self, curs: Cursor[DictRow], stored_events: Sequence[StoredEvent]) -> list[Link]:
        """The chain rows of ``stored_events``: each task's new events chained to its last hash."""
        by_task: dict[UUID, list[StoredEvent]] = {}
        for event in stored_events:
            by_task.setdefault(task_uuid(event.originator_id), []).append(event)
        previous: dict[UUID, bytes] = {}
        wanted: dict[UUID, int] = {}
        with self._heads_lock:
            for task_id, events in by_task.items():
                events.sort(key=lambda e: e.originator_version)
                before = events[0].originator_version - 1
                head = self._heads.get(task_id)
                if before == 0:
                    previous[task_id] = GENESIS
                elif head is not None and head[0] == before:
                    previous[task_id] = head[1]
                else:
                    wanted[task_id] = before
        if wanted:
            curs.execute(
                self._select_links, (uuids(list(wanted)), int8s(list(wanted.values()))), prepare=True
            )
            previous.update((row["task_id"], bytes(row["hash"])) for row in curs.fetchall())
        links: list[Link] = []
        unchained = [task_id for task_id in wanted if task_id not in previous]
        if unchained:
            links += self._chain_unchained(curs, {t: wanted[t] for t in unchained}, previous)
        for task_id, events in by_task.items():
            digest = previous[task_id]
            for event in events:
                digest = chain_hash(task_id, event.originator_version, event.topic, event.state, digest)
                links.append((task_id, event.originator_version, digest))
        return links

    def _chain_unchained(
        self, curs: Cursor[DictRow], up_to: dict[UUID, int], previous: dict[UUID, bytes]
    ) -> list[Link]:
        """Chain the events before a new one that have no hash (stored by a release before chains).

        Only events that an older release appended while this one migrated have none; they are
        chained here, from each task's last stored hash, in the same transaction, with a warning.
        """
        curs.execute(
            SQL(
                "SELECT e.originator_id, e.originator_version, e.topic, e.state, c.hash FROM {}.{} e"
                " JOIN unnest(%s::uuid[], %s::bigint[]) AS k(id, up_to)"
                " ON e.originator_id = k.id AND e.originator_version <= k.up_to"
                " LEFT JOIN {}.{} c ON c.task_id = e.originator_id AND c.version = e.originator_version"
                " ORDER BY e.originator_id, e.originator_version"
            ).format(
                Identifier(self.datastore.schema),
                Identifier(self.events_table_name),
                Identifier(self.datastore.schema),
                Identifier(self.chain_table),
            ),
            (list(up_to), list(up_to.values())),
        )
        links: list[Link] = []
        for row in curs.fetchall():
            task_id, version = row["originator_id"], row["originator_version"]
            digest = GENESIS if version == 1 else previous.get(task_id, GENESIS)
            if row["hash"] is not None:
                previous[task_id] = bytes(row["hash"])
                continue
            previous[task_id] = chain_hash(task_id, version, row["topic"], bytes(row["state"]), digest)
            links.append((task_id, version, previous[task_id]))
        for task_id in up_to:
            previous.setdefault(task_id, GENESIS)
        if links:
            log.warning(
                "chained %d events stored without a chain hash (by a release before chains?), of tasks %s",
                len(links),
                ", ".join(sorted({str(t) for t, _, _ in links})),
            )
        return links

    # ------------------------------------------------------------------ queries

    def select_notifications(
        self,
        start: int | None,
        limit: int,
        stop: int | None = None,
        topics: Sequence[str] = (),
        *,
        inclusive_of_start: bool = True,
    ) -> Sequence[Notification]:
        """The library's read of the log, its followers' form in a statement rendered once.

        Every commit costs each process's shared log one read from a position (ADR 0051), for
        which the library composes and renders its statement anew each time. Reads with a
        ``stop`` or ``topics`` go to the library as they are.
        """
        if start is None or stop is not None or topics:
            found: Sequence[Notification] = super().select_notifications(
                start, limit, stop, topics, inclusive_of_start=inclusive_of_start
            )
        else:
            found = self._notifications_from(start - 1 if inclusive_of_start else start, limit)
        return found

    @retry((InterfaceError, OperationalError), max_attempts=10, wait=0.2)
    def _notifications_from(self, after: int, limit: int) -> list[Notification]:
        rows = read_statement(self.datastore, self._notifications_after, (after, limit))
        return [_notification(row) for row in rows]

    def _query(self, sql: str, params: Sequence[Any]) -> list[DictRow]:
        """One read of the run queue (``read_statement``: one round trip), its text rendered once."""
        statement = self._rendered.get(sql)
        if statement is None:
            statement = self._rendered[sql] = (
                SQL(sql)
                .format(schema=Identifier(self.datastore.schema), table=Identifier(self.run_queue_table))
                .as_string()
            )
        return read_statement(self.datastore, statement, params)

    def claimable(self, now: datetime, limit: int, skills: Sequence[tuple[str, int]]) -> list[UUID]:
        """Tasks a worker may claim at ``now`` (see ``RunQueue.claimable``)."""
        names, versions = _split(skills)
        rows = self._query(
            "SELECT task_id FROM {schema}.{table} WHERE state IN (" + RUNNABLE_SQL + ")"
            " AND (lease_until IS NULL OR lease_until <= %s)"
            " AND (skill, skill_version) IN (SELECT * FROM unnest(%s::text[], %s::int[]))"
            " ORDER BY lease_until NULLS FIRST, updated_at LIMIT %s",
            (now, names, versions, limit),
        )
        return [r["task_id"] for r in rows]

    def next_lease_end(self, skills: Sequence[tuple[str, int]]) -> datetime | None:
        """The earliest lease end among runnable tasks of ``skills`` (when a claim may be next)."""
        names, versions = _split(skills)
        rows = self._query(
            "SELECT min(lease_until) AS t FROM {schema}.{table} WHERE state IN (" + RUNNABLE_SQL + ")"
            " AND (skill, skill_version) IN (SELECT * FROM unnest(%s::text[], %s::int[]))",
            (names, versions),
        )
        return rows[0]["t"] if rows else None

    def due_pauses(self, now: datetime, limit: int) -> list[UUID]:
        """Paused tasks whose deadline passed at ``now``."""
        rows = self._query(
            "SELECT task_id FROM {schema}.{table} WHERE state IN (" + PAUSED_SQL + ")"
            " AND deadline <= %s ORDER BY deadline LIMIT %s",
            (now, limit),
        )
        return [r["task_id"] for r in rows]

    def due_expiries(
        self, ended_before: datetime, limit: int, *, after: tuple[datetime, UUID] | None = None
    ) -> list[UUID]:
        """Terminal, not yet expired tasks that ended at or before ``ended_before``."""
        since, after_id = after if after is not None else (None, None)
        rows = self._query(
            "SELECT task_id FROM {schema}.{table} WHERE state IN (" + TERMINAL_SQL + ")"
            " AND NOT expired AND updated_at <= %s"
            " AND (%s::timestamptz IS NULL OR (updated_at, task_id) > (%s::timestamptz, %s::uuid))"
            " ORDER BY updated_at, task_id LIMIT %s",
            (ended_before, since, since, after_id, limit),
        )
        return [r["task_id"] for r in rows]

    def live_versions(self) -> list[tuple[str, int, int]]:
        """``(skill, version, live task count)`` for every version non-terminal tasks use."""
        rows = self._query(
            "SELECT skill, skill_version, count(*) AS n FROM {schema}.{table}"
            " WHERE state NOT IN (" + TERMINAL_SQL + ") GROUP BY skill, skill_version"
            " ORDER BY skill, skill_version",
            (),
        )
        return [(r["skill"], r["skill_version"], r["n"]) for r in rows]

    def live_tasks_of(self, skill: str, version: int, limit: int = 20) -> list[UUID]:
        """Some non-terminal tasks pinned to ``skill`` at ``version``."""
        rows = self._query(
            "SELECT task_id FROM {schema}.{table} WHERE skill = %s AND skill_version = %s"
            " AND state NOT IN (" + TERMINAL_SQL + ") ORDER BY updated_at LIMIT %s",
            (skill, version, limit),
        )
        return [r["task_id"] for r in rows]

    def state_counts(self) -> dict[str, int]:
        """``state -> task count`` of the tasks not expired."""
        rows = self._query(
            "SELECT state, count(*) AS n FROM {schema}.{table} WHERE NOT expired GROUP BY state", ()
        )
        return {r["state"]: r["n"] for r in rows}

    def row(self, task_id: UUID) -> RunQueueRow | None:
        """The stored row of one task."""
        rows = self._query("SELECT * FROM {schema}.{table} WHERE task_id = %s", (task_id,))
        return RunQueueRow(**rows[0]) if rows else None

    def owners(self, task_ids: Sequence[UUID]) -> dict[UUID, tuple[str, str | None]]:
        """``task_id -> (state, lease owner)`` for ``task_ids``: one query for a worker's watch."""
        rows = self._query(
            "SELECT task_id, state, lease_owner FROM {schema}.{table} WHERE task_id = ANY(%s)",
            (list(task_ids),),
        )
        return {r["task_id"]: (r["state"], r["lease_owner"]) for r in rows}

    def tenants(self, task_ids: Sequence[UUID]) -> dict[UUID, str]:
        """``task_id -> tenant`` for ``task_ids`` (the relay builds subjects from it)."""
        rows = self._query(
            "SELECT task_id, tenant FROM {schema}.{table} WHERE task_id = ANY(%s)", (list(task_ids),)
        )
        return {r["task_id"]: r["tenant"] for r in rows}

    def select_histories(self, task_ids: Sequence[UUID]) -> dict[UUID, StoredHistory]:
        """Each task's latest snapshot and the events after it, for all of ``task_ids``.

        One statement (``read_statement``): one round trip, and one snapshot of the database for
        the snapshots and the events, where a transaction of two statements took four.
        """
        ids = list(dict.fromkeys(task_ids))
        if not ids:
            return {}
        if self._histories is None:
            self._histories = (
                SQL(
                    "WITH s AS (SELECT DISTINCT ON (originator_id) originator_id, originator_version, topic,"
                    " state FROM {schema}.{snapshots} WHERE originator_id = ANY(%s)"
                    " ORDER BY originator_id, originator_version DESC)"
                    " SELECT true AS snapshot, originator_id, originator_version, topic, state FROM s"
                    " UNION ALL"
                    " SELECT false, e.originator_id, e.originator_version, e.topic, e.state"
                    " FROM unnest(%s::uuid[]) AS k(id) JOIN {schema}.{events} e ON e.originator_id = k.id"
                    " AND e.originator_version > coalesce("
                    "(SELECT s.originator_version FROM s WHERE s.originator_id = k.id), 0)"
                    " ORDER BY 2, 3"
                )
                .format(
                    schema=Identifier(self.datastore.schema),
                    snapshots=Identifier(self.snapshots_table),
                    events=Identifier(self.events_table_name),
                )
                .as_string()
            )
        snapshots: dict[UUID, StoredEvent] = {}
        events: dict[UUID, list[StoredEvent]] = {}
        for row in read_statement(self.datastore, self._histories, (ids, ids)):
            if row["snapshot"]:
                snapshots[row["originator_id"]] = _stored(row)
            else:
                events.setdefault(row["originator_id"], []).append(_stored(row))
        return {
            task_id: StoredHistory(snapshot=snapshots.get(task_id), events=events.get(task_id, []))
            for task_id in ids
            if task_id in snapshots or task_id in events
        }

    def task_notifications(
        self, task_id: UUID, *, after: int, up_to: int | None = None, limit: int = 500
    ) -> list[Notification]:
        """The events of one task with versions in (``after``, ``up_to``], with their log positions.

        In version order, at most ``limit`` of them: the gateway's task feed catches up from
        here on what NATS did not bring (one primary-key range).
        """
        rows = read_statement(
            self.datastore,
            self._task_notifications,
            (task_id, after, up_to if up_to is not None else 2**62, limit),
        )
        return [_notification(row) for row in rows]

    # ------------------------------------------------------------------ archive and purge

    def expired_tasks(self, limit: int, *, after: UUID | None = None) -> list[tuple[UUID, str]]:
        """``(task_id, tenant)`` of expired tasks, by id, after ``after`` (a page cursor).

        Scans the run queue (no index serves it): for ``longhaul archive``, not for a hot path.
        """
        rows = self._query(
            "SELECT task_id, tenant FROM {schema}.{table} WHERE expired"
            " AND (%s::uuid IS NULL OR task_id > %s::uuid) ORDER BY task_id LIMIT %s",
            (after, after, limit),
        )
        return [(r["task_id"], r["tenant"]) for r in rows]

    def purge(
        self,
        task_id: UUID,
        *,
        version: int,
        archive_file: str,
        purged_at: datetime,
        also: Sequence[str] = (),
        then: Sequence[tuple[Composed, Sequence[Any]]] = (),
    ) -> bool:
        """Delete one task's events, snapshots, chain hashes and run-queue row, in one transaction.

        Only if its last event is still at ``version`` (what was archived); ``also`` names more
        tables of the schema with a ``task_id`` column whose row goes in the same transaction
        (the current-task view), and ``then`` more statements it runs (its files let go of,
        ``store.evidence.file_retention``). The same transaction records the task as purged, with its last
        version and the archive file that holds it (``store.evidence.merkle_log.PURGED_TABLE``: its leaves
        stay in the Merkle tree, and ``verify`` takes their events' absence for a purge). Returns
        whether the task was purged.
        """
        schema = Identifier(self.datastore.schema)
        with self.datastore.transaction(commit=True) as curs:
            curs.execute(
                SQL("SELECT max(originator_version) AS v FROM {}.{} WHERE originator_id = %s").format(
                    schema, Identifier(self.events_table_name)
                ),
                (task_id,),
            )
            found = curs.fetchall()
            if not found or found[0]["v"] != version:
                return False
            for table, column in (
                (self.events_table_name, "originator_id"),
                (self.snapshots_table, "originator_id"),
                (self.run_queue_table, "task_id"),
                (self.chain_table, "task_id"),
                *((name, "task_id") for name in also),
            ):
                curs.execute(
                    SQL("DELETE FROM {}.{} WHERE {} = %s").format(
                        schema, Identifier(table), Identifier(column)
                    ),
                    (task_id,),
                )
            curs.execute(
                SQL(
                    "INSERT INTO {}.{} (task_id, last_version, archive_file, purged_at)"
                    " VALUES (%s, %s, %s, %s)"
                    " ON CONFLICT (task_id) DO UPDATE SET last_version = excluded.last_version,"
                    " archive_file = excluded.archive_file, purged_at = excluded.purged_at"
                ).format(schema, Identifier(PURGED_TABLE)),
                (task_id, version, archive_file, purged_at),
            )
            for statement, params in then:
                curs.execute(statement, params)
        return True

    # ------------------------------------------------------------------ chains

    def chained_task_ids(self, limit: int, *, after: UUID | None = None) -> list[UUID]:
        """Ids of tasks with events or chain rows, in id order, after ``after`` (a page cursor).

        Two ranges of the primary keys of the events and the chain table.
        """
        schema = Identifier(self.datastore.schema)
        since = SQL("WHERE originator_id > %s") if after is not None else SQL("")
        chain_since = SQL("WHERE task_id > %s") if after is not None else SQL("")
        params = (after,) if after is not None else ()
        with read_transaction(self.datastore) as curs:
            curs.execute(
                SQL(
                    "SELECT id FROM ((SELECT DISTINCT originator_id AS id FROM {}.{} {} ORDER BY 1 LIMIT %s)"
                    " UNION (SELECT DISTINCT task_id FROM {}.{} {} ORDER BY 1 LIMIT %s)) ids"
                    " ORDER BY id LIMIT %s"
                ).format(
                    schema,
                    Identifier(self.events_table_name),
                    since,
                    schema,
                    Identifier(self.chain_table),
                    chain_since,
                ),
                (*params, limit, *params, limit, limit),
            )
            return [row["id"] for row in curs.fetchall()]

    def chain_rows(self, task_ids: Sequence[UUID]) -> dict[UUID, list[ChainRow]]:
        """Each task's events and chain hashes, joined by version (either may be missing), in order."""
        ids = list(task_ids)
        schema = Identifier(self.datastore.schema)
        with read_transaction(self.datastore) as curs:
            curs.execute(
                SQL(
                    "SELECT coalesce(e.originator_id, c.task_id) AS task_id,"
                    " coalesce(e.originator_version, c.version) AS version, e.topic, e.state, c.hash"
                    " FROM (SELECT * FROM {}.{} WHERE originator_id = ANY(%s)) e"
                    " FULL JOIN (SELECT * FROM {}.{} WHERE task_id = ANY(%s)) c"
                    " ON c.task_id = e.originator_id AND c.version = e.originator_version"
                    " ORDER BY 1, 2"
                ).format(schema, Identifier(self.events_table_name), schema, Identifier(self.chain_table)),
                (ids, ids),
            )
            found: dict[UUID, list[ChainRow]] = {}
            for row in curs.fetchall():
                found.setdefault(row["task_id"], []).append(
                    ChainRow(
                        version=row["version"],
                        topic=row["topic"],
                        state=None if row["state"] is None else bytes(row["state"]),
                        chain=None if row["hash"] is None else bytes(row["hash"]),
                    )
                )
        return found

    def chained_histories(self, page: int = 200) -> Iterator[tuple[UUID, list[ChainRow]]]:
        """Every task's ``chain_rows``, by task id, a page of tasks per query (for ``verify``)."""
        after: UUID | None = None
        while True:
            ids = self.chained_task_ids(page, after=after)
            rows = self.chain_rows(ids)
            for task_id in ids:
                yield task_id, rows.get(task_id, [])
            if len(ids) < page:
                return
            after = ids[-1]

    # ------------------------------------------------------------------ wake-ups

    async def follow_appends(self, event: asyncio.Event) -> None:
        """``LISTEN`` on the channel every append NOTIFYs (delivered at commit); reconnect on failure.

        The listening connection is one of its own, outside the pool, with the pool's parameters.
        """
        backoff = 0.1
        conninfo = self._conninfo()
        while True:
            try:
                async with await psycopg.AsyncConnection.connect(conninfo, autocommit=True) as conn:
                    await conn.execute(SQL("LISTEN {}").format(Identifier(self.channel_name)))
                    backoff = 0.1
                    event.set()  # anything may have happened while we were not listening
                    await _each_notify(conn, event.set)
            except asyncio.CancelledError:
                raise
            except Exception as error:  # noqa: BLE001 - any failure: reconnect with backoff
                log.warning("LISTEN %s failed (%r); retrying in %.1fs", self.channel_name, error, backoff)
                event.set()
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 5.0)

    def _conninfo(self) -> str:
        pool = self.datastore.pool
        kwargs = dict(pool.kwargs() if callable(pool.kwargs) else (pool.kwargs or {}))
        kwargs.pop("row_factory", None)
        base = pool.conninfo() if callable(pool.conninfo) else pool.conninfo
        return make_conninfo(base, **kwargs)


async def _each_notify(conn: psycopg.AsyncConnection[Any], notified: Callable[[], None]) -> None:
    """Call ``notified`` once per NOTIFY that reaches ``conn``, until the connection fails (raises).

    The socket is watched for as long as the connection lives, where ``AsyncConnection.notifies``
    adds and removes its reader, makes a future and sets a timer for every NOTIFY (ADR 0052).
    """
    pgconn = conn.pgconn
    loop = asyncio.get_running_loop()
    lost: asyncio.Future[None] = loop.create_future()

    def readable() -> None:
        try:
            pgconn.consume_input()
        except psycopg.Error as error:  # the server closed it, or the network failed
            if not lost.done():
                lost.set_exception(error)
            return
        while pgconn.notifies() is not None:
            notified()

    socket = pgconn.socket
    loop.add_reader(socket, readable)
    try:
        await lost
    finally:
        loop.remove_reader(socket)


async def select_events_at(
    conn: psycopg.AsyncConnection[Any], schema: str, table: str, keys: Sequence[tuple[UUID, int]]
) -> dict[tuple[UUID, int], StoredEvent]:
    """The stored events at ``(task id, version)`` of ``keys``, in one query (missing ones left out).

    On an async connection in autocommit (the dispatcher's intake, which reads a batch's config
    changes with it): one round trip, no thread hop and no transaction around a single read.
    """
    if not keys:
        return {}
    cursor = conn.cursor(row_factory=dict_row)
    await cursor.execute(
        SQL(
            "SELECT e.originator_id, e.originator_version, e.topic, e.state FROM {}.{} e"
            " JOIN unnest(%b::uuid[], %b::bigint[]) AS k(id, version)"
            " ON e.originator_id = k.id AND e.originator_version = k.version"
        ).format(Identifier(schema), Identifier(table)),
        (uuids([k[0] for k in keys]), int8s([k[1] for k in keys])),
    )
    return {
        (row["originator_id"], row["originator_version"]): _stored(row) for row in await cursor.fetchall()
    }


def _notification(row: Any) -> Notification:
    """A row of the events table as the library's ``Notification`` (its position and stored event)."""
    return Notification(
        id=row["notification_id"],
        originator_id=row["originator_id"],
        originator_version=row["originator_version"],
        topic=row["topic"],
        state=bytes(row["state"]),
    )


def _stored(row: Any) -> StoredEvent:
    return StoredEvent(
        originator_id=row["originator_id"],
        originator_version=row["originator_version"],
        topic=row["topic"],
        state=bytes(row["state"]),
    )


def _latest_rows(rows: Sequence[RunQueueRow]) -> list[RunQueueRow]:
    """One row per task, its highest version (one statement cannot upsert a row twice).

    In task-id order: every append locks the rows of its tasks in the same order, so two appends
    of overlapping groups never wait for each other in a circle.
    """
    latest: dict[UUID, RunQueueRow] = {}
    for row in rows:
        if row.task_id not in latest or latest[row.task_id].version < row.version:
            latest[row.task_id] = row
    return [latest[task_id] for task_id in sorted(latest)]


def _split(skills: Sequence[tuple[str, int]]) -> tuple[list[str], list[int]]:
    return [name for name, _ in skills], [version for _, version in skills]

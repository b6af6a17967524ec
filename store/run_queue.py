"""The run queue: an inline view written in the same transaction as the events it derives from.

One row per task holds what workers and the sweeper search by: state, lease end, pause deadline,
skill version. Because the row is written by the same ``INSERT`` transaction that appends the
task's events (and only when that append succeeds), it can never disagree with the log. Claims
and deadline sweeps are index lookups on partial indexes, so their cost does not grow with the
number of paused or finished tasks.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

from eventsourcing.persistence import StoredEvent
from eventsourcing.postgres import PostgresApplicationRecorder, PostgresDatastore
from psycopg import Cursor
from psycopg.rows import DictRow
from psycopg.sql import SQL, Identifier

from domain.states import INTERRUPTED, RUNNABLE, TERMINAL
from domain.task import Task

RUNNABLE_SQL = ", ".join(f"'{s}'" for s in sorted(RUNNABLE))
PAUSED_SQL = ", ".join(f"'{s}'" for s in sorted(INTERRUPTED))
TERMINAL_SQL = ", ".join(f"'{s}'" for s in sorted(TERMINAL))


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
            updated_at=task.modified_on,
            expired=task.expired,
        )


class RunQueueRecorder(PostgresApplicationRecorder):
    """The application recorder that also keeps the run queue, inside the append transaction."""

    def __init__(self, datastore: PostgresDatastore, *, events_table_name: str = "stored_events") -> None:
        super().__init__(datastore, events_table_name=events_table_name)
        # One NOTIFY channel per schema: idle workers of other deployments (or tests) sharing the
        # database are not woken by this one's appends.
        self.channel_name = f"{datastore.schema}.{self.channel_name}"[: self.MAX_IDENTIFIER_LEN]
        self.run_queue_table = events_table_name.replace("_events", "") + "_run_queue"
        self.check_identifier_length(self.run_queue_table)
        schema, table = Identifier(datastore.schema), Identifier(self.run_queue_table)
        self.sql_create_statements.extend(
            [
                SQL(
                    "CREATE TABLE IF NOT EXISTS {schema}.{table} ("
                    " task_id uuid PRIMARY KEY,"
                    " version bigint NOT NULL,"
                    " tenant text NOT NULL,"
                    " state text NOT NULL,"
                    " skill text NOT NULL,"
                    " skill_version int NOT NULL,"
                    " next_step int NOT NULL,"
                    " lease_owner text,"
                    " lease_until timestamptz,"
                    " deadline timestamptz,"
                    " updated_at timestamptz NOT NULL,"
                    " expired boolean NOT NULL DEFAULT false)"
                ).format(schema=schema, table=table),
                SQL(
                    "CREATE INDEX IF NOT EXISTS {index} ON {schema}.{table} "
                    "(lease_until NULLS FIRST, updated_at) WHERE state IN (" + RUNNABLE_SQL + ")"
                ).format(index=Identifier(self.run_queue_table + "_claim"), schema=schema, table=table),
                SQL(
                    "CREATE INDEX IF NOT EXISTS {index} ON {schema}.{table} "
                    "(deadline) WHERE state IN (" + PAUSED_SQL + ")"
                ).format(index=Identifier(self.run_queue_table + "_deadline"), schema=schema, table=table),
                SQL(
                    "CREATE INDEX IF NOT EXISTS {index} ON {schema}.{table} "
                    "(updated_at) WHERE state IN (" + TERMINAL_SQL + ") AND NOT expired"
                ).format(index=Identifier(self.run_queue_table + "_retention"), schema=schema, table=table),
                SQL(
                    "CREATE INDEX IF NOT EXISTS {index} ON {schema}.{table} "
                    "(skill, skill_version) WHERE state NOT IN (" + TERMINAL_SQL + ")"
                ).format(index=Identifier(self.run_queue_table + "_live"), schema=schema, table=table),
            ]
        )
        self._upsert = SQL(
            "INSERT INTO {schema}.{table} (task_id, version, tenant, state, skill, skill_version,"
            " next_step, lease_owner, lease_until, deadline, updated_at, expired)"
            " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"
            " ON CONFLICT (task_id) DO UPDATE SET version = EXCLUDED.version,"
            " state = EXCLUDED.state, next_step = EXCLUDED.next_step,"
            " lease_owner = EXCLUDED.lease_owner, lease_until = EXCLUDED.lease_until,"
            " deadline = EXCLUDED.deadline, updated_at = EXCLUDED.updated_at,"
            " expired = EXCLUDED.expired"
            " WHERE {table}.version < EXCLUDED.version"
        ).format(schema=schema, table=table)

    def _insert_events(
        self, curs: Cursor[DictRow], stored_events: Sequence[StoredEvent], **kwargs: Any
    ) -> None:
        rows: Sequence[RunQueueRow] = kwargs.get("run_queue", ())
        if rows:
            curs.executemany(
                self._upsert,
                [
                    (
                        r.task_id,
                        r.version,
                        r.tenant,
                        r.state,
                        r.skill,
                        r.skill_version,
                        r.next_step,
                        r.lease_owner,
                        r.lease_until,
                        r.deadline,
                        r.updated_at,
                        r.expired,
                    )
                    for r in rows
                ],
            )
        super()._insert_events(curs, stored_events, **kwargs)

    # ------------------------------------------------------------------ queries

    def _query(self, sql: str, params: Sequence[Any]) -> list[DictRow]:
        statement = SQL(sql).format(
            schema=Identifier(self.datastore.schema), table=Identifier(self.run_queue_table)
        )
        with self.datastore.transaction(commit=False) as curs:
            curs.execute(statement, params, prepare=True)
            return curs.fetchall()

    def claimable(self, now: datetime, limit: int, skills: Sequence[tuple[str, int]]) -> list[UUID]:
        """Tasks a worker may claim at ``now``.

        Those are runnable, have no lease or an expired one, and are pinned to one of ``skills``
        (the ``(name, version)`` pairs the worker can run).
        """
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

    def due_expiries(self, ended_before: datetime, limit: int) -> list[UUID]:
        """Terminal, not yet expired tasks whose last change was before ``ended_before``."""
        rows = self._query(
            "SELECT task_id FROM {schema}.{table} WHERE state IN (" + TERMINAL_SQL + ")"
            " AND NOT expired AND updated_at <= %s ORDER BY updated_at LIMIT %s",
            (ended_before, limit),
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


def _split(skills: Sequence[tuple[str, int]]) -> tuple[list[str], list[int]]:
    return [name for name, _ in skills], [version for _, version in skills]

"""The event store: an ``eventsourcing`` Application over PostgreSQL (psycopg 3).

Every save is one transaction that appends the events (version-checked by the
``(originator_id, originator_version)`` primary key) and writes the run-queue rows derived from
them. A lost race surfaces as ``ConflictError`` (reload and retry); the domain's
``LeaseLostError`` is raised by the command itself after a reload, and stops the caller.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar
from urllib.parse import unquote, urlparse
from uuid import UUID

import psycopg
from eventsourcing.application import AggregateNotFoundError, Application, project_aggregate
from eventsourcing.domain import DomainEventProtocol
from eventsourcing.persistence import JSONTranscoder, RecordConflictError, StoredEvent
from eventsourcing.utils import get_topic
from psycopg import sql
from typing_extensions import override

from domain.task import Task
from store.locks import advisory_lock
from store.run_queue import RunQueueRecorder, RunQueueRow
from store.transcodings import register_domain_transcodings

log = logging.getLogger(__name__)

APP_NAME = "longhaul"
SNAPSHOT_INTERVAL = 100


class ConflictError(Exception):
    """Someone appended to one of the saved tasks first. Reload, re-check and retry."""


class TaskNotFoundError(LookupError):
    """No task has this id (in this store)."""


@dataclass(frozen=True)
class StoreConfig:
    """Where the store lives. ``schema`` isolates deployments (and tests) in one database."""

    database_url: str
    schema: str = "public"
    pool_size: int = 5
    max_overflow: int = 10
    lock_timeout_s: int = 5
    cache_size: int = 0


def _stored(row: Any) -> StoredEvent:
    return StoredEvent(
        originator_id=row["originator_id"],
        originator_version=row["originator_version"],
        topic=row["topic"],
        state=bytes(row["state"]),
    )


def postgres_env(config: StoreConfig) -> dict[str, str]:
    """The ``eventsourcing`` environment for ``config``."""
    url = urlparse(config.database_url)
    if url.scheme not in ("postgres", "postgresql"):
        raise ValueError(f"not a PostgreSQL URL: {config.database_url!r}")
    env = {
        "PERSISTENCE_MODULE": "eventsourcing.postgres",
        "APPLICATION_RECORDER_TOPIC": get_topic(RunQueueRecorder),
        "POSTGRES_DBNAME": unquote(url.path.lstrip("/")) or "postgres",
        "POSTGRES_HOST": url.hostname or "127.0.0.1",
        "POSTGRES_PORT": str(url.port or 5432),
        "POSTGRES_USER": unquote(url.username or "postgres"),
        "POSTGRES_PASSWORD": unquote(url.password or ""),
        "POSTGRES_SCHEMA": config.schema,
        "POSTGRES_POOL_SIZE": str(config.pool_size),
        "POSTGRES_MAX_OVERFLOW": str(config.max_overflow),
        "POSTGRES_LOCK_TIMEOUT": str(config.lock_timeout_s),
        "POSTGRES_CONNECT_TIMEOUT": "10",
        "POSTGRES_PRE_PING": "y",
        "IS_SNAPSHOTTING_ENABLED": "y",
    }
    if config.cache_size:
        env["AGGREGATE_CACHE_MAXSIZE"] = str(config.cache_size)
        env["AGGREGATE_CACHE_FASTFORWARD"] = "y"
    return env


def ensure_schema(config: StoreConfig) -> None:
    """Create the store's schema if it is missing (the library expects it to exist)."""
    with psycopg.connect(config.database_url, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(config.schema)))


class TaskStore(Application[UUID]):
    """The Task event store with its inline run queue."""

    name = APP_NAME
    snapshotting_intervals: ClassVar[dict[type[Any], int]] = {Task: SNAPSHOT_INTERVAL}

    def __init__(self, config: StoreConfig) -> None:
        self.config = config
        # Creating the schema and tables is not safe to run twice at once (processes starting
        # together race on CREATE ... IF NOT EXISTS): one process at a time, per schema.
        with advisory_lock(config.database_url, f"longhaul-ddl:{config.schema}"):
            ensure_schema(config)
            super().__init__(env=postgres_env(config))

    @override
    def register_transcodings(self, transcoder: JSONTranscoder) -> None:
        super().register_transcodings(transcoder)
        register_domain_transcodings(transcoder)

    @property
    def run_queue(self) -> RunQueueRecorder:
        """The run-queue view and its queries."""
        recorder = self.recorder
        assert isinstance(recorder, RunQueueRecorder)
        return recorder

    @property
    def recorder_channel(self) -> str:
        """The channel every append NOTIFYs (for ``LISTEN``-based wake-ups)."""
        return self.run_queue.channel_name

    def get(self, task_id: UUID, version: int | None = None) -> Task:
        """Rebuild a task from its snapshot and events (at ``version``, if given)."""
        try:
            task: Task = self.repository.get(task_id, version=version)
        except AggregateNotFoundError as error:
            raise TaskNotFoundError(str(task_id)) from error
        assert isinstance(task, Task)
        return task

    def get_many(self, task_ids: Sequence[UUID]) -> dict[UUID, Task]:
        """Rebuild several tasks with two queries in all (missing ids are left out).

        The queries fetch their latest snapshots, then the events after them: what ``get`` does
        one task at a time.
        """
        ids = list(dict.fromkeys(task_ids))
        if not ids:
            return {}
        schema = sql.Identifier(self.config.schema)
        snapshots_table = sql.Identifier(f"{APP_NAME}_snapshots")
        events_table = sql.Identifier(f"{APP_NAME}_events")
        with self.run_queue.datastore.transaction(commit=False) as curs:
            curs.execute(
                sql.SQL(
                    "SELECT DISTINCT ON (originator_id) originator_id, originator_version, topic, state"
                    " FROM {}.{} WHERE originator_id = ANY(%s)"
                    " ORDER BY originator_id, originator_version DESC"
                ).format(schema, snapshots_table),
                (ids,),
            )
            snapshots = {row["originator_id"]: _stored(row) for row in curs.fetchall()}
            after = [snapshots[i].originator_version if i in snapshots else 0 for i in ids]
            curs.execute(
                sql.SQL(
                    "SELECT e.originator_id, e.originator_version, e.topic, e.state FROM {}.{} e"
                    " JOIN unnest(%s::uuid[], %s::bigint[]) AS s(id, after)"
                    " ON e.originator_id = s.id AND e.originator_version > s.after"
                    " ORDER BY e.originator_id, e.originator_version"
                ).format(schema, events_table),
                (ids, after),
            )
            events: dict[UUID, list[StoredEvent]] = {}
            for row in curs.fetchall():
                events.setdefault(row["originator_id"], []).append(_stored(row))
        assert self.snapshots is not None
        tasks: dict[UUID, Task] = {}
        for task_id in ids:
            history = (
                [self.snapshots.mapper.to_domain_event(snapshots[task_id])] if task_id in snapshots else []
            )
            history += [self.mapper.to_domain_event(e) for e in events.get(task_id, [])]
            task: Task | None = project_aggregate(None, history)
            if task is not None:
                tasks[task_id] = task
        return tasks

    def save_tasks(self, *tasks: Task) -> list[int]:
        """Append every pending event of ``tasks`` in one transaction; returns log positions.

        Raises ``ConflictError`` if another writer appended to any of them first; then nothing
        was written.
        """
        rows = [RunQueueRow.of(t) for t in tasks if t.pending_events]
        try:
            recordings = self.save(*tasks, run_queue=rows)
        except RecordConflictError as error:
            raise ConflictError(str(error)) from error
        return [r.notification.id for r in recordings]

    def save_each(self, *tasks: Task) -> list[Exception | None]:
        """Append the pending events of ``tasks``, grouped in one transaction when possible.

        When the group fails (a conflict, or a task whose events cannot be stored), each task is
        saved alone, so one task's trouble costs no other. Returns, per task, ``None`` (saved)
        or the error that refused it (``ConflictError`` for a lost race).
        """
        batch = [(t, list(t.pending_events), RunQueueRow.of(t)) for t in tasks if t.pending_events]
        try:
            self.save(*tasks, run_queue=[row for _, _, row in batch])
        except Exception as error:  # noqa: BLE001 - split the group up to find who failed
            log.debug("group of %d failed (%r); saving each alone", len(batch), error)
        else:
            return [None] * len(tasks)
        outcome: dict[int, Exception | None] = {}
        for task, events, row in batch:
            try:
                self.save(*events, run_queue=[row])
                outcome[id(task)] = None
            except RecordConflictError as error:
                outcome[id(task)] = ConflictError(str(error))
            except Exception as error:  # noqa: BLE001 - reported to that task's caller
                outcome[id(task)] = error
        return [outcome.get(id(t)) for t in tasks]

    def history(self, task_id: UUID) -> Iterator[DomainEventProtocol[UUID]]:
        """Every event of a task, oldest first."""
        return iter(self.events.get(task_id))

    def close(self) -> None:
        """Release the connection pool."""
        super().close()

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

from eventsourcing.application import AggregateNotFoundError, Application, project_aggregate
from eventsourcing.domain import DomainEventProtocol
from eventsourcing.persistence import RecordConflictError
from eventsourcing.utils import get_topic

from domain.task import Task
from store import migrations
from store.locks import advisory_lock, ddl_lock_name
from store.memory import MemoryFactory, MemoryRunQueueRecorder
from store.migrations import MigrationReport
from store.postgres import PostgresRunQueueRecorder
from store.run_queue import RunQueue, RunQueueRow

log = logging.getLogger(__name__)

APP_NAME = "longhaul"
SNAPSHOT_INTERVAL = 100


class ConflictError(Exception):
    """Someone appended to one of the saved tasks first. Reload, re-check and retry."""


class TaskNotFoundError(LookupError):
    """No task has this id (in this store)."""


@dataclass(frozen=True)
class StoreConfig:
    """A store on PostgreSQL (``store.postgres``), its schema migrated on opening (``store.migrations``).

    ``schema`` isolates deployments (and tests) in one database.
    """

    database_url: str
    schema: str = "public"
    pool_size: int = 5
    max_overflow: int = 10
    lock_timeout_s: int = 5
    cache_size: int = 0


@dataclass(frozen=True)
class MemoryConfig:
    """A store in this process's memory (``store.memory``): nothing outlives it, no other sees it."""

    cache_size: int = 0


def memory_env(config: MemoryConfig) -> dict[str, str]:
    """The ``eventsourcing`` environment for ``config``."""
    env = {"PERSISTENCE_MODULE": get_topic(MemoryFactory), "IS_SNAPSHOTTING_ENABLED": "y"}
    if config.cache_size:
        env["AGGREGATE_CACHE_MAXSIZE"] = str(config.cache_size)
        env["AGGREGATE_CACHE_FASTFORWARD"] = "y"
    return env


def postgres_env(config: StoreConfig) -> dict[str, str]:
    """The ``eventsourcing`` environment for ``config``."""
    url = urlparse(config.database_url)
    if url.scheme not in ("postgres", "postgresql"):
        raise ValueError(f"not a PostgreSQL URL: {config.database_url!r}")
    env = {
        "PERSISTENCE_MODULE": "eventsourcing.postgres",
        "APPLICATION_RECORDER_TOPIC": get_topic(PostgresRunQueueRecorder),
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


class TaskStore(Application[UUID]):
    """The Task event store with its inline run queue."""

    name = APP_NAME
    snapshotting_intervals: ClassVar[dict[type[Any], int]] = {Task: SNAPSHOT_INTERVAL}

    def __init__(self, config: StoreConfig | MemoryConfig) -> None:
        self.config = config
        self.schema_migrations: MigrationReport | None = None
        """What opening the store migrated (``None`` in memory)."""
        if isinstance(config, MemoryConfig):
            super().__init__(env=memory_env(config))
            return
        # Creating and migrating tables is not safe to run twice at once (processes starting
        # together race on DDL): one process at a time, per schema. A schema that a newer release
        # migrated is refused before anything is touched.
        with advisory_lock(config.database_url, ddl_lock_name(config.schema)) as conn:
            migrations.refuse_newer(conn, config.schema)
            migrations.create_schema(conn, config.schema)
            super().__init__(env=postgres_env(config))  # the library creates its own tables
            self.schema_migrations = migrations.migrate(conn, config.schema)

    @property
    def run_queue(self) -> RunQueue:
        """The run-queue view, its queries and the append wake-up."""
        recorder = self.recorder
        assert isinstance(recorder, (PostgresRunQueueRecorder, MemoryRunQueueRecorder))
        return recorder

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

        The recorder fetches their latest snapshots, then the events after them: what ``get``
        does one task at a time (in memory there are no queries to save).
        """
        histories = self.run_queue.select_histories(list(dict.fromkeys(task_ids)))
        assert self.snapshots is not None
        tasks: dict[UUID, Task] = {}
        for task_id, stored in histories.items():
            history = (
                [self.snapshots.mapper.to_domain_event(stored.snapshot)]
                if stored.snapshot is not None
                else []
            )
            history += [self.mapper.to_domain_event(e) for e in stored.events]
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

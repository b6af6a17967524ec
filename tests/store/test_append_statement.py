"""The PostgreSQL append as one statement (``longhaul_append``, migration 0009, ADR 0031).

The events table's lock is taken and released by the server inside that statement, so the log's
order is still the commit order (a reader following ``id > last`` never passes over a late
commit), a lost race still writes nothing of its group, and a group commit is one round trip.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

from domain.task import Task
from store.log.application import TaskApplication
from store.log.config import StoreConfig
from store.log.errors import ConflictError
from store.log.postgres import CHAIN_TABLE, PostgresRunQueueRecorder
from store.secrets.task_keys import TaskKey
from tests.support.tasks import new_task

NOW = datetime(2026, 12, 2, 2, 0, tzinfo=UTC)
WRITERS = 4
COMMITS = 40
GROUP = 4


def _recorder(store: TaskApplication) -> PostgresRunQueueRecorder:
    recorder = store.recorder
    assert isinstance(recorder, PostgresRunQueueRecorder)
    return recorder


def _count(config: StoreConfig, table: str) -> int:
    with psycopg.connect(config.database_url) as conn:
        row = conn.execute(
            sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier(config.schema, table))
        ).fetchone()
    return int(row[0]) if row else 0


def test_concurrent_appends_become_visible_in_log_order(postgres_store: TaskApplication) -> None:
    """Readers following ``id > last`` see every id, each exactly when all lower ones are visible.

    No append here fails, so the ids have no holes: a reader that ever sees an id above the next
    expected one has seen a commit overtake an earlier position (what the lock prevents).
    """
    recorder = _recorder(postgres_store)
    done = threading.Event()
    errors: list[BaseException] = []
    seen: list[int] = []
    overtaken: list[tuple[int, int]] = []

    def write() -> None:
        try:
            for _ in range(COMMITS):
                postgres_store.save_tasks(*[new_task(NOW) for _ in range(GROUP)])
        except BaseException as error:
            errors.append(error)

    def follow() -> None:
        last = 0
        while True:
            finished = done.is_set()
            for notification in recorder.select_notifications(last + 1, 1000):
                if notification.id != last + 1:
                    overtaken.append((last, notification.id))
                seen.append(notification.id)
                last = notification.id
            if finished:
                return

    follower = threading.Thread(target=follow)
    writers = [threading.Thread(target=write) for _ in range(WRITERS)]
    follower.start()
    for thread in writers:
        thread.start()
    for thread in writers:
        thread.join()
    done.set()
    follower.join()
    assert not errors
    assert overtaken == []
    assert seen == list(range(1, WRITERS * COMMITS * GROUP + 1))


def test_a_lost_race_in_a_group_writes_nothing_of_the_group(
    postgres_store: TaskApplication, store_config: StoreConfig
) -> None:
    """Events, chain rows, run-queue rows and keys: all of the group or none of it."""
    raced = new_task(NOW)
    postgres_store.save_tasks(raced)
    stale = postgres_store.get(raced.id)
    winner = postgres_store.get(raced.id)
    winner.grant_lease(worker="w1", now=NOW, until=NOW + timedelta(minutes=5))
    postgres_store.save_tasks(winner)
    before = {t: _count(store_config, t) for t in ("longhaul_events", CHAIN_TABLE, "longhaul_run_queue")}
    stale.grant_lease(worker="w2", now=NOW, until=NOW + timedelta(minutes=5))
    others = [new_task(NOW) for _ in range(3)]
    with pytest.raises(ConflictError):
        postgres_store.save_tasks(*others, stale, new_keys=[TaskKey.new(others[0].id, "acme")])
    after = {t: _count(store_config, t) for t in before}
    assert after == before
    assert _count(store_config, "longhaul_task_keys") == 0
    assert postgres_store.run_queue.row(raced.id) is not None
    assert postgres_store.get(raced.id).lease_owner == "w1"


def test_a_second_key_for_a_task_is_a_lost_race(postgres_store: TaskApplication) -> None:
    task = new_task(NOW)
    postgres_store.save_tasks(task, new_keys=[TaskKey.new(task.id, "acme")])
    again = postgres_store.get(task.id)
    again.grant_lease(worker="w1", now=NOW, until=NOW + timedelta(minutes=5))
    with pytest.raises(ConflictError):
        postgres_store.save_tasks(again, new_keys=[TaskKey.new(task.id, "acme")])
    assert postgres_store.get(task.id).version == task.version


@contextlib.contextmanager
def _traced(recorder: PostgresRunQueueRecorder, path: Path) -> Iterator[list[tuple[str, str]]]:
    """``(direction, message)`` of every protocol message of the recorder's connections meanwhile."""
    messages: list[tuple[str, str]] = []
    original = recorder.datastore.get_connection
    trace = path.open("w", encoding="utf-8")
    fd = trace.fileno()

    @contextlib.contextmanager
    def traced() -> Iterator[Any]:
        with original() as conn:
            conn.pgconn.trace(fd)
            try:
                yield conn
            finally:
                conn.pgconn.untrace()

    recorder.datastore.get_connection = traced  # type: ignore[method-assign]
    try:
        yield messages
    finally:
        recorder.datastore.get_connection = original  # type: ignore[method-assign]
        trace.close()
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
            fields = line.split("\t")
            if len(fields) >= 4:
                messages.append((fields[1], "\t".join(fields[3:])))


def test_a_group_commit_is_one_statement_in_one_round_trip(
    postgres_store: TaskApplication, tmp_path: Path
) -> None:
    """No BEGIN, no LOCK, no COMMIT from the client: the lock never waits for it."""
    recorder = _recorder(postgres_store)
    tasks = [new_task(NOW) for _ in range(8)]
    postgres_store.save_tasks(*tasks)  # the statement is prepared on some connection
    leases: list[tuple[Task, int]] = []
    for task in tasks:
        leases.append((task, task.grant_lease(worker="w1", now=NOW, until=NOW + timedelta(minutes=5))))
    postgres_store.save_each(*tasks)
    for task, epoch in leases:
        task.complete_step(
            epoch=epoch, now=NOW, step=0, checkpoint={}, lease_until=NOW + timedelta(minutes=5)
        )
    with _traced(recorder, tmp_path / "trace") as messages:
        assert postgres_store.save_each(*tasks) == [None] * len(tasks)
    sent = [text for direction, text in messages if direction == "F"]
    assert not [text for text in sent if "BEGIN" in text or "COMMIT" in text or "LOCK" in text]
    executes = [i for i, text in enumerate(sent) if text.startswith("Execute")]
    assert len(executes) == 1  # one statement (a Parse before it if this connection had not prepared it)
    assert [text for text in sent[executes[0] :] if text.startswith("Sync")] == ["Sync"]

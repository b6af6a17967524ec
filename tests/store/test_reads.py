"""Reads keep their connection's prepared statements (``store.log.reads``).

psycopg forgets every statement a connection prepared when a transaction rolls back, and sends
``DEALLOCATE ALL``: a read that ended with ROLLBACK paid one round trip more and planned its
statements again on the next call. Each read here runs six times on a store whose pool holds one
connection; the statements it prepared must still be prepared on that connection afterwards.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from eventsourcing.postgres import PostgresApplicationRecorder

from store.log.application import TaskApplication
from store.log.config import StoreConfig
from store.log.postgres import PostgresRunQueueRecorder
from store.log.reads import read_transaction
from tests.support.tasks import new_task

NOW = datetime(2026, 12, 3, 8, 0, tzinfo=UTC)


@pytest.fixture
def one_connection(store_config: StoreConfig) -> Iterator[TaskApplication]:
    store = TaskApplication(replace(store_config, pool_size=1, max_overflow=0))
    yield store
    store.close()


def _recorder(store: TaskApplication) -> PostgresRunQueueRecorder:
    recorder = store.recorder
    assert isinstance(recorder, PostgresRunQueueRecorder)
    return recorder


def _prepared(store: TaskApplication) -> list[str]:
    """The statements prepared on the pool's one connection."""
    with _recorder(store).datastore.get_connection() as conn:
        rows = conn.execute("SELECT statement FROM pg_prepared_statements").fetchall()
    return [str(row["statement"]) for row in rows]


READS: dict[str, tuple[Callable[[TaskApplication, Any], object], str]] = {
    "claimable": (lambda s, t: s.run_queue.claimable(NOW, 16, [("echo", 1)]), "ORDER BY lease_until"),
    "next_lease_end": (lambda s, t: s.run_queue.next_lease_end([("echo", 1)]), "min(lease_until)"),
    "get_many": (lambda s, t: s.get_many([t.id]), "FROM s WHERE s.originator_id = k.id"),
    "get": (lambda s, t: s.get(t.id), "FROM s WHERE s.originator_id = k.id"),
    "task_notifications": (lambda s, t: _recorder(s).task_notifications(t.id, after=0), "LIMIT"),
    "select_notifications": (
        lambda s, t: _recorder(s).select_notifications(1, 10),
        "WHERE notification_id > $1 ORDER BY notification_id",
    ),
}


@pytest.mark.parametrize("name", sorted(READS))
def test_a_read_keeps_the_statements_it_prepared(one_connection: TaskApplication, name: str) -> None:
    task = new_task(NOW)
    task.grant_lease(worker="w", now=NOW, until=NOW + timedelta(minutes=5))
    one_connection.save_tasks(task)
    read, text = READS[name]
    for _ in range(6):  # psycopg prepares a statement on its 5th execution, or at once with prepare=True
        read(one_connection, task)
    assert any(text in statement for statement in _prepared(one_connection)), _prepared(one_connection)


def test_the_followers_read_of_the_log_gives_what_the_librarys_gives(store: TaskApplication) -> None:
    """``select_notifications`` from a position runs a statement rendered once; every form of the
    call answers as the library's own implementation does."""
    for _ in range(3):
        task = new_task(NOW)
        task.grant_lease(worker="w", now=NOW, until=NOW + timedelta(minutes=5))
        store.save_tasks(task)
    recorder = _recorder(store)
    library = PostgresApplicationRecorder.select_notifications
    calls: list[tuple[int | None, int, dict[str, Any]]] = [
        (start, limit, {"inclusive_of_start": inclusive})
        for start in (0, 1, 3, 6, 7)
        for limit in (1, 2, 10)
        for inclusive in (True, False)
    ]
    calls += [
        (None, 4, {}),
        (2, 10, {"stop": 4}),
        (1, 10, {"topics": [recorder.select_notifications(1, 1)[0].topic]}),
    ]
    for start, limit, options in calls:
        ours = recorder.select_notifications(start, limit, **options)
        assert ours == library(recorder, start, limit, **options), (start, limit, options)
    assert [n.id for n in recorder.select_notifications(3, 2, inclusive_of_start=False)] == [4, 5]
    assert [n.id for n in recorder.select_notifications(3, 2)] == [3, 4]


def test_a_read_transaction_sees_one_snapshot_and_writes_nothing(store: TaskApplication) -> None:
    """Two statements in one read transaction read the same snapshot; a write inside it is
    committed like any other statement would be, so reads are all it is used for."""
    datastore = _recorder(store).datastore
    with read_transaction(datastore) as curs:
        curs.execute("SELECT txid_current_if_assigned() AS x, now() AS t")
        first = curs.fetchone()
        curs.execute("SELECT txid_current_if_assigned() AS x, now() AS t")
        second = curs.fetchone()
    assert first is not None
    assert second is not None
    assert first["t"] == second["t"]  # now() is the transaction's start: one transaction
    assert first["x"] is None
    assert second["x"] is None


ONE_STATEMENT: dict[str, Callable[[TaskApplication, Any], object]] = {
    "claimable": READS["claimable"][0],
    "next_lease_end": READS["next_lease_end"][0],
    "task_notifications": READS["task_notifications"][0],
    "select_notifications": READS["select_notifications"][0],
    "get_many": READS["get_many"][0],
    "get": READS["get"][0],
    "task key": lambda s, t: _recorder(s).task_keys.get(t.id),
}


def _two_statements(store: TaskApplication) -> None:
    with read_transaction(_recorder(store).datastore) as curs:
        curs.execute("SELECT 1")
        curs.execute("SELECT 2")


def _protocol_of(store: TaskApplication, read: Callable[[], object]) -> str:
    """What ``read`` sent and received on the pool's one connection (libpq's trace)."""
    datastore = _recorder(store).datastore
    with tempfile.TemporaryFile("w+") as out:
        with datastore.get_connection() as conn:
            conn.pgconn.trace(out.fileno())
        try:
            read()
        finally:
            with datastore.get_connection() as conn:
                conn.pgconn.untrace()
        out.seek(0)
        return out.read()


@pytest.mark.parametrize("name", sorted(ONE_STATEMENT))
def test_a_read_of_one_statement_is_one_round_trip_without_a_transaction(
    one_connection: TaskApplication, name: str
) -> None:
    task = new_task(NOW)
    task.grant_lease(worker="w", now=NOW, until=NOW + timedelta(minutes=5))
    one_connection.save_tasks(task)
    read = ONE_STATEMENT[name]
    read(one_connection, task)  # prepared now; the traced call is the steady state
    sent = _protocol_of(one_connection, lambda: read(one_connection, task))
    assert "Execute" in sent, sent
    assert '"BEGIN"' not in sent, sent
    assert '"COMMIT"' not in sent, sent
    # The same trace shows a transaction where there is one: a read of two statements.
    both = _protocol_of(one_connection, lambda: _two_statements(one_connection))
    assert '"BEGIN"' in both, both
    assert '"COMMIT"' in both, both

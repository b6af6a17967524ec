"""The chain hash is written with every append, on both recorders, and read cheaply on PostgreSQL."""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from psycopg import sql

from domain.task import Task
from store.evidence.chain import GENESIS, chain_hash, check_task
from store.log.application import TaskApplication
from store.log.config import StoreConfig
from store.log.errors import ConflictError
from store.log.memory import MemoryRunQueueRecorder
from store.log.postgres import CHAIN_TABLE, PostgresRunQueueRecorder
from tests.support.tasks import new_task

START = datetime(2026, 5, 1, 9, 0, tzinfo=UTC)
UNTIL = START + timedelta(minutes=5)


def _recorder(store: TaskApplication) -> PostgresRunQueueRecorder | MemoryRunQueueRecorder:
    recorder = store.recorder
    assert isinstance(recorder, (PostgresRunQueueRecorder, MemoryRunQueueRecorder))
    return recorder


def _step(tasks: list[Task], n: int) -> None:
    for task in tasks:
        task.save_checkpoint(epoch=1, now=START, step=0, checkpoint={"n": n}, lease_until=UNTIL)


def test_every_append_is_chained_to_the_one_before(any_store: TaskApplication) -> None:
    tasks = [new_task(START) for _ in range(5)]
    any_store.save_tasks(*tasks)
    for task in tasks:
        task.grant_lease(worker="w", now=START, until=UNTIL)
    any_store.save_each(*tasks)  # a group commit of five tasks
    for n in range(3):
        _step(tasks, n)
        any_store.save_tasks(*tasks)
    _step(tasks[:1], 9)  # two events of one task in one commit
    tasks[0].complete(epoch=1, now=START, message=None)
    any_store.save_tasks(tasks[0])
    rows = _recorder(any_store).chain_rows([t.id for t in tasks])
    assert {t: len(r) for t, r in rows.items()} == {t.id: t.version for t in tasks}
    for task in tasks:
        assert check_task(task.id, rows[task.id]) == []
        previous = GENESIS
        for row in rows[task.id]:  # recomputed from the stored bytes, from version 1
            assert row.topic is not None
            assert row.state is not None
            previous = chain_hash(task.id, row.version, row.topic, row.state, previous)
            assert row.chain == previous


def test_a_failed_append_writes_no_chain_row(any_store: TaskApplication) -> None:
    task = new_task(START)
    any_store.save_tasks(task)
    rival = any_store.get(task.id)
    task.grant_lease(worker="a", now=START, until=UNTIL)
    rival.grant_lease(worker="b", now=START, until=UNTIL)
    any_store.save_tasks(task)
    with pytest.raises(ConflictError):
        any_store.save_tasks(rival)
    rows = _recorder(any_store).chain_rows([task.id])[task.id]
    assert len(rows) == 2
    assert check_task(task.id, rows) == []


class _Statements:
    """The statements this process sends to PostgreSQL (a spy on psycopg's cursor, passing through)."""

    def __init__(self) -> None:
        self.sent: list[str] = []

    def chain_reads(self) -> int:
        return sum(1 for s in self.sent if s.startswith("SELECT") and CHAIN_TABLE in s)


@pytest.fixture
def statements(monkeypatch: pytest.MonkeyPatch) -> _Statements:
    spy = _Statements()
    execute = psycopg.Cursor.execute

    def spying(self: psycopg.Cursor[Any], query: Any, *args: Any, **kwargs: Any) -> Any:
        text = query.as_string(self.connection) if isinstance(query, sql.Composable) else str(query)
        spy.sent.append(text)
        return execute(self, query, *args, **kwargs)

    monkeypatch.setattr(psycopg.Cursor, "execute", spying)
    return spy


def test_the_previous_hashes_of_a_group_commit_are_one_query(
    postgres_store: TaskApplication, store_config: StoreConfig, statements: _Statements
) -> None:
    tasks = [new_task(START) for _ in range(20)]
    postgres_store.save_tasks(*tasks)
    for task in tasks:
        task.grant_lease(worker="w", now=START, until=UNTIL)
    other = TaskApplication(store_config)  # knows no chain heads: it must read them
    try:
        statements.sent.clear()
        other.save_tasks(*tasks)
        assert statements.chain_reads() == 1  # one query for the twenty tasks
        statements.sent.clear()
        _step(tasks, 1)
        other.save_tasks(*tasks)
        assert statements.chain_reads() == 0  # its own last commit: no read at all
        rows = _recorder(other).chain_rows([t.id for t in tasks])
        assert all(check_task(t.id, rows[t.id]) == [] for t in tasks)
    finally:
        other.close()


def test_events_an_older_release_left_unchained_are_chained_by_the_next_append(
    postgres_store: TaskApplication, store_config: StoreConfig, caplog: pytest.LogCaptureFixture
) -> None:
    task = new_task(START)
    task.grant_lease(worker="w", now=START, until=UNTIL)
    postgres_store.save_tasks(task)
    _step([task], 0)
    _step([task], 1)
    postgres_store.save_tasks(task)
    with psycopg.connect(store_config.database_url, autocommit=True) as conn:  # as if never written
        conn.execute(
            sql.SQL("DELETE FROM {} WHERE task_id = %s AND version >= 2").format(
                sql.Identifier(store_config.schema, CHAIN_TABLE)
            ),
            (task.id,),
        )
    recorder = _recorder(postgres_store)
    assert [r.chain is None for r in recorder.chain_rows([task.id])[task.id]] == [False, True, True, True]
    later = TaskApplication(store_config)
    try:
        again = later.get(task.id)
        again.complete(epoch=1, now=START, message=None)
        with caplog.at_level(logging.WARNING, logger="store.log.postgres"):
            later.save_tasks(again)
        assert "chained 3 events stored without a chain hash" in caplog.text
        assert str(task.id) in caplog.text
        rows = recorder.chain_rows([task.id])[task.id]
        assert len(rows) == 5
        assert check_task(task.id, rows) == []
    finally:
        later.close()


def test_verify_reads_every_task_once_page_by_page(postgres_store: TaskApplication) -> None:
    tasks = [new_task(START) for _ in range(7)]
    postgres_store.save_tasks(*tasks)
    recorder = _recorder(postgres_store)
    assert isinstance(recorder, PostgresRunQueueRecorder)
    histories = list(recorder.chained_histories(page=3))
    assert [task_id for task_id, _ in histories] == sorted(t.id for t in tasks)
    assert all(len(rows) == 1 and check_task(task_id, rows) == [] for task_id, rows in histories)

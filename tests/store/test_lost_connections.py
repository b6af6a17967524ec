"""Pooled connections are lent without a check query (ADR 0036): a connection whose backend was
killed (``pg_terminate_backend``) fails at its first statement, and the statement is tried again
on another connection, so no error reaches a caller: not the application's use cases (the
library's retried recorder methods), not longhaul's own statements (``retry_lost_connection``),
not a worker that claims and runs a task on a pool whose every connection was killed."""

from __future__ import annotations

import asyncio
import functools
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import psycopg
import pytest
from eventsourcing.persistence import OperationalError, Tracking

from domain.skill import Complete, Skill, SkillRegistry, StepContext, StepOutcome
from domain.states import TaskState
from projections.projector import Projector
from projections.task_view import TaskViewRecorder
from store.log.application import APP_NAME, TaskApplication
from store.log.config import StoreConfig, postgres_env
from store.log.postgres import PostgresRunQueueRecorder
from store.log.retry import retry_lost_connection
from tests.support.tasks import new_task
from workers.task_runner import RunPolicy
from workers.worker import Worker, WorkerConfig


def _clock() -> datetime:
    return datetime.now(UTC)


@pytest.fixture
def app_name(monkeypatch: pytest.MonkeyPatch) -> str:
    """The ``application_name`` of this test's connections (libpq reads ``PGAPPNAME``)."""
    name = f"lost-{uuid.uuid4().hex[:10]}"
    monkeypatch.setenv("PGAPPNAME", name)
    return name


@pytest.fixture
def store(store_config: StoreConfig, app_name: str) -> Iterator[TaskApplication]:
    del app_name  # set before the pool connects
    opened = TaskApplication(store_config)
    yield opened
    opened.close()


def _kill_backends(database_url: str, app_name: str) -> int:
    """Terminate every backend of ``app_name`` and wait until they are gone; how many there were.

    It waits for the terminated backends' pids, not for ``app_name`` to have no backend: a worker
    running meanwhile may already have opened new connections under the same name."""
    with psycopg.connect(database_url, autocommit=True, application_name="killer") as conn:
        pids = [
            row[0]
            for row in conn.execute(
                "SELECT pid FROM (SELECT pid, pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE application_name = %s AND pid <> pg_backend_pid()) k",
                (app_name,),
            )
        ]
        for _ in range(500):
            left = conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE pid = ANY(%s)", (pids,)
            ).fetchone()
            if left is not None and left[0] == 0:
                break
            conn.execute("SELECT pg_sleep(0.01)")
        else:  # pragma: no cover - the server did not end them
            raise AssertionError(f"the backends {pids} did not end")
    return len(pids)


def _warm(store: TaskApplication, connections: int) -> None:
    """Make the pool hold ``connections`` open connections (each used once)."""
    recorder = store.recorder
    assert isinstance(recorder, PostgresRunQueueRecorder)
    held = [recorder.datastore.pool.getconn() for _ in range(connections)]
    for conn in held:
        conn.execute("SELECT 1")
        recorder.datastore.pool.putconn(conn)


def test_the_pool_lends_connections_without_a_check_query(store_config: StoreConfig) -> None:
    assert postgres_env(store_config)["POSTGRES_PRE_PING"] == "n"


def test_use_cases_and_own_statements_recover_from_killed_backends(
    store: TaskApplication, store_config: StoreConfig, app_name: str
) -> None:
    task = new_task(_clock())
    store.save_tasks(task)
    _warm(store, 3)
    assert _kill_backends(store_config.database_url, app_name) >= 3

    # The dead connections are really lent: a statement of longhaul's own, not retried, fails.
    with pytest.raises(OperationalError):
        store.run_queue.claimable(_clock(), 10, [("echo", 1)])
    # Tried again on another connection, it does not.
    claimable = functools.partial(store.run_queue.claimable, _clock(), 10, [("echo", 1)])
    assert retry_lost_connection(claimable) == [task.id]

    _kill_backends(store_config.database_url, app_name)
    # A load (one statement of longhaul's, tried again) and an append (the library's) retry by themselves.
    assert store.get(task.id).version == task.version
    other = new_task(_clock())
    store.save_tasks(other)
    _kill_backends(store_config.database_url, app_name)
    loaded = retry_lost_connection(functools.partial(store.get_many, [task.id, other.id]))
    assert set(loaded) == {task.id, other.id}


def test_a_view_reads_and_writes_through_killed_backends(
    store: TaskApplication, store_config: StoreConfig, app_name: str
) -> None:
    recorder = store.recorder
    assert isinstance(recorder, PostgresRunQueueRecorder)
    view = TaskViewRecorder(recorder.datastore)
    task = new_task(_clock())
    store.save_tasks(task)
    projector = Projector(store, [view])
    _warm(store, 3)
    _kill_backends(store_config.database_url, app_name)
    assert view.row(task.id) is None
    submitted = next(iter(store.repository.event_store.get(task.id)))
    _kill_backends(store_config.database_url, app_name)
    assert projector.apply([(submitted, Tracking(APP_NAME, 1))]) == 1
    _kill_backends(store_config.database_url, app_name)
    row = view.row(task.id)
    assert row is not None
    assert row.state == TaskState.SUBMITTED


async def test_a_worker_claims_and_runs_on_a_pool_whose_backends_were_killed(
    store: TaskApplication, store_config: StoreConfig, app_name: str
) -> None:
    async def done(_: StepContext) -> StepOutcome:
        return Complete(message="done")

    worker = Worker(
        store=store,
        registry=SkillRegistry([Skill("echo", 1, [done])]),
        clock=_clock,
        config=WorkerConfig(
            worker_id="w1", lease_seconds=30, concurrency=2, grace_seconds=1, poll_seconds=0.2
        ),
        policy=RunPolicy(max_pause=timedelta(days=1)),
    )
    stop = asyncio.Event()
    running = asyncio.ensure_future(worker.run(stop))
    try:
        first = new_task(_clock())
        await asyncio.to_thread(store.save_tasks, first)
        await _wait_until_completed(store, first.id)
        await asyncio.to_thread(_warm, store, 3)
        await asyncio.to_thread(_kill_backends, store_config.database_url, app_name)
        second = new_task(_clock())
        await asyncio.to_thread(store.save_tasks, second)  # retried by the library's recorder
        await _wait_until_completed(store, second.id)
        assert not running.done()  # nothing reached the worker's loop
    finally:
        stop.set()
        await running


async def _wait_until_completed(store: TaskApplication, task_id: uuid.UUID) -> None:
    for _ in range(400):
        task = await asyncio.to_thread(store.get, task_id)
        if task.state == TaskState.COMPLETED:
            return
        await asyncio.sleep(0.025)
    raise AssertionError(f"task {task_id} did not complete")

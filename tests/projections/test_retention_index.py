"""The retention index follows the log, equals the aggregates, and a rebuild equals the live index.

The projector is ``projections.projector`` in a thread (``tests.support.projector``) on the real
PostgreSQL; the tasks are those of ``tests/projections/test_task_view.py``.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any
from uuid import UUID

import pytest

from domain.task import Task
from projections.retention_index import RetentionIndexRecorder, open_index
from store.log.application import TaskApplication
from store.log.config import StoreConfig
from tests.api.support import Advance, FakeClock
from tests.projections.test_task_view import WAIT_S, log_position, some_tasks
from tests.support.projector import projector_running


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def index(postgres_store: TaskApplication) -> RetentionIndexRecorder:
    opened = open_index(postgres_store)
    assert opened is not None
    return opened


@pytest.fixture
def projector(store_config: StoreConfig, postgres_store: TaskApplication) -> Iterator[Any]:
    with projector_running(store_config) as runner:
        yield runner


def expected(task: Task) -> dict[str, Any]:
    """What the index must say of ``task``: retention counts from its end (not moved by a config)."""
    return {
        "tenant": task.tenant,
        "skill": task.skill,
        "ended_at": task.ended_at if not task.expired else None,
        "expired": task.expired,
    }


def assert_index_equals_the_aggregates(
    store: TaskApplication, index: RetentionIndexRecorder, ids: list[UUID]
) -> None:
    tasks = store.get_many(ids)
    seen = {
        r.task_id: {"tenant": r.tenant, "skill": r.skill, "ended_at": r.ended_at, "expired": r.expired}
        for r in index.rows()
    }
    for values in seen.values():  # an expired task keeps the time it ended; it is no longer searched
        if values["expired"]:
            values["ended_at"] = None
    assert seen == {t.id: expected(t) for t in tasks.values()}


def test_the_index_follows_the_log_and_a_rebuild_equals_it_row_for_row(
    postgres_store: TaskApplication, index: RetentionIndexRecorder, clock: FakeClock, projector: Any
) -> None:
    ids = some_tasks(postgres_store, clock)
    projector.wait(log_position(postgres_store), timeout=WAIT_S)
    assert_index_equals_the_aggregates(postgres_store, index, ids)
    assert index.lag(postgres_store).behind == 0
    Advance(postgres_store, clock).complete(ids[0])  # it keeps following
    projector.wait(log_position(postgres_store), timeout=WAIT_S)
    assert_index_equals_the_aggregates(postgres_store, index, ids)

    live = index.rows()
    assert index.rebuild(postgres_store).position == log_position(postgres_store)
    assert index.rows() == live  # every column, log positions included


def test_due_finds_terminal_unexpired_tasks_oldest_first_after_a_cursor(
    postgres_store: TaskApplication, index: RetentionIndexRecorder, clock: FakeClock
) -> None:
    ids = some_tasks(postgres_store, clock)
    clock.advance(timedelta(seconds=5))
    Advance(postgres_store, clock).complete(ids[0])
    index.rebuild(postgres_store)
    tasks = postgres_store.get_many(ids)
    ended = sorted(
        (t for t in tasks.values() if t.is_terminal and not t.expired), key=lambda t: (t.ended_at, t.id)
    )
    assert len(ended) >= 3
    assert [r.task_id for r in index.due(clock(), 100)] == [t.id for t in ended]
    first = index.due(clock(), 1)
    assert [r.task_id for r in first] == [ended[0].id]
    assert first[0].ended_at is not None
    after = index.due(clock(), 100, after=(first[0].ended_at, first[0].task_id))
    assert [r.task_id for r in after] == [t.id for t in ended[1:]]
    ended_at = ended[0].ended_at
    assert ended_at is not None
    assert index.due(ended_at - timedelta(microseconds=1), 100) == []

"""A group commit that loses the race for some tasks keeps the others (``save_each``, ADR 0037).

On both recorders: the tasks someone appended to first get ``ConflictError`` and nothing of
theirs is written (events, chain hashes, run-queue row); the others are appended together, in
the order of the group, chained. On PostgreSQL that is still one statement in one round trip.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from domain.task import Task
from store.evidence.chain import check_task
from store.log.application import TaskApplication
from store.log.errors import ConflictError
from store.log.memory import MemoryRunQueueRecorder
from store.log.postgres import PostgresRunQueueRecorder
from tests.store.test_append_statement import _traced
from tests.support.tasks import new_task

NOW = datetime(2026, 12, 2, 5, 0, tzinfo=UTC)
UNTIL = NOW + timedelta(minutes=5)


def _recorder(store: TaskApplication) -> PostgresRunQueueRecorder | MemoryRunQueueRecorder:
    recorder = store.recorder
    assert isinstance(recorder, (PostgresRunQueueRecorder, MemoryRunQueueRecorder))
    return recorder


def _raced(store: TaskApplication, count: int, lose: set[int]) -> tuple[list[Task], int]:
    """``count`` saved tasks, copies read at version 1; those at ``lose`` then claimed by a winner.

    Returns the stale copies and the log position after the winners' appends.
    """
    tasks = [new_task(NOW) for _ in range(count)]
    store.save_tasks(*tasks)
    stale = [store.get(t.id) for t in tasks]
    for i in sorted(lose):
        winner = store.get(tasks[i].id)
        winner.grant_lease(worker="winner", now=NOW, until=UNTIL)
        store.save_tasks(winner)
    return stale, _recorder(store).max_notification_id() or 0


def _claim(task: Task, steps: int) -> None:
    """Grant the group's lease (one event), then ``steps`` checkpoints under it."""
    epoch = task.grant_lease(worker="group", now=NOW, until=UNTIL)
    for n in range(steps):
        task.save_checkpoint(epoch=epoch, now=NOW, step=0, checkpoint={"n": n}, lease_until=UNTIL)


def _appended_since(store: TaskApplication, position: int) -> list[tuple[UUID, int]]:
    return [
        (UUID(str(n.originator_id)), n.originator_version)
        for n in _recorder(store).select_notifications(position + 1, 10_000)
    ]


def test_a_group_that_loses_one_task_commits_the_others(any_store: TaskApplication) -> None:
    stale, position = _raced(any_store, 4, lose={1})
    for task in stale:
        _claim(task, steps=1)
    outcomes = any_store.save_each(*stale)
    assert [type(o) for o in outcomes] == [type(None), ConflictError, type(None), type(None)]
    kept = [stale[0], stale[2], stale[3]]
    assert _appended_since(any_store, position) == [(t.id, v) for t in kept for v in (2, 3)]
    for task in kept:
        assert any_store.get(task.id).lease_owner == "group"
        row = any_store.run_queue.row(task.id)
        assert row is not None
        assert (row.version, row.lease_owner) == (3, "group")
    loser = any_store.get(stale[1].id)
    assert (loser.version, loser.lease_owner) == (2, "winner")
    row = any_store.run_queue.row(stale[1].id)
    assert row is not None
    assert (row.version, row.lease_owner) == (2, "winner")
    chains = _recorder(any_store).chain_rows([t.id for t in stale])
    assert [len(chains[t.id]) for t in stale] == [3, 2, 3, 3]
    assert all(check_task(t.id, chains[t.id]) == [] for t in stale)
    assert all(not t.pending_events for t in stale)


def test_a_group_that_loses_every_task_writes_nothing(any_store: TaskApplication) -> None:
    stale, position = _raced(any_store, 3, lose={0, 1, 2})
    for task in stale:
        _claim(task, steps=0)
    outcomes = any_store.save_each(*stale)
    assert all(isinstance(o, ConflictError) for o in outcomes)
    assert _appended_since(any_store, position) == []


def test_the_same_task_twice_in_a_group_splits_it(any_store: TaskApplication) -> None:
    """A race only the append itself sees (here: two copies in one group) saves each task alone."""
    stale, position = _raced(any_store, 2, lose=set())
    twin = any_store.get(stale[0].id)
    for task in (*stale, twin):
        _claim(task, steps=0)
    outcomes = any_store.save_each(stale[0], stale[1], twin)
    assert [type(o) for o in outcomes] == [type(None), type(None), ConflictError]
    assert _appended_since(any_store, position) == [(stale[0].id, 2), (stale[1].id, 2)]


def test_a_group_with_a_lost_task_is_one_call(
    postgres_store: TaskApplication, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No split into single saves: one ``longhaul_append`` call, no transaction from the client."""
    stale, _ = _raced(postgres_store, 8, lose={2, 5})
    for task in stale:
        _claim(task, steps=1)
    recorder = _recorder(postgres_store)
    assert isinstance(recorder, PostgresRunQueueRecorder)
    calls: list[str] = []
    for name in ("insert_events", "insert_events_each"):
        original = getattr(recorder, name)

        def counted(*args: Any, _original: Any = original, _name: str = name, **kwargs: Any) -> Any:
            calls.append(_name)
            return _original(*args, **kwargs)

        monkeypatch.setattr(recorder, name, counted)
    with _traced(recorder, tmp_path / "trace") as messages:
        outcomes = postgres_store.save_each(*stale)
    assert [i for i, o in enumerate(outcomes) if o is not None] == [2, 5]
    assert calls == ["insert_events_each"]
    sent = [text for direction, text in messages if direction == "F"]
    # The call, and before it the read of the chain hashes this process did not write itself.
    assert len([text for text in sent if text.startswith("Execute")]) == 2
    assert not [text for text in sent if "BEGIN" in text or "COMMIT" in text or "LOCK" in text]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    group=st.lists(st.tuples(st.booleans(), st.integers(min_value=0, max_value=3)), min_size=1, max_size=8),
    order=st.randoms(use_true_random=False),
)
def test_exactly_the_tasks_without_a_conflict_are_appended(
    any_store: TaskApplication, group: list[tuple[bool, int]], order: object
) -> None:
    """Random conflicts in a group: the others' events are the log's next ones, in group order, chained."""
    lose = {i for i, (conflict, _) in enumerate(group) if conflict}
    stale, position = _raced(any_store, len(group), lose=lose)
    for task, (_, steps) in zip(stale, group, strict=True):
        _claim(task, steps=steps)
    indexes = list(range(len(group)))
    order.shuffle(indexes)  # type: ignore[attr-defined]
    shuffled = [stale[i] for i in indexes]
    expected = [(stale[i].id, v) for i in indexes if i not in lose for v in range(2, stale[i].version + 1)]

    outcomes = any_store.save_each(*shuffled)

    assert [isinstance(o, ConflictError) for o in outcomes] == [i in lose for i in indexes]
    assert all(o is None or isinstance(o, ConflictError) for o in outcomes)
    assert _appended_since(any_store, position) == expected
    chains = _recorder(any_store).chain_rows([t.id for t in stale])
    for i, task in enumerate(stale):
        stored = any_store.get(task.id)
        row = any_store.run_queue.row(task.id)
        assert row is not None
        if i in lose:
            assert (stored.version, stored.lease_owner, row.version) == (2, "winner", 2)
        else:
            assert (stored.version, stored.lease_owner, row.version) == (task.version, "group", task.version)
        assert len(chains[task.id]) == stored.version
        assert check_task(task.id, chains[task.id]) == []

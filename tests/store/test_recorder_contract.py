"""One contract for both recorders: every test runs on PostgreSQL and in memory.

The ``any_store`` fixture (``tests/conftest.py``) opens the real ``TaskApplication`` on each recorder;
the memory variant needs no database. Rows with exact fields are written the way the store writes
them, riding on an append (``store.save(task, run_queue=[row])``), so each query can be pinned
down precisely.
"""

from __future__ import annotations

import asyncio
import random
import threading
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID, uuid4

import pytest

from domain.states import TaskState
from domain.task import Task
from store.log.application import SNAPSHOT_INTERVAL, TaskApplication
from store.log.config import MemoryConfig
from store.log.errors import ConflictError, TaskNotFoundError
from store.log.postgres import PostgresRunQueueRecorder
from store.log.run_queue import RunQueueRow
from tests.support.tasks import new_task

NOW = datetime(2026, 6, 1, 12, tzinfo=UTC)
SKILLS = [("alpha", 1), ("beta", 2)]

SUBMITTED, WORKING = TaskState.SUBMITTED, TaskState.WORKING
INPUT, AUTH = TaskState.INPUT_REQUIRED, TaskState.AUTH_REQUIRED
COMPLETED, FAILED, CANCELED = TaskState.COMPLETED, TaskState.FAILED, TaskState.CANCELED


def minutes(n: float) -> datetime:
    return NOW + timedelta(minutes=n)


def put(store: TaskApplication, **fields: Any) -> UUID:
    """Append a new task and, with it, a run-queue row with ``fields`` overriding its own."""
    task = new_task(NOW, skill=fields.pop("skill", "alpha"), version=fields.pop("skill_version", 1))
    defaults: dict[str, Any] = {"updated_at": NOW}
    row = replace(RunQueueRow.of(task), **(defaults | fields))
    row = replace(row, state=str(row.state))
    store.save(task, run_queue=[row])
    return task.id


def leased(store: TaskApplication) -> Task:
    task = new_task(NOW)
    task.grant_lease(worker="w1", now=NOW, until=minutes(5))
    store.save_tasks(task)
    return task


# ---------------------------------------------------------------------- appends and rows


def test_an_append_is_version_checked(any_store: TaskApplication) -> None:
    task = leased(any_store)
    first, second = any_store.get(task.id), any_store.get(task.id)
    first.extend_lease(epoch=first.lease_epoch, now=NOW, until=minutes(6))
    second.extend_lease(epoch=second.lease_epoch, now=NOW, until=minutes(7))
    any_store.save_tasks(first)

    with pytest.raises(ConflictError):
        any_store.save_tasks(second)

    assert any_store.get(task.id).lease_until == minutes(6)
    assert any_store.run_queue.row(task.id) == RunQueueRow.of(first)


def test_the_row_is_written_with_the_append(any_store: TaskApplication) -> None:
    task = new_task(NOW)
    any_store.save_tasks(task)
    assert any_store.run_queue.row(task.id) == RunQueueRow.of(task)

    task.grant_lease(worker="w1", now=minutes(1), until=minutes(5))
    any_store.save_tasks(task)
    row = any_store.run_queue.row(task.id)
    assert row == RunQueueRow.of(task)
    assert row is not None
    assert (row.version, row.state, row.lease_owner, row.lease_until) == (2, WORKING, "w1", minutes(5))
    assert any_store.run_queue.row(uuid4()) is None


def test_a_failed_append_writes_no_row(any_store: TaskApplication) -> None:
    task = leased(any_store)
    stale = any_store.get(task.id)
    task.extend_lease(epoch=task.lease_epoch, now=NOW, until=minutes(6))
    any_store.save_tasks(task)
    stale.release_lease(epoch=stale.lease_epoch, now=NOW, reason="stop")
    fresh = new_task(NOW)

    with pytest.raises(ConflictError):  # one conflict fails the whole group
        any_store.save_tasks(fresh, stale)

    assert any_store.run_queue.row(fresh.id) is None
    with pytest.raises(TaskNotFoundError):
        any_store.get(fresh.id)
    assert any_store.run_queue.row(task.id) == RunQueueRow.of(task)


def test_only_a_newer_version_replaces_a_row(any_store: TaskApplication) -> None:
    task = new_task(NOW)
    old = RunQueueRow.of(task)
    any_store.save_tasks(task)
    task.grant_lease(worker="w1", now=NOW, until=minutes(5))
    any_store.save_tasks(task)
    current = RunQueueRow.of(task)

    # A late writer's older row rides on someone else's append: it changes nothing.
    any_store.save(new_task(NOW), run_queue=[old])
    assert any_store.run_queue.row(task.id) == current
    # The same version does not replace it either.
    any_store.save(new_task(NOW), run_queue=[replace(current, lease_owner="other")])
    assert any_store.run_queue.row(task.id) == current
    # A newer one does.
    newer = replace(current, version=current.version + 1, state=INPUT, lease_owner=None)
    any_store.save(new_task(NOW), run_queue=[newer])
    assert any_store.run_queue.row(task.id) == newer


def test_several_tasks_in_one_append(any_store: TaskApplication) -> None:
    tasks = [new_task(NOW, tenant=f"t{n}") for n in range(3)]
    any_store.save_tasks(*tasks)
    assert any_store.run_queue.tenants([t.id for t in tasks]) == {t.id: t.tenant for t in tasks}


# ---------------------------------------------------------------------- queries


def test_claimable_filters_orders_and_limits(any_store: TaskApplication) -> None:
    expired_late = put(any_store, state=WORKING, lease_owner="w", lease_until=minutes(-1))
    expired_early = put(any_store, state=WORKING, lease_owner="w", lease_until=minutes(-5))
    at_the_edge = put(any_store, state=WORKING, lease_owner="w", lease_until=NOW)
    free_new = put(any_store, state=SUBMITTED, updated_at=minutes(-1))
    free_old = put(any_store, state=SUBMITTED, updated_at=minutes(-9))
    beta = put(any_store, state=SUBMITTED, skill="beta", skill_version=2, updated_at=minutes(-8))
    put(any_store, state=WORKING, lease_owner="w", lease_until=minutes(1))  # held
    put(any_store, state=SUBMITTED, skill="beta", skill_version=1)  # a version nobody asked for
    put(any_store, state=SUBMITTED, skill="gamma")
    put(any_store, state=INPUT, deadline=minutes(-1))
    put(any_store, state=COMPLETED)
    queue = any_store.run_queue

    # No lease first (oldest change first), then the earliest lease end.
    everything = [free_old, beta, free_new, expired_early, expired_late, at_the_edge]
    assert queue.claimable(NOW, 100, SKILLS) == everything
    assert queue.claimable(NOW, 3, SKILLS) == everything[:3]
    assert queue.claimable(NOW, 100, [("alpha", 1)]) == [free_old, free_new, *everything[3:]]
    assert queue.claimable(minutes(-2), 100, SKILLS) == [free_old, beta, free_new, expired_early]
    assert queue.claimable(NOW, 100, []) == []


def test_next_lease_end(any_store: TaskApplication) -> None:
    queue = any_store.run_queue
    assert queue.next_lease_end(SKILLS) is None
    put(any_store, state=SUBMITTED)
    assert queue.next_lease_end(SKILLS) is None  # claimable now, no lease to wait for
    put(any_store, state=WORKING, lease_owner="w", lease_until=minutes(7))
    put(any_store, state=WORKING, lease_owner="w", lease_until=minutes(3))
    put(any_store, state=WORKING, lease_owner="w", lease_until=minutes(1), skill="gamma")
    put(any_store, state=INPUT, lease_until=minutes(2))  # not runnable
    assert queue.next_lease_end(SKILLS) == minutes(3)
    assert queue.next_lease_end([("gamma", 1)]) == minutes(1)
    assert queue.next_lease_end([]) is None


def test_due_pauses(any_store: TaskApplication) -> None:
    late = put(any_store, state=INPUT, deadline=minutes(-1))
    early = put(any_store, state=AUTH, deadline=minutes(-10))
    edge = put(any_store, state=INPUT, deadline=NOW)
    put(any_store, state=INPUT, deadline=minutes(1))  # not yet
    put(any_store, state=WORKING, deadline=minutes(-20))  # not paused
    put(any_store, state=FAILED, deadline=minutes(-20))
    queue = any_store.run_queue

    assert queue.due_pauses(NOW, 100) == [early, late, edge]
    assert queue.due_pauses(NOW, 2) == [early, late]
    assert queue.due_pauses(minutes(-5), 100) == [early]


def test_due_expiries(any_store: TaskApplication) -> None:
    newer = put(any_store, state=COMPLETED, updated_at=minutes(-10))
    older = put(any_store, state=CANCELED, updated_at=minutes(-30))
    edge = put(any_store, state=FAILED, updated_at=NOW)
    put(any_store, state=COMPLETED, updated_at=minutes(-40), expired=True)  # already expired
    put(any_store, state=COMPLETED, updated_at=minutes(1))  # too recent
    put(any_store, state=INPUT, updated_at=minutes(-50))  # not terminal
    queue = any_store.run_queue

    assert queue.due_expiries(NOW, 100) == [older, newer, edge]
    assert queue.due_expiries(NOW, 1) == [older]
    assert queue.due_expiries(minutes(-20), 100) == [older]


def test_due_expiries_pages_by_end_time_then_id(any_store: TaskApplication) -> None:
    ties = sorted(put(any_store, state=COMPLETED, updated_at=minutes(-10)) for _ in range(3))
    first = put(any_store, state=CANCELED, updated_at=minutes(-30))
    last = put(any_store, state=FAILED, updated_at=minutes(-5))
    queue = any_store.run_queue

    assert queue.due_expiries(NOW, 100) == [first, *ties, last]
    assert queue.due_expiries(NOW, 2, after=(minutes(-30), first)) == ties[:2]
    assert queue.due_expiries(NOW, 100, after=(minutes(-10), ties[1])) == [ties[2], last]
    assert queue.due_expiries(NOW, 100, after=(minutes(-5), last)) == []


def test_live_versions_and_their_tasks(any_store: TaskApplication) -> None:
    second = put(any_store, state=WORKING, skill="beta", skill_version=2, updated_at=minutes(-1))
    first = put(any_store, state=INPUT, skill="beta", skill_version=2, updated_at=minutes(-5))
    third = put(any_store, state=SUBMITTED, skill="beta", skill_version=2, updated_at=minutes(3))
    put(any_store, state=COMPLETED, skill="beta", skill_version=2)
    put(any_store, state=SUBMITTED, skill="beta", skill_version=1)
    put(any_store, state=AUTH, skill="alpha", skill_version=3)
    put(any_store, state=FAILED, skill="gamma", skill_version=1)  # only terminal tasks: not live
    queue = any_store.run_queue

    assert queue.live_versions() == [("alpha", 3, 1), ("beta", 1, 1), ("beta", 2, 3)]
    assert queue.live_tasks_of("beta", 2) == [first, second, third]
    assert queue.live_tasks_of("beta", 2, limit=2) == [first, second]
    assert queue.live_tasks_of("gamma", 1) == []


def test_owners_and_tenants_of_existing_tasks_only(any_store: TaskApplication) -> None:
    held = put(any_store, state=WORKING, lease_owner="w1", tenant="acme")
    free = put(any_store, state=SUBMITTED, tenant="other")
    unknown = uuid4()
    queue = any_store.run_queue

    assert queue.owners([held, free, unknown]) == {held: (WORKING, "w1"), free: (SUBMITTED, None)}
    assert queue.tenants([held, free, unknown]) == {held: "acme", free: "other"}
    assert queue.owners([]) == {}
    assert queue.tenants([]) == {}


def test_state_counts_of_tasks_not_expired(any_store: TaskApplication) -> None:
    assert any_store.run_queue.state_counts() == {}
    put(any_store, state=WORKING)
    put(any_store, state=WORKING)
    put(any_store, state=INPUT)
    put(any_store, state=COMPLETED)
    put(any_store, state=COMPLETED, expired=True)  # expired: counted nowhere
    put(any_store, state=FAILED, expired=True)

    assert any_store.run_queue.state_counts() == {WORKING: 2, INPUT: 1, COMPLETED: 1}


# ---------------------------------------------------------------------- loading and waking


def _task_with(store: TaskApplication, checkpoints: int) -> Task:
    task = new_task(NOW, params={"n": checkpoints})
    store.save_tasks(task)
    if checkpoints:
        epoch = task.grant_lease(worker="w", now=NOW, until=minutes(60))
        for n in range(checkpoints):
            task.save_checkpoint(epoch=epoch, now=NOW, step=0, checkpoint={"n": n}, lease_until=minutes(60))
            store.save_tasks(task)  # one save per event: snapshots are taken at every 100th version
    return task


def test_get_many_equals_the_librarys_load(any_store: TaskApplication) -> None:
    fresh, short, snapshotted = (_task_with(any_store, n) for n in (0, 5, SNAPSHOT_INTERVAL + 7))
    assert any_store.snapshots is not None
    assert list(any_store.snapshots.get(snapshotted.id))  # it loads through a snapshot

    many = any_store.get_many([fresh.id, short.id, snapshotted.id, uuid4(), short.id])

    assert set(many) == {fresh.id, short.id, snapshotted.id}  # an unknown id is left out
    for task_id, task in many.items():
        one: Task = any_store.repository.get(task_id)  # the library's load: a snapshot read, then events
        assert task.version == one.version
        assert vars(task) == vars(one)
        assert vars(any_store.get(task_id)) == vars(one)  # get loads with get_many's statement
    assert many[snapshotted.id].checkpoint == {"n": SNAPSHOT_INTERVAL + 6}
    assert any_store.get_many([]) == {}


class _CountedEvent(asyncio.Event):
    """An event that counts its ``set`` calls: the worker's ``Wakeup`` matches one per append."""

    def __init__(self) -> None:
        super().__init__()
        self.sets = 0

    def set(self) -> None:
        self.sets += 1
        super().set()


async def _sets_reach(event: _CountedEvent, count: int) -> None:
    async def reached() -> None:
        while event.sets < count:
            event.clear()  # no await since the check: no set comes between
            await event.wait()

    await asyncio.wait_for(reached(), 10)


async def test_every_append_wakes_a_follower_once(any_store: TaskApplication) -> None:
    event = _CountedEvent()
    following = asyncio.ensure_future(any_store.run_queue.follow_appends(event))
    try:
        await _sets_reach(event, 1)  # set once at the start
        for _ in range(2):
            appender = threading.Thread(target=any_store.save_tasks, args=(new_task(NOW),))
            appender.start()
            appender.join()
        await asyncio.to_thread(any_store.save_tasks, new_task(NOW), new_task(NOW))  # one append
        await _sets_reach(event, 4)
        await asyncio.sleep(0.3)
        assert event.sets == 4
    finally:
        following.cancel()
        with pytest.raises(asyncio.CancelledError):
            await following


async def test_a_follower_whose_connection_dies_listens_again(store: TaskApplication) -> None:
    recorder = store.recorder
    assert isinstance(recorder, PostgresRunQueueRecorder)
    event = _CountedEvent()
    following = asyncio.ensure_future(recorder.follow_appends(event))
    listen = f'LISTEN "{recorder.channel_name}"'
    try:
        await _sets_reach(event, 1)
        with recorder.datastore.get_connection() as conn:
            killed = conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE query = %s", (listen,)
            ).fetchall()
        assert killed == [{"pg_terminate_backend": True}]
        await _sets_reach(event, 3)  # the failure wakes it, and so does listening again
        before = event.sets
        await asyncio.to_thread(store.save_tasks, new_task(NOW))
        await _sets_reach(event, before + 1)
    finally:
        following.cancel()
        with pytest.raises(asyncio.CancelledError):
            await following


# ---------------------------------------------------------------------- both at once


def test_both_recorders_answer_alike(store: TaskApplication) -> None:
    """The same random rows in both recorders: every query answers the same."""
    memory = TaskApplication(MemoryConfig())
    draw = random.Random(6)
    states = list(TaskState)
    # Distinct times for every row: rows that tie on a sort key may come in any order.
    times = draw.sample(range(-600, 600), 3 * 80)
    ids = []
    try:
        for n in range(80):
            fields: dict[str, Any] = {
                "state": str(draw.choice(states)),
                "skill": draw.choice(["alpha", "beta", "gamma"]),
                "skill_version": draw.choice([1, 2]),
                "tenant": draw.choice(["acme", "other"]),
                "lease_owner": draw.choice([None, "w1", "w2"]),
                "lease_until": draw.choice([None, minutes(times[3 * n])]),
                "deadline": draw.choice([None, minutes(times[3 * n + 1])]),
                "updated_at": minutes(times[3 * n + 2]),
                "expired": draw.random() < 0.2,
            }
            task = new_task(NOW, skill=fields["skill"], version=fields["skill_version"])
            row = replace(RunQueueRow.of(task), **fields)
            events = task.collect_events()  # the same events for both
            memory.save(*events, run_queue=[row])
            store.save(*events, run_queue=[row])
            ids.append(task.id)
        for when in (minutes(-300), NOW, minutes(300)):
            for limit in (1, 7, 100):
                for skills in ([("alpha", 1)], [("beta", 2), ("gamma", 1)], SKILLS):
                    assert memory.run_queue.claimable(when, limit, skills) == store.run_queue.claimable(
                        when, limit, skills
                    )
                assert memory.run_queue.due_pauses(when, limit) == store.run_queue.due_pauses(when, limit)
                assert memory.run_queue.due_expiries(when, limit) == store.run_queue.due_expiries(when, limit)
        for skills in ([("alpha", 1)], [("beta", 2), ("gamma", 1)], SKILLS):
            assert memory.run_queue.next_lease_end(skills) == store.run_queue.next_lease_end(skills)
        assert memory.run_queue.live_versions() == store.run_queue.live_versions()
        for skill, version, _ in memory.run_queue.live_versions():
            assert memory.run_queue.live_tasks_of(skill, version, 5) == store.run_queue.live_tasks_of(
                skill, version, 5
            )
        assert memory.run_queue.state_counts() == store.run_queue.state_counts()
        assert memory.run_queue.owners(ids) == store.run_queue.owners(ids)
        assert memory.run_queue.tenants(ids) == store.run_queue.tenants(ids)
        assert all(memory.run_queue.row(i) == store.run_queue.row(i) for i in ids)
    finally:
        memory.close()

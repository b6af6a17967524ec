"""``TaskApplication.get_many`` rebuilds exactly what ``get`` rebuilds, with and without snapshots."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from uuid import uuid4

from domain.task import Task
from store.application import SNAPSHOT_INTERVAL, TaskApplication
from tests.support.tasks import new_task

NOW = datetime(2026, 6, 1, tzinfo=UTC)


def _task(store: TaskApplication, checkpoints: int) -> Task:
    task = new_task(NOW, params={"n": checkpoints})
    store.save_tasks(task)
    if checkpoints:
        epoch = task.grant_lease(worker="w", now=NOW, until=NOW + timedelta(hours=1))
        for n in range(checkpoints):
            task.save_checkpoint(
                epoch=epoch, now=NOW, step=0, checkpoint={"n": n}, lease_until=NOW + timedelta(hours=1)
            )
            store.save_tasks(task)  # one save per event: snapshots are taken at every 100th version
    return task


def test_get_many_equals_get(store: TaskApplication) -> None:
    fresh, short, snapshotted = _task(store, 0), _task(store, 5), _task(store, SNAPSHOT_INTERVAL + 7)
    assert store.snapshots is not None
    assert list(store.snapshots.get(snapshotted.id))  # it loads through a snapshot

    many = store.get_many([fresh.id, short.id, snapshotted.id, uuid4()])

    assert set(many) == {fresh.id, short.id, snapshotted.id}  # an unknown id is left out
    for task_id, task in many.items():
        one = store.get(task_id)
        assert task.version == one.version
        assert vars(task) == vars(one)
    assert many[snapshotted.id].checkpoint == {"n": SNAPSHOT_INTERVAL + 6}
    assert store.get_many([]) == {}

"""Invariant 1: every field GetTask returns is rebuilt from the task's events alone."""

from __future__ import annotations

from datetime import timedelta
from typing import Any
from uuid import UUID

import pytest

from domain.task import Task
from store.log.application import TaskApplication
from store.public_form.task_wire import task_to_wire
from tests.api.support import FakeClock, Rpc, user_message

pytestmark = pytest.mark.postgres  # snapshots and events as PostgreSQL stores them

LONG_ENOUGH_FOR_A_SNAPSHOT = 120  # the store snapshots every 100 versions


def _replayed(store: TaskApplication, task: Task) -> Task:
    """The task rebuilt by applying every logged event in order: no snapshot, no cache, no view."""
    rebuilt: Any = None
    for event in store.history(task.id):
        rebuilt = event.mutate(rebuilt)  # type: ignore[attr-defined]
    assert isinstance(rebuilt, Task)
    return rebuilt


async def test_get_task_equals_a_pure_replay_of_the_log(
    rpc: Rpc, store: TaskApplication, clock: FakeClock
) -> None:
    sent = await rpc(
        "SendMessage", {"message": user_message("audit me"), "configuration": {"returnImmediately": True}}
    )
    task_id = sent["result"]["task"]["id"]

    # A worker's life, long enough that loads go through a snapshot.
    task = store.get(UUID(task_id))
    now = clock()
    epoch = task.grant_lease(worker="w", now=now, until=now + timedelta(hours=1))
    for tick in range(LONG_ENOUGH_FOR_A_SNAPSHOT):
        task.save_checkpoint(
            epoch=epoch, now=now, step=0, checkpoint={"tick": tick}, lease_until=now + timedelta(hours=1)
        )
    task.report_progress(
        epoch=epoch,
        now=now,
        message={"messageId": "p", "role": "ROLE_AGENT", "parts": [{"text": "half way"}]},
    )
    task.append_artifact(epoch=epoch, now=now, artifact={"artifactId": "a", "parts": [{"text": "part 1 "}]})
    task.append_artifact(
        epoch=epoch, now=now, artifact={"artifactId": "a", "parts": [{"text": "part 2"}]}, append=True
    )
    task.complete_step(
        epoch=epoch, now=now, step=0, checkpoint={"done": True}, lease_until=now + timedelta(hours=1)
    )
    task.complete(epoch=epoch, now=now, message=None)
    store.save_tasks(task)

    got = (await rpc("GetTask", {"id": task_id}))["result"]

    assert got == task_to_wire(_replayed(store, task))
    assert got["status"]["state"] == "TASK_STATE_COMPLETED"
    assert got["artifacts"][0]["parts"] == [{"text": "part 1 "}, {"text": "part 2"}]

"""Event schema changes get upcasters: a version-1 ``InputRequested`` stored before
``resume_step`` existed still loads, and resumes at the step after the one that asked."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from eventsourcing.persistence import StoredEvent

from domain.task import Task
from store.log.application import TaskApplication
from tests.support.tasks import new_task

NOW = datetime(2026, 6, 1, tzinfo=UTC)


def _as_version_1(store: TaskApplication, event: Any) -> StoredEvent:
    """``event`` stored the way version 1 of its class stored it."""
    stored = store.mapper.to_stored_event(event)
    state = store.mapper.transcoder.decode(stored.state)
    assert state.pop("class_version") == 2
    del state["resume_step"]
    return StoredEvent(
        originator_id=stored.originator_id,
        originator_version=stored.originator_version,
        topic=stored.topic,
        state=store.mapper.transcoder.encode(state),
    )


def test_a_version_1_input_request_loads_through_its_upcaster(store: TaskApplication) -> None:
    task = new_task(NOW, skill="access-review", text="review")
    epoch = task.grant_lease(worker="w", now=NOW, until=NOW + timedelta(minutes=1))
    store.save_tasks(task)
    task.request_input(
        epoch=epoch,
        now=NOW,
        step=0,
        checkpoint={"plan": "ok"},
        question={"messageId": "q", "role": "ROLE_AGENT", "parts": [{"text": "approve?"}]},
        deadline=NOW + timedelta(days=1),
    )
    (asked,) = task.collect_events()
    store.recorder.insert_events([_as_version_1(store, asked)])

    loaded = store.get(task.id)
    (replayed,) = [e for e in store.history(task.id) if isinstance(e, Task.InputRequested)]

    assert replayed.resume_step == 1
    assert loaded.state == "TASK_STATE_INPUT_REQUIRED"
    assert loaded.next_step == 1
    assert loaded.checkpoint == {"plan": "ok"}

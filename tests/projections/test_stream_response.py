"""An event as the A2A StreamResponse: the same status and artifacts GetTask shows, from NATS JSON too."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

from eventsourcing.domain import Aggregate

from api import wire
from domain.task import Task
from store.public_form.event_json import dumps, event_message
from store.public_form.stream_frames import event_stream_response, stream_response
from store.public_form.task_wire import task_to_wire
from tests.support.tasks import new_task

T0 = datetime(2026, 3, 1, 9, 30, 0, 123456, tzinfo=UTC)


def _lifecycle() -> Task:
    """A task through every kind of event a client sees, and some it does not."""
    now = T0
    task = new_task(now)
    task.set_push_config(now=now, config={"id": "c", "url": "https://example.com/hook", "token": "secret"})
    epoch = task.grant_lease(worker="w", now=now, until=now + timedelta(hours=1))
    now += timedelta(seconds=1)
    task.report_progress(epoch=epoch, now=now, message={"role": "ROLE_AGENT", "parts": [{"text": "half"}]})
    chunk = {"artifactId": "r", "name": "report", "parts": [{"text": "one "}]}
    task.append_artifact(epoch=epoch, now=now, artifact=chunk, append=False, last_chunk=False)
    task.append_artifact(
        epoch=epoch, now=now, artifact={"artifactId": "r", "parts": [{"text": "two"}]}, append=True
    )
    lease_until = now + timedelta(hours=1)
    task.complete_step(epoch=epoch, now=now, step=0, checkpoint={"n": 1}, lease_until=lease_until)
    question = {"role": "ROLE_AGENT", "parts": [{"text": "ok?"}]}
    task.request_input(
        epoch=epoch, now=now, step=1, checkpoint={}, question=question, deadline=now + timedelta(days=1)
    )
    now += timedelta(seconds=1)
    task.receive_input(now=now, message={"messageId": "m2", "role": "ROLE_USER", "parts": [{"text": "yes"}]})
    epoch = task.grant_lease(worker="w2", now=now, until=now + timedelta(hours=1))
    task.complete(epoch=epoch, now=now, message={"role": "ROLE_AGENT", "parts": [{"text": "done"}]})
    return task


def _replayed_after_each(task: Task) -> list[tuple[Any, Task]]:
    """Each event of ``task`` with the task as it stood right after it."""
    events = task.collect_events()
    states = []
    for n, event in enumerate(events, start=1):
        replayed: Aggregate | None = None
        for earlier in events[:n]:
            replayed = earlier.mutate(replayed)
        assert isinstance(replayed, Task)
        states.append((event, replayed))
    return states


def test_each_status_update_is_the_status_get_task_shows_after_that_event() -> None:
    kinds = []
    for event, after in _replayed_after_each(_lifecycle()):
        response = event_stream_response(event, after.context_id)
        kinds.append((type(event).__name__, next(iter(response)) if response else None))
        if response is None:
            continue
        ((kind, update),) = response.items()
        if kind == "statusUpdate":
            status = task_to_wire(after)["status"]
            assert update == {"taskId": str(after.id), "contextId": "c", "status": status}
            wire.TaskStatus.model_validate(update["status"])
        elif kind == "artifactUpdate":
            assert update["artifact"] == event.artifact
            assert update.get("append", False) is event.append
            assert update.get("lastChunk", False) is event.last_chunk
            wire.Artifact.model_validate(update["artifact"])
        else:
            assert kind == "task"
            wire.WireTask.model_validate(update)
            assert update == task_to_wire(after)
    assert kinds == [
        ("Submitted", "task"),
        ("PushConfigSet", None),
        ("LeaseGranted", "statusUpdate"),
        ("ProgressReported", "statusUpdate"),
        ("ArtifactChunkAppended", "artifactUpdate"),
        ("ArtifactChunkAppended", "artifactUpdate"),
        ("StepCompleted", None),
        ("InputRequested", "statusUpdate"),
        ("InputReceived", "statusUpdate"),
        ("LeaseGranted", None),  # a later grant: the task was working already
        ("Completed", "statusUpdate"),
    ]


def test_the_nats_message_gives_the_same_response_as_the_stored_event() -> None:
    for event, after in _replayed_after_each(_lifecycle()):
        over_nats = json.loads(dumps(event_message(41, "acme", event)))
        assert stream_response(over_nats, after.context_id) == event_stream_response(event, after.context_id)


def test_names_are_the_a2a_json_names() -> None:
    events = _lifecycle().collect_events()
    artifact = event_stream_response(events[4], "c")
    assert artifact == {
        "artifactUpdate": {
            "taskId": str(events[4].originator_id),
            "contextId": "c",
            "artifact": {"artifactId": "r", "name": "report", "parts": [{"text": "one "}]},
        }
    }
    last = event_stream_response(events[5], "c")
    assert last is not None
    assert last["artifactUpdate"]["append"] is True
    assert last["artifactUpdate"]["lastChunk"] is True
    done = event_stream_response(events[-1], "c")
    assert done is not None
    assert done["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"
    assert done["statusUpdate"]["status"]["timestamp"] == "2026-03-01T09:30:02.123Z"
    assert done["statusUpdate"]["status"]["message"]["contextId"] == "c"

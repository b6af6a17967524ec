"""The domain Task as a wire Task: names, timestamps, history trimming, addressed messages."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from uuid import uuid4

import pytest

from api import wire
from domain.task import Task
from store.public_form.task_wire import iso_millis, task_to_wire


def _task(history_extra: int = 0) -> Task:
    now = datetime(2026, 3, 1, 9, 30, 0, 123456, tzinfo=UTC)
    task = Task.submit(
        task_id=uuid4(),
        now=now,
        tenant="default",
        context_id="ctx-1",
        skill="echo",
        skill_version=2,
        message={"messageId": "m0", "role": "ROLE_USER", "parts": [{"text": "hi"}]},
        params={},
    )
    epoch = task.grant_lease(worker="w", now=now, until=now + timedelta(hours=1))
    for step in range(history_extra):
        question = {"role": "ROLE_AGENT", "parts": [{"text": f"q{step}"}]}
        task.request_input(
            epoch=epoch,
            now=now,
            step=step,
            checkpoint={},
            question=question,
            deadline=now + timedelta(days=1),
        )
        task.receive_input(
            now=now, message={"messageId": f"a{step}", "role": "ROLE_USER", "parts": [{"text": "y"}]}
        )
        epoch = task.grant_lease(worker="w", now=now, until=now + timedelta(hours=1))
    return task


@pytest.mark.parametrize(
    ("moment", "expected"),
    [
        (datetime(2026, 3, 1, 9, 30, 0, 123456, tzinfo=UTC), "2026-03-01T09:30:00.123Z"),
        (datetime(2026, 3, 1, 9, 30, 0, tzinfo=UTC), "2026-03-01T09:30:00.000Z"),
        (
            datetime(2026, 3, 1, 11, 30, 0, 999999, tzinfo=timezone(timedelta(hours=2))),
            "2026-03-01T09:30:00.999Z",
        ),
    ],
)
def test_timestamps_are_utc_with_z_and_milliseconds(moment: datetime, expected: str) -> None:
    assert iso_millis(moment) == expected


def test_wire_task_has_the_a2a_names_and_validates() -> None:
    task = _task()

    wire_task = task_to_wire(task)

    assert wire_task["id"] == str(task.id)
    assert wire_task["contextId"] == "ctx-1"
    assert wire_task["status"] == {"state": "TASK_STATE_WORKING", "timestamp": "2026-03-01T09:30:00.123Z"}
    assert "artifacts" not in wire_task
    assert wire_task["metadata"] == {"skill": "echo", "skillVersion": 2}
    assert wire.WireTask.model_validate(wire_task).to_json() == wire_task


def test_history_length_trims_to_the_most_recent_messages() -> None:
    task = _task(history_extra=2)

    def texts(history_length: int | None) -> list[str]:
        return [m["parts"][0]["text"] for m in task_to_wire(task, history_length=history_length)["history"]]

    assert texts(None) == ["hi", "q0", "y", "q1", "y"]
    assert texts(2) == ["q1", "y"]
    assert texts(50) == ["hi", "q0", "y", "q1", "y"]
    assert "history" not in task_to_wire(task, history_length=0)


def test_messages_stored_without_ids_are_addressed_deterministically() -> None:
    task = _task(history_extra=1)

    question = task_to_wire(task)["history"][1]

    assert question["role"] == "ROLE_AGENT"
    assert question["taskId"] == str(task.id)
    assert question["contextId"] == "ctx-1"
    assert question["messageId"]
    assert task_to_wire(task)["history"][1]["messageId"] == question["messageId"]

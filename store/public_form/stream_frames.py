"""One event as the A2A 1.0 ``StreamResponse`` a client receives: webhooks now, SSE streams next.

A ``StreamResponse`` is exactly one of ``task``, ``message``, ``statusUpdate`` (a
``TaskStatusUpdateEvent``) or ``artifactUpdate`` (a ``TaskArtifactUpdateEvent``). It is built
from the event's public message (``store.public_form.event_json.event_message``: what NATS carries)
and the task's context id, with no reload, so a reader of NATS can build it from the message
itself:

- ``Submitted``: ``task``, the task as it was submitted (state ``TASK_STATE_SUBMITTED``);
- the first ``LeaseGranted`` (epoch 1, the task starts working), ``InputReceived``,
  ``ProgressReported``, ``InputRequested``, ``AuthRequested`` and the four terminal events:
  ``statusUpdate`` with the task's new status;
- ``ArtifactChunkAppended``: ``artifactUpdate`` (``append`` and ``lastChunk`` as recorded);
- every other event (step commits, checkpoints, leases, effects, push configs, expiry) changes
  nothing a client sees: ``None``, and nothing is sent for it.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any
from uuid import UUID

from domain.states import TaskState
from store.public_form.event_json import event_message
from store.public_form.task_wire import addressed, iso_millis

JSON = dict[str, Any]

STATUS_OF: dict[str, TaskState] = {
    "InputReceived": TaskState.WORKING,
    "ProgressReported": TaskState.WORKING,
    "InputRequested": TaskState.INPUT_REQUIRED,
    "AuthRequested": TaskState.AUTH_REQUIRED,
    "Completed": TaskState.COMPLETED,
    "Failed": TaskState.FAILED,
    "Canceled": TaskState.CANCELED,
    "Rejected": TaskState.REJECTED,
}
"""The state each status-changing event (besides the first ``LeaseGranted``) leaves the task in."""

STATUS_MESSAGE_MEMBER = {
    "ProgressReported": "message",
    "InputRequested": "question",
    "AuthRequested": "question",
    "Completed": "message",
    "Failed": "message",
    "Canceled": "message",
    "Rejected": "message",
}
"""The body member holding the event's new status message (``InputReceived`` clears it)."""


def stream_response(message: Mapping[str, Any], context_id: str) -> JSON | None:
    """The ``StreamResponse`` for one event message, or ``None`` for an event clients do not see.

    Args:
        message: ``{taskId, version, type, time, body, ...}`` as the relay publishes it; a
            reference message (``body`` null) must be read from the log first.
        context_id: The task's context id (``Submitted`` carries it, later events do not).
    """
    kind, body = message["type"], message["body"]
    task_id = UUID(str(message["taskId"]))
    timestamp = iso_millis(datetime.fromisoformat(str(message["time"])))
    if body is None:
        raise ValueError(f"event {kind} of task {task_id} has no body: read it from the log")
    if kind == "Submitted":
        return {"task": _submitted_task(task_id, timestamp, body)}
    if kind == "ArtifactChunkAppended":
        update: JSON = {"taskId": str(task_id), "contextId": context_id, "artifact": dict(body["artifact"])}
        if body.get("append"):
            update["append"] = True
        if body.get("last_chunk"):
            update["lastChunk"] = True
        return {"artifactUpdate": update}
    if kind == "LeaseGranted":
        if body.get("epoch") != 1:
            return None  # a later grant resumes a task that is already working
        state, status_message = TaskState.WORKING, None
    elif kind in STATUS_OF:
        state = STATUS_OF[kind]
        member = STATUS_MESSAGE_MEMBER.get(kind)
        status_message = body.get(member) if member is not None else None
    else:
        return None
    status: JSON = {"state": str(state), "timestamp": timestamp}
    if status_message is not None:
        status["message"] = addressed(status_message, task_id, context_id, default_role="ROLE_AGENT")
    return {"statusUpdate": {"taskId": str(task_id), "contextId": context_id, "status": status}}


def event_stream_response(event: Any, context_id: str, tenant: str = "default") -> JSON | None:
    """``stream_response`` of a stored (domain) event."""
    return stream_response(event_message(None, tenant, event), context_id)


def _submitted_task(task_id: UUID, timestamp: str, body: Mapping[str, Any]) -> JSON:
    """The wire ``Task`` right after ``Submitted`` (what ``task_to_wire`` gives at version 1)."""
    context_id = str(body["context_id"])
    return {
        "id": str(task_id),
        "contextId": context_id,
        "status": {"state": str(TaskState.SUBMITTED), "timestamp": timestamp},
        "history": [addressed(body["message"], task_id, context_id, default_role="ROLE_USER")],
        "metadata": {"skill": body["skill"], "skillVersion": body["skill_version"]},
    }

"""The domain ``Task`` as an A2A 1.0 wire ``Task`` (JSON); the gateway's answers and webhooks use it.

Every field comes from the aggregate, which is rebuilt from the task's events only, so what a
client sees is always a state the log holds. A client's secret parts show redacted
(``store.secrets.secret_parts``).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any
from uuid import NAMESPACE_URL, UUID, uuid5

from domain.task import Task
from store.secrets.secret_parts import redact_message

JSON = dict[str, Any]

AGENT_MESSAGE_NAMESPACE = uuid5(NAMESPACE_URL, "https://longhaul.invalid/agent-messages")
"""Namespace of the message ids derived for agent messages stored without one."""


def iso_millis(moment: datetime) -> str:
    """ISO 8601 in UTC with ``Z`` and millisecond precision (``2025-10-28T10:30:00.000Z``)."""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def task_to_wire(task: Task, *, history_length: int | None = None) -> JSON:
    """The wire ``Task``. ``history_length``: ``None`` all, ``0`` none (omitted), ``n`` the last n."""
    status: JSON = {"state": str(task.state), "timestamp": iso_millis(task.status_timestamp)}
    if task.status_message is not None:
        status["message"] = addressed(
            task.status_message, task.id, task.context_id, default_role="ROLE_AGENT"
        )
    wire: JSON = {"id": str(task.id), "contextId": task.context_id, "status": status}
    if task.artifacts:
        wire["artifacts"] = [dict(artifact) for artifact in task.artifacts.values()]
    history = task.history
    if history_length is not None:
        history = history[max(0, len(history) - history_length) :]
    if history:
        wire["history"] = [
            addressed(redact_message(message), task.id, task.context_id, default_role="ROLE_USER")
            for message in history
        ]
    wire["metadata"] = {"skill": task.skill, "skillVersion": task.skill_version}
    return wire


def addressed(message: JSON, task_id: UUID, context_id: str, *, default_role: str) -> JSON:
    """``message`` carrying the task's id and context, a role and a message id.

    Messages written by this gateway already carry them; this fills them in for messages a step
    stored without them, deterministically so that every read answers the same id.
    """
    out = dict(message)
    out.setdefault("taskId", str(task_id))
    out.setdefault("contextId", context_id)
    out.setdefault("role", default_role)
    if not out.get("messageId"):
        out["messageId"] = str(uuid5(AGENT_MESSAGE_NAMESPACE, f"{task_id}\n{_stable_key(message)}"))
    return out


def _stable_key(message: JSON) -> str:
    return json.dumps(message, sort_keys=True, default=str)

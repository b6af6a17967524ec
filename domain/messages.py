"""Messages in their A2A 1.0 wire shape: the one place that writes longhaul's own.

Every status message longhaul itself writes (a question, a progress note, why a task failed or
was canceled) is built here, addressed to its task. The caller gives the message id (the domain
draws no random numbers, as it reads no clock): a fresh ``uuid4`` where the message is written.
"""

from __future__ import annotations

from typing import Any

from domain.task import Task

JSON = dict[str, Any]


def agent_message(task: Task, text: str, data: JSON | None = None, *, message_id: str) -> JSON:
    """A ``ROLE_AGENT`` message for ``task`` with a text part (and a data part if given)."""
    parts: list[JSON] = [{"text": text}]
    if data is not None:
        parts.append({"data": data})
    return {
        "messageId": message_id,
        "role": "ROLE_AGENT",
        "parts": parts,
        "taskId": str(task.id),
        "contextId": task.context_id,
    }


def user_message(text: str | None = None, data: JSON | None = None, *, message_id: str) -> JSON:
    """A ``ROLE_USER`` message with an optional text part and an optional data part."""
    parts: list[JSON] = []
    if text is not None:
        parts.append({"text": text})
    if data is not None:
        parts.append({"data": data})
    return {"messageId": message_id, "role": "ROLE_USER", "parts": parts}

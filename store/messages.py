"""Agent messages in their A2A 1.0 wire shape: the one place that writes them.

Every status message longhaul itself writes (a question, a progress note, why a task failed or
was canceled) is built here, addressed to its task, with a fresh message id.
"""

from __future__ import annotations

from typing import Any
from uuid import uuid4

from domain.task import Task

JSON = dict[str, Any]


def agent_message(task: Task, text: str, data: JSON | None = None) -> JSON:
    """A ``ROLE_AGENT`` message for ``task`` with a text part (and a data part if given)."""
    parts: list[JSON] = [{"text": text}]
    if data is not None:
        parts.append({"data": data})
    return {
        "messageId": str(uuid4()),
        "role": "ROLE_AGENT",
        "parts": parts,
        "taskId": str(task.id),
        "contextId": task.context_id,
    }

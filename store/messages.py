"""Agent messages in their A2A 1.0 wire shape: the one place that writes them.

Every status message longhaul itself writes (a question, a progress note, why a task failed or
was canceled) is built here, addressed to its task, with a fresh message id.
"""

from __future__ import annotations

from typing import Any
from uuid import uuid4

from domain.task import Task
from store.secret_parts import is_secret

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


def user_message(text: str | None = None, data: JSON | None = None, *, message_id: str | None = None) -> JSON:
    """A ``ROLE_USER`` message with an optional text part and an optional data part."""
    parts: list[JSON] = []
    if text is not None:
        parts.append({"text": text})
    if data is not None:
        parts.append({"data": data})
    return {"messageId": message_id or str(uuid4()), "role": "ROLE_USER", "parts": parts}


def params_of(message: JSON) -> JSON:
    """Skill parameters of a first message: its first ``data`` part that is an object, else ``{}``.

    A part marked secret is never a parameter (parameters are stored in clear): a step reads it
    from ``latest_input`` instead.
    """
    for part in message.get("parts", ()):
        if isinstance(part, dict) and isinstance(part.get("data"), dict) and not is_secret(part):
            return dict(part["data"])
    return {}

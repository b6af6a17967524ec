"""A submitted task for tests that only need one to exist."""

from __future__ import annotations

from datetime import datetime
from typing import Any
from uuid import uuid4

from domain.task import Task


def new_task(
    now: datetime,
    *,
    tenant: str = "acme",
    skill: str = "echo",
    version: int = 1,
    text: str = "hi",
    params: dict[str, Any] | None = None,
) -> Task:
    """A task in TASK_STATE_SUBMITTED (not saved), with a one-text-part first message."""
    return Task.submit(
        task_id=uuid4(),
        now=now,
        tenant=tenant,
        context_id="c",
        skill=skill,
        skill_version=version,
        message={"messageId": str(uuid4()), "role": "ROLE_USER", "parts": [{"text": text}]},
        params=params or {},
    )

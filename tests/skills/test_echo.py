"""echo: one step, one artifact."""

from __future__ import annotations

import json

from tests.skills.harness import COMPLETED, new_task, run, user_message
from workers.skills.echo import ECHO


async def test_echoes_text_parts_joined_by_newlines() -> None:
    first = user_message("hello")
    first["parts"].append({"text": "world"})
    task = new_task(ECHO, first)

    await run(task)

    assert task.state == COMPLETED
    assert task.status_message == "echoed"
    artifact = task.artifacts["echo"]
    assert artifact["name"] == "echo"
    assert task.artifact_text("echo") == "hello\nworld"


async def test_echoes_data_parts_as_json_when_there_is_no_text() -> None:
    task = new_task(ECHO, user_message(data={"b": 1, "a": [2]}))

    await run(task)

    assert json.loads(task.artifact_text("echo")) == {"a": [2], "b": 1}

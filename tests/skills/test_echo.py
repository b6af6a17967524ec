"""echo: one step, one artifact (on the real runtime in memory, ``longhaul.testing.SkillKit``)."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from domain.states import TaskState
from longhaul.testing import SkillKit, artifact_text, message_text
from workers.skills.echo import ECHO


@pytest.fixture
def kit() -> Iterator[SkillKit]:
    with SkillKit(ECHO) as kit:
        yield kit


async def test_echoes_text_parts_joined_by_newlines(kit: SkillKit) -> None:
    first = {"role": "ROLE_USER", "parts": [{"text": "hello"}, {"text": "world"}]}
    task_id = kit.submit("echo", message=first)

    task = await kit.run(task_id)

    assert task.state == TaskState.COMPLETED
    assert message_text(task.status_message) == "echoed"
    artifact = task.artifacts["echo"]
    assert artifact["name"] == "echo"
    assert artifact_text(task, "echo") == "hello\nworld"
    assert kit.commits(task_id) == [["ArtifactChunkAppended", "StepCompleted", "Completed"]]


async def test_echoes_data_parts_as_json_when_there_is_no_text(kit: SkillKit) -> None:
    task_id = kit.submit("echo", data={"b": 1, "a": [2]})

    task = await kit.run(task_id)

    assert json.loads(artifact_text(task, "echo")) == {"a": [2], "b": 1}

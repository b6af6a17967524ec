"""conformance: the TCK's messageId prefixes, longest first."""

from __future__ import annotations

import base64

import pytest

from domain.skill import Skill
from tests.skills.harness import (
    COMPLETED,
    INPUT_REQUIRED,
    REJECTED,
    HarnessTask,
    SimulatedCrashError,
    answer,
    new_task,
    run,
    user_message,
)
from workers.skills.conformance import conformance_skill, scenario_of

SESSION = "0a1b2c3d"


@pytest.fixture
def skill() -> Skill:
    return conformance_skill(resubscribe_hold_s=0.01, delayed_s=0.01)


def start(skill: Skill, prefix: str) -> HarnessTask:
    return new_task(skill, user_message("hi", message_id=f"{prefix}-{SESSION}"))


def only_part(task: HarnessTask) -> dict[str, object]:
    (artifact,) = task.artifacts.values()
    (part,) = artifact["parts"]
    assert isinstance(part, dict)
    return part


async def test_complete_task_says_hello(skill: Skill) -> None:
    task = start(skill, "tck-complete-task")
    await run(task)
    assert task.state == COMPLETED
    assert task.status_message == "Hello from TCK"
    assert task.artifacts == {}


async def test_unknown_ids_complete(skill: Skill) -> None:
    task = new_task(skill, user_message("hi", message_id="something-else"))
    await run(task)
    assert task.state == COMPLETED
    assert task.status_message == "Hello from TCK"


async def test_text_artifact(skill: Skill) -> None:
    task = start(skill, "tck-artifact-text")
    await run(task)
    assert task.state == COMPLETED
    assert only_part(task) == {"text": "Generated text content"}


async def test_file_artifact(skill: Skill) -> None:
    task = start(skill, "tck-artifact-file")
    await run(task)
    part = only_part(task)
    assert part["filename"] == "output.txt"
    assert part["mediaType"] == "text/plain"
    assert isinstance(part["raw"], str)
    assert base64.b64decode(part["raw"]) == b"file output"


async def test_file_url_artifact_wins_over_the_shorter_prefix(skill: Skill) -> None:
    task = start(skill, "tck-artifact-file-url")
    await run(task)
    assert only_part(task) == {
        "url": "https://example.com/output.txt",
        "filename": "output.txt",
        "mediaType": "text/plain",
    }


async def test_data_artifact(skill: Skill) -> None:
    task = start(skill, "tck-artifact-data")
    await run(task)
    assert only_part(task) == {"data": {"key": "value", "count": 42}}


async def test_input_required_then_completes_on_the_follow_up(skill: Skill) -> None:
    task = start(skill, "tck-input-required")
    await run(task)
    assert task.state == INPUT_REQUIRED

    answer(task, user_message("more", message_id=f"tck-input-required-{SESSION}"))
    await run(task)

    assert task.state == COMPLETED
    assert task.status_message == "Received: more"


async def test_reject(skill: Skill) -> None:
    task = start(skill, "tck-reject-task")
    await run(task)
    assert task.state == REJECTED
    assert task.status_message == "rejected"


async def test_chunked_stream(skill: Skill) -> None:
    task = start(skill, "tck-stream-artifact-chunked")
    await run(task)
    assert task.state == COMPLETED
    chunks = [(e.artifact["parts"][0]["text"], e.append, e.last_chunk) for e in task.emitted]
    assert chunks == [("chunk-1 ", False, False), ("chunk-2", True, True)]
    assert task.artifact_text("tck-artifact") == "chunk-1 chunk-2"


async def test_chunked_stream_resumes_after_the_first_chunk(skill: Skill) -> None:
    task = start(skill, "tck-stream-artifact-chunked")
    task.crash_after_commits = 2
    with pytest.raises(SimulatedCrashError):
        await run(task)

    await run(task)

    assert task.artifact_text("tck-artifact") == "chunk-1 chunk-2"
    assert len(task.emitted) == 2


@pytest.mark.parametrize(
    ("prefix", "text"),
    [
        ("tck-stream-001", "Stream hello from TCK"),
        ("tck-stream-003", "Stream task lifecycle"),
        ("tck-stream-ordering-001", "Ordered output"),
        ("tck-stream-artifact-text", "Streamed text content"),
        ("tck-stream-999", "Stream output"),
    ],
)
async def test_streams_emit_an_artifact_then_complete(skill: Skill, prefix: str, text: str) -> None:
    task = start(skill, prefix)
    await run(task)
    assert task.state == COMPLETED
    assert [e.artifact["parts"] for e in task.emitted] == [[{"text": text}]]
    assert [kind for kind, _ in task.commits] == ["artifact", "step"]


async def test_stream_artifact_file(skill: Skill) -> None:
    task = start(skill, "tck-stream-artifact-file")
    await run(task)
    assert only_part(task)["filename"] == "output.txt"


async def test_stream_002_just_completes(skill: Skill) -> None:
    task = start(skill, "tck-stream-002")
    await run(task)
    assert task.state == COMPLETED
    assert task.emitted == []


@pytest.mark.parametrize(
    ("prefix", "message"),
    [
        ("test-resubscribe-message-id", None),
        ("tck-delayed-complete", "Done after delay"),
        ("tck-message-response", "Direct message response"),
    ],
)
async def test_holds_and_messages(skill: Skill, prefix: str, message: str | None) -> None:
    task = start(skill, prefix)
    await run(task)
    assert task.state == COMPLETED
    assert task.status_message == message


def test_longest_prefix_first() -> None:
    assert scenario_of("tck-artifact-file-url-1234") == "tck-artifact-file-url"
    assert scenario_of("tck-artifact-file-1234") == "tck-artifact-file"
    assert scenario_of("tck-stream-artifact-file-1") == "tck-stream-artifact-file"
    assert scenario_of("tck-stream-artifact-chunked-1") == "tck-stream-artifact-chunked"
    assert scenario_of("nope") == ""

"""conformance: the TCK's messageId prefixes, longest first (on the real runtime in memory).

New tasks run version 2, which acts on every message's prefix; version 1 stays runnable.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from uuid import UUID

import pytest

from domain.states import TaskState
from domain.task import Task
from longhaul.testing import SkillKit, artifact_text, message_text
from workers.skills.conformance import conformance_skills, scenario_of

SESSION = "0a1b2c3d"


@pytest.fixture
def kit() -> Iterator[SkillKit]:
    with SkillKit(*conformance_skills(resubscribe_hold_s=0.01, delayed_s=0.01)) as kit:
        yield kit


def start(kit: SkillKit, prefix: str, version: int | None = None) -> UUID:
    return kit.submit("conformance", text="hi", message_id=f"{prefix}-{SESSION}", version=version)


def only_part(task: Task) -> dict[str, object]:
    (artifact,) = task.artifacts.values()
    (part,) = artifact["parts"]
    assert isinstance(part, dict)
    return part


def chunks(kit: SkillKit, task_id: UUID) -> list[Task.ArtifactChunkAppended]:
    return kit.events(task_id, Task.ArtifactChunkAppended)


async def test_complete_task_says_hello(kit: SkillKit) -> None:
    task = await kit.run(start(kit, "tck-complete-task"))
    assert task.state == TaskState.COMPLETED
    assert message_text(task.status_message) == "Hello from TCK"
    assert task.artifacts == {}


async def test_unknown_ids_complete(kit: SkillKit) -> None:
    task = await kit.run(kit.submit("conformance", text="hi", message_id="something-else"))
    assert task.state == TaskState.COMPLETED
    assert message_text(task.status_message) == "Hello from TCK"


async def test_text_artifact(kit: SkillKit) -> None:
    task = await kit.run(start(kit, "tck-artifact-text"))
    assert task.state == TaskState.COMPLETED
    assert only_part(task) == {"text": "Generated text content"}


async def test_file_artifact(kit: SkillKit) -> None:
    task = await kit.run(start(kit, "tck-artifact-file"))
    part = only_part(task)
    assert part["filename"] == "output.txt"
    assert part["mediaType"] == "text/plain"
    assert isinstance(part["raw"], str)
    assert base64.b64decode(part["raw"]) == b"file output"


async def test_file_url_artifact_wins_over_the_shorter_prefix(kit: SkillKit) -> None:
    task = await kit.run(start(kit, "tck-artifact-file-url"))
    assert only_part(task) == {
        "url": "https://example.com/output.txt",
        "filename": "output.txt",
        "mediaType": "text/plain",
    }


async def test_data_artifact(kit: SkillKit) -> None:
    task = await kit.run(start(kit, "tck-artifact-data"))
    assert only_part(task) == {"data": {"key": "value", "count": 42}}


async def test_each_answer_acts_on_its_own_prefix_as_the_tck_history_tests_send_them(
    kit: SkillKit,
) -> None:
    task_id = start(kit, "tck-input-required")
    task = await kit.run(task_id)
    assert task.skill_version == 2
    assert task.state == TaskState.INPUT_REQUIRED
    assert message_text(task.status_message) == "Input required"

    for text in ["TCK history message 1", "TCK history message 2"]:
        kit.answer(task_id, text=text, message_id=f"tck-input-required-{SESSION}")
        task = await kit.run(task_id)
        assert task.state == TaskState.INPUT_REQUIRED, text

    kit.answer(task_id, text="done", message_id=f"tck-complete-task-{SESSION}")
    task = await kit.run(task_id)

    assert task.state == TaskState.COMPLETED
    assert message_text(task.status_message) == "Hello from TCK"
    users = [m for m in task.history if m["role"] == "ROLE_USER"]
    assert [message_text(m) for m in users] == [
        "hi",
        "TCK history message 1",
        "TCK history message 2",
        "done",
    ]


async def test_an_answer_of_another_scenario_runs_that_scenario(kit: SkillKit) -> None:
    task_id = start(kit, "tck-input-required")
    await kit.run(task_id)

    kit.answer(task_id, text="go", message_id=f"tck-artifact-text-{SESSION}")
    task = await kit.run(task_id)

    assert task.state == TaskState.COMPLETED
    assert only_part(task) == {"text": "Generated text content"}


async def test_version_1_still_completes_any_answer_with_what_it_received(kit: SkillKit) -> None:
    task_id = start(kit, "tck-input-required", version=1)
    task = await kit.run(task_id)
    assert task.skill_version == 1
    assert task.state == TaskState.INPUT_REQUIRED

    kit.answer(task_id, text="more", message_id=f"tck-input-required-{SESSION}")
    task = await kit.run(task_id)

    assert task.state == TaskState.COMPLETED
    assert message_text(task.status_message) == "Received: more"


async def test_reject(kit: SkillKit) -> None:
    task = await kit.run(start(kit, "tck-reject-task"))
    assert task.state == TaskState.REJECTED
    assert message_text(task.status_message) == "rejected"


async def test_chunked_stream(kit: SkillKit) -> None:
    task_id = start(kit, "tck-stream-artifact-chunked")
    task = await kit.run(task_id)
    assert task.state == TaskState.COMPLETED
    sent = [(e.artifact["parts"][0]["text"], e.append, e.last_chunk) for e in chunks(kit, task_id)]
    assert sent == [("chunk-1 ", False, False), ("chunk-2", True, True)]
    assert artifact_text(task, "tck-artifact") == "chunk-1 chunk-2"
    assert kit.commits(task_id) == [
        ["ArtifactChunkAppended", "CheckpointSaved"],  # each chunk with the count emitted
        ["ArtifactChunkAppended", "CheckpointSaved"],
        ["StepCompleted", "Completed"],
    ]


@pytest.mark.parametrize("crash_after", [1, 2])
async def test_no_crash_point_sends_a_chunk_twice(kit: SkillKit, crash_after: int) -> None:
    task_id = start(kit, "tck-stream-artifact-chunked")
    await kit.run(task_id, crash_after_commit=crash_after)

    task = await kit.run(task_id)

    assert task.state == TaskState.COMPLETED
    sent = [e.artifact["parts"][0]["text"] for e in chunks(kit, task_id)]
    assert sent == ["chunk-1 ", "chunk-2"]


async def test_chunked_stream_resumes_after_the_first_chunk(kit: SkillKit) -> None:
    task_id = start(kit, "tck-stream-artifact-chunked")
    task = await kit.run(task_id, crash_after_commit=1)  # chunk 1 and its count are saved
    assert task.state == TaskState.WORKING

    task = await kit.run(task_id)

    assert task.state == TaskState.COMPLETED
    assert artifact_text(task, "tck-artifact") == "chunk-1 chunk-2"
    assert len(chunks(kit, task_id)) == 2


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
async def test_streams_emit_an_artifact_then_complete(kit: SkillKit, prefix: str, text: str) -> None:
    task_id = start(kit, prefix)
    task = await kit.run(task_id)
    assert task.state == TaskState.COMPLETED
    assert [e.artifact["parts"] for e in chunks(kit, task_id)] == [[{"text": text}]]
    assert kit.commits(task_id) == [["ArtifactChunkAppended"], ["StepCompleted", "Completed"]]


async def test_stream_artifact_file(kit: SkillKit) -> None:
    task = await kit.run(start(kit, "tck-stream-artifact-file"))
    assert only_part(task)["filename"] == "output.txt"


async def test_stream_002_just_completes(kit: SkillKit) -> None:
    task_id = start(kit, "tck-stream-002")
    task = await kit.run(task_id)
    assert task.state == TaskState.COMPLETED
    assert chunks(kit, task_id) == []


@pytest.mark.parametrize(
    ("prefix", "message"),
    [
        ("test-resubscribe-message-id", None),
        ("tck-delayed-complete", "Done after delay"),
        ("tck-message-response", "Direct message response"),
    ],
)
async def test_holds_and_messages(kit: SkillKit, prefix: str, message: str | None) -> None:
    task = await kit.run(start(kit, prefix))
    assert task.state == TaskState.COMPLETED
    assert message_text(task.status_message) == message


def test_longest_prefix_first() -> None:
    assert scenario_of("tck-artifact-file-url-1234") == "tck-artifact-file-url"
    assert scenario_of("tck-artifact-file-1234") == "tck-artifact-file"
    assert scenario_of("tck-stream-artifact-file-1") == "tck-stream-artifact-file"
    assert scenario_of("tck-stream-artifact-chunked-1") == "tck-stream-artifact-chunked"
    assert scenario_of("nope") == ""


def test_only_the_message_response_scenario_answers_with_a_message() -> None:
    skill = conformance_skills()[-1]
    assert skill.version == 2
    assert skill.answers_with_message({"messageId": f"tck-message-response-{SESSION}"})
    for prefix in ["tck-complete-task", "tck-artifact-text", "tck-input-required", "tck-message", "x"]:
        assert not skill.answers_with_message({"messageId": f"{prefix}-{SESSION}"}), prefix
    assert not skill.answers_with_message({})

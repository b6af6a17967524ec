"""research: the API-key question, then a chunked report, one commit per chunk, resumable.

On the real runtime in memory (``longhaul.testing.SkillKit``).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from typing import Any
from uuid import UUID

import pytest

from domain.states import TaskState
from domain.task import Pause, Task
from longhaul.testing import SkillKit, artifact_text, message_text
from store.secrets.task_keys import SecretUnreadableError
from workers.skills.research import QUESTION, RESEARCH, mask

API_KEY = "sk-live-0123456789abcdef"
CHUNK = ["ArtifactChunkAppended", "CheckpointSaved", "ProgressReported"]
"""One commit of ``write_report``: a chunk and the count emitted, together."""


@pytest.fixture
def kit() -> Iterator[SkillKit]:
    with SkillKit(RESEARCH) as kit:
        yield kit


def start(kit: SkillKit, **params: Any) -> UUID:
    return kit.submit("research", text="Analyze ACME pricing", data=params or None)


async def answered(kit: SkillKit, **params: Any) -> UUID:
    """A task that asked for the key and got it (and has not run since)."""
    task_id = start(kit, **params)
    task = await kit.run(task_id)
    assert task.state == TaskState.AUTH_REQUIRED
    kit.answer(task_id, data={"api_key": API_KEY})
    return task_id


def chunks(kit: SkillKit, task_id: UUID) -> list[Task.ArtifactChunkAppended]:
    return kit.events(task_id, Task.ArtifactChunkAppended)


async def test_asks_for_the_key_then_streams_the_report_in_chunks(kit: SkillKit) -> None:
    task_id = start(kit)

    task = await kit.run(task_id)

    assert task.state == TaskState.AUTH_REQUIRED
    assert isinstance(task.pause, Pause)
    assert message_text(task.status_message) == QUESTION

    kit.answer(task_id, data={"api_key": API_KEY})
    task = await kit.run(task_id)

    assert task.state == TaskState.COMPLETED
    emitted = chunks(kit, task_id)
    assert [(e.append, e.last_chunk) for e in emitted] == [
        (False, False),
        (True, False),
        (True, False),
        (True, False),
        (True, True),
    ]
    assert all(e.artifact["artifactId"] == "report" for e in emitted)
    # the question, 5 chunks (each with its count and a progress message), the end
    assert kit.commits(task_id) == [["AuthRequested"], *[CHUNK] * 5, ["StepCompleted", "Completed"]]
    progress = [message_text(e.message) for e in kit.events(task_id, Task.ProgressReported)]
    assert progress == [f"Wrote chunk {n} of 5 of the report." for n in range(1, 6)]
    report = artifact_text(task, "report")
    assert report.startswith("# Research report: Analyze ACME pricing")
    assert "## Finding 5" in report
    assert report.endswith("End of report.\n")
    assert task.artifacts["report"]["parts"][0]["mediaType"] == "text/markdown"


async def test_the_key_never_appears_in_clear(kit: SkillKit) -> None:
    task_id = await answered(kit, chunks=3)

    task = await kit.run(task_id)

    assert task.state == TaskState.COMPLETED
    assert "****cdef" in artifact_text(task, "report")
    # Everything the task's steps wrote, and the task's state. The client's answer itself is
    # the one exception: A2A keeps it verbatim in the task's history (InputReceived).
    written = [dataclasses.asdict(e) for e in kit.events(task_id) if not isinstance(e, Task.InputReceived)]
    durable = json.dumps(
        [written, task.artifacts, task.checkpoint, task.effects, task.status_message], default=str
    )
    assert API_KEY not in durable
    assert API_KEY[:-4] not in durable


async def test_a_crash_resumes_after_the_last_committed_chunk(kit: SkillKit) -> None:
    task_id = await answered(kit, chunks=5)

    task = await kit.run(task_id, crash_after_commit=3)  # chunk 3 and its count committed together

    assert task.state == TaskState.WORKING
    assert task.checkpoint["emitted"] == 3

    task = await kit.run(task_id)

    assert task.state == TaskState.COMPLETED
    assert len(chunks(kit, task_id)) == 5  # nothing emitted twice
    assert [e.last_chunk for e in chunks(kit, task_id)] == [False, False, False, False, True]
    assert [f"## Finding {n}" in artifact_text(task, "report") for n in range(1, 6)] == [True] * 5
    workers = [e.worker for e in kit.events(task_id, Task.LeaseGranted)]
    assert workers == ["kit-worker-1", "kit-worker-2", "kit-worker-3"]  # ask, crash, resume


@pytest.mark.parametrize("crash_after", [1, 2, 3, 4, 5])
async def test_no_crash_point_sends_a_chunk_twice(kit: SkillKit, crash_after: int) -> None:
    task_id = await answered(kit, chunks=5)

    task = await kit.run(task_id, crash_after_commit=crash_after)
    assert task.state == TaskState.WORKING
    task = await kit.run(task_id)

    assert task.state == TaskState.COMPLETED
    assert [e.last_chunk for e in chunks(kit, task_id)] == [False, False, False, False, True]


async def test_one_chunk_is_first_and_last(kit: SkillKit) -> None:
    task_id = await answered(kit, chunks=1)

    task = await kit.run(task_id)

    assert [(e.append, e.last_chunk) for e in chunks(kit, task_id)] == [(False, True)]
    assert artifact_text(task, "report").endswith("End of report.\n")


async def test_an_answer_without_a_key_fails_clearly(kit: SkillKit) -> None:
    task_id = start(kit)
    await kit.run(task_id)
    kit.answer(task_id, text="here you go")

    task = await kit.run(task_id)

    assert task.state == TaskState.FAILED
    reason = message_text(task.status_message)
    assert reason is not None
    assert "api_key" in reason
    assert chunks(kit, task_id) == []


@pytest.mark.parametrize(
    "params", [{"chunks": 0}, {"chunks": "five"}, {"chunks": 5.5}, {"chunks": True}, {"chunk_delay_ms": -1}]
)
async def test_bad_parameters_are_rejected(kit: SkillKit, params: dict[str, Any]) -> None:
    task = await kit.run(start(kit, **params))

    assert task.state == TaskState.REJECTED


def test_mask_keeps_only_the_tail_of_long_keys() -> None:
    assert mask(API_KEY) == "****cdef"
    assert mask("short") == "****"


async def test_the_key_is_sealed_in_the_log_read_by_the_step_and_unreadable_after_the_end(
    kit: SkillKit,
) -> None:
    task_id = await answered(kit, chunks=2)
    assert API_KEY not in stored(kit, task_id)
    assert kit.app.task_keys.get(task_id) is not None  # the key lives while the task does

    task = await kit.run(task_id)

    assert task.state == TaskState.COMPLETED
    assert f"`{mask(API_KEY)}`" in artifact_text(task, "report")  # the step read the key ...
    assert API_KEY not in stored(kit, task_id)  # ... and nothing of it is stored in clear
    assert kit.app.task_keys.get(task_id) is None  # the task ended: its key is gone
    with pytest.raises(SecretUnreadableError):
        kit.app.reveal(task, task.latest_input)


async def test_a_task_whose_key_was_erased_fails_clearly_when_its_step_needs_it(kit: SkillKit) -> None:
    task_id = await answered(kit)

    assert kit.app.erase_tenant("default") == 1
    task = await kit.run(task_id)

    assert task.state == TaskState.FAILED
    reason = message_text(task.status_message)
    assert reason is not None
    assert reason.startswith("step 1 cannot run: task ")
    assert "longhaul erase" in reason
    assert chunks(kit, task_id) == []
    assert kit.step_errors(task_id) == []  # failed at once: no attempt of the step was made


def stored(kit: SkillKit, task_id: UUID) -> str:
    """The task's stored events and snapshots, as the recorder holds them."""
    events = kit.app.recorder.select_events(task_id)
    snapshots = kit.app.snapshots.recorder.select_events(task_id) if kit.app.snapshots else []
    return "".join(e.state.decode() for e in [*events, *snapshots])
